"""Where the cluster view comes from: a directory of manifests, or the Kubernetes API.

feed: {directory: PATH}                  the embedded default (cluster/files.py)
feed: {kubernetes: {kubeconfig: PATH}}   the API (cluster/kube.py); no kubeconfig: in-cluster
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from netattach.settings import fields
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

_FEED_KEYS: Final = ("directory", "kubernetes")
_KUBERNETES_KEYS: Final = ("kubeconfig",)


class DirectoryFeed(NamedTuple):
    """The cluster view comes from a directory of YAML manifests (the embedded default)."""

    path: Path


class KubernetesFeed(NamedTuple):
    """The cluster view comes from the Kubernetes API; no kubeconfig means in-cluster config."""

    kubeconfig: Path | None = None


def source(value: object, key: str, problems: list[str]) -> DirectoryFeed | KubernetesFeed | None:
    """The `feed` key: which of the two feeds, and where it reads."""
    forms = "{directory: PATH} or {kubernetes: {kubeconfig: PATH}}"
    if value is None:
        # No default: a daemon watching the wrong place would fail every ADD with "pod not
        # found" instead of failing once, at start-up, with this message.
        problems.append(f"{key}: required, one of {forms}, got nothing")
        return None
    if not isinstance(value, Mapping):
        problems.append(f"{key}: must be one of {forms}, got {fields.show(value)}")
        return None
    fields.check_keys(value, _FEED_KEYS, f"{key}.", problems)
    given = [name for name in _FEED_KEYS if name in value]
    if len(given) != 1:
        problems.append(
            f"{key}: must have exactly one of 'directory' and 'kubernetes', "
            f"got {fields.show(value)}"
        )
        return None
    if given == ["directory"]:
        directory = value["directory"]
        path = fields.path(directory, f"{key}.directory", problems)
        if directory is None:
            problems.append(f"{key}.directory: must be an absolute path, got None")
        return None if path is None else DirectoryFeed(path=path)
    return _kubernetes(value["kubernetes"], f"{key}.kubernetes", problems)


def _kubernetes(value: object, key: str, problems: list[str]) -> KubernetesFeed | None:
    # `kubernetes: {}` (or a bare `kubernetes:`) is the in-cluster configuration: the pod's
    # service account, as a DaemonSet runs.
    if value is None:
        return KubernetesFeed()
    if not isinstance(value, Mapping):
        problems.append(
            f"{key}: must be a mapping such as {{kubeconfig: PATH}}, got {fields.show(value)}"
        )
        return None
    start = len(problems)
    fields.check_keys(value, _KUBERNETES_KEYS, f"{key}.", problems)
    kubeconfig = fields.path(value.get("kubeconfig"), f"{key}.kubeconfig", problems)
    if len(problems) > start:
        return None
    return KubernetesFeed(kubeconfig=kubeconfig)


def wants_kubernetes(value: object) -> bool:
    """Does the raw `feed` value name the Kubernetes feed (the one that needs a node name)?"""
    return isinstance(value, Mapping) and "kubernetes" in value
