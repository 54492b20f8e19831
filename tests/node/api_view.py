"""What tests/node puts in and reads back from the in-repo API server: pods on the node, NADs,
a pod's network-status annotation and its Events."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from netattach.cluster import model
from tests.e2e.kube_harness import RemoteKubeApi
from tests.kube import objects
from tests.kube.api import Obj


def pod_object(
    name: str,
    namespace: str,
    node_name: str,
    networks: str | None,
    *,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """A Pending pod bound to `node_name`, with the selection annotation unless None."""
    wanted = dict(annotations or {})
    if networks is not None:
        wanted[model.NETWORKS_ANNOTATION] = networks
    return objects.pod(
        name,
        namespace,
        node_name=node_name,
        annotations=wanted or None,
        status={"phase": "Pending"},
    )


def nad_object(name: str, namespace: str, config: Mapping[str, Any]) -> Obj:
    return objects.nad(name, namespace, config=dict(config))


def api_status(api: RemoteKubeApi, namespace: str, name: str) -> list[dict[str, Any]] | None:
    """The pod's network-status annotation, parsed; None when absent (or no such pod)."""
    stored = api.get("Pod", name, namespace)
    if stored is None:
        return None
    text = (stored["metadata"].get("annotations") or {}).get(model.STATUS_ANNOTATION)
    if text is None:
        return None
    entries = json.loads(text)
    assert isinstance(entries, list)
    return entries


def api_events(api: RemoteKubeApi, namespace: str, name: str, reason: str) -> list[Obj]:
    """The pod's Events with `reason`, oldest first."""
    return [e for e in api.events_for(namespace, name) if e.get("reason") == reason]


def shown(status: list[dict[str, Any]] | None) -> list[tuple[str, str]]:
    """(network, interface) of each network-status entry, in order."""
    return [(entry["name"], entry["interface"]) for entry in status or []]
