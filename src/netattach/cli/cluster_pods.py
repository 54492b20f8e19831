"""Pod reports from cluster objects: the manifests of a directory feed, or the API's objects.

The daemon reports what it recorded (`daemon/introspect.py`); here the report comes from what
the cluster shows instead, the pods' selection annotations and their network-status, which is
what a user of kubectl sees. It uses the daemon's own readers: `attach.selection` for the
annotation, `plan.choose_ifnames` for the interface each selection gets, `attach.delegate` for a
NAD's config, `policy.model` for MultiNetworkPolicies. Problems it finds, beside introspect's:

    a pod that selects networks but has no network-status (never attached, or its ADD failed;
    a pod not scheduled yet or finished has no sandbox to attach, and is no problem)
    a selection with no status entry of that network on the interface it gets
    a selection annotation or a network-status that does not parse
    a MultiNetworkPolicy that does not parse (the daemon skips it: traffic it meant to block
    passes), reported once for the whole listing
"""

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from netattach.attach import delegate, selection
from netattach.cluster import model, store
from netattach.cni import errors
from netattach.daemon import introspect
from netattach.pods import plan
from netattach.policy import model as policy_model

# The pod's network-status list (None: it has none); `errors.CNIError` when it cannot be read.
StatusReader = Callable[[model.KubeObject], list[dict[str, object]] | None]
DEFAULT_IFNAME = "eth0"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Networks:
    """What the source knows of the networks' configs, to tell which should give addresses."""

    default: tuple[str, Mapping[str, Any]] | None = None  # the default's status name, config
    networks_dir: Path | None = None  # the node's on-disk networks (NAD-IMPLICIT); None: unknown


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Listing:
    pods: list[introspect.PodReport]
    policies: list[policy_model.Policy]
    problems: list[str]  # of the listing as a whole (invalid policies)
    # the daemon's source only: the node's pools of netattach's IPAM
    pools: list[introspect.PoolReport] = dataclasses.field(default_factory=list)


def status_from_annotation(pod: model.KubeObject) -> list[dict[str, object]] | None:
    """The network-status annotation of a pod from the API."""
    text = model.annotation(pod, model.STATUS_ANNOTATION)
    if text is None:
        return None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise errors.DecodingFailureError(
            f"annotation {model.STATUS_ANNOTATION} is not JSON ({str(exc)[:80]})", text[:120]
        ) from exc
    if not isinstance(raw, list) or not all(isinstance(entry, dict) for entry in raw):
        raise errors.DecodingFailureError(
            f"annotation {model.STATUS_ANNOTATION} is not a JSON list of objects", text[:120]
        )
    return raw


def _nad_gives_ips(view: store.ClusterStore, reference: str, networks: Networks) -> bool | None:
    namespace, _, name = reference.partition("/")
    nad = view.lookup_nad(namespace, name) if name else None
    if nad is None:
        return None
    spec = nad.get("spec")
    config = spec.get("config") if isinstance(spec, dict) else None
    if not (isinstance(config, str) and config) and networks.networks_dir is None:
        return None  # the config is a file on some node this source cannot read
    try:
        found = delegate.resolve_delegate(
            namespace=namespace,
            name=name,
            spec_config=config if isinstance(config, str) else None,
            has_spec=isinstance(spec, dict),
            networks_dir=networks.networks_dir or Path("/nonexistent"),
        )
    except errors.CNIError:
        return None
    return introspect.network_gives_ips(found.network.raw)


def _expects_ips(
    view: store.ClusterStore, att: introspect.AttachmentReport, networks: Networks
) -> bool | None:
    if att.default:
        if networks.default is not None and networks.default[0] == att.network:
            return introspect.network_gives_ips(networks.default[1])
        return None
    return _nad_gives_ips(view, att.network, networks)


def _governing(
    policies: Sequence[policy_model.Policy], pod: model.KubeObject, network: str
) -> tuple[str, ...]:
    # POL-SELECT: a policy governs the pod's interface on a network it names, when it selects
    # the pod (same namespace, podSelector) — as policy.compile decides it.
    labels = model.labels(pod)
    return tuple(
        p.key
        for p in policies
        if p.namespace == model.namespace_of(pod)
        and network in p.networks
        and p.pod_selector.matches(labels)
    )


def _missing_selections(
    selections: Sequence[selection.Selection], attachments: Sequence[introspect.AttachmentReport]
) -> tuple[list[str], dict[int, bool]]:
    """Selections without their status entry; which entries asked for IPs (by index)."""
    default_ifname = next((a.interface for a in attachments if a.default), DEFAULT_IFNAME)
    problems: list[str] = []
    requested: dict[int, bool] = {}
    for chosen, ifname in zip(
        selections, plan.choose_ifnames(default_ifname, selections), strict=True
    ):
        index = next(
            (
                i
                for i, a in enumerate(attachments)
                if a.network == chosen.reference() and a.interface == ifname
            ),
            None,
        )
        if index is None:
            problems.append(
                f"selects network {chosen.reference()!r} on interface {ifname!r}, but its "
                "network-status has no such entry"
            )
        elif chosen.ips:
            requested[index] = True
    return problems, requested


def pod_report(
    view: store.ClusterStore,
    pod: model.KubeObject,
    read_status: StatusReader,
    networks: Networks,
    policies: Sequence[policy_model.Policy],
) -> introspect.PodReport:
    namespace, name = model.namespace_of(pod), model.name_of(pod)
    problems: list[str] = []
    try:
        selections = selection.parse_selections(
            model.annotation(pod, model.NETWORKS_ANNOTATION) or "",
            pod_namespace=namespace,
            pod=name,
        )
    except errors.InvalidSelectionError as exc:
        problems.append(str(exc))
        selections = ()
    try:
        entries = read_status(pod)
    except errors.CNIError as exc:
        problems.append(f"network-status: {exc}")
        entries = []
    report = introspect.PodReport(namespace=namespace, name=name, uid=model.uid_of(pod))
    if entries is None:
        if selections and not _without_sandbox(pod):
            wanted = ", ".join(repr(s.reference()) for s in selections)
            problems.append(
                f"selects {wanted} but has no network-status: not attached yet, or its ADD "
                "failed (see the pod's events)"
            )
        return dataclasses.replace(report, problems=tuple(problems))
    attachments = [introspect.attachment_from_status(entry) for entry in entries]
    missing, requested = _missing_selections(selections, attachments)
    problems += missing
    for index, shown in enumerate(attachments):
        attachments[index] = dataclasses.replace(
            shown,
            expects_ips=requested.get(index) or _expects_ips(view, shown, networks),
            policies=_governing(policies, pod, shown.network),
        )
        problems += introspect.attachment_problems(attachments[index])
    return dataclasses.replace(report, attachments=tuple(attachments), problems=tuple(problems))


def _without_sandbox(pod: model.KubeObject) -> bool:
    """A pod that has no sandbox to attach (yet, or any more): not scheduled, or finished."""
    phase = (pod.get("status") or {}).get("phase")
    scheduled = bool((pod.get("spec") or {}).get("nodeName"))
    return phase in ("Succeeded", "Failed") or (phase == "Pending" and not scheduled)


def _has_networks(pod: model.KubeObject) -> bool:
    return (
        model.annotation(pod, model.NETWORKS_ANNOTATION) is not None
        or model.annotation(pod, model.STATUS_ANNOTATION) is not None
    )


def build_listing(
    view: store.ClusterStore,
    read_status: StatusReader,
    networks: Networks,
    *,
    namespace: str = "",
    name: str = "",
) -> Listing:
    """Reports of the view's pods (of `namespace`, or the pod `namespace/name`), sorted.

    Without `name`, a pod the view shows neither a selection nor a status for is left out:
    nothing of netattach's is on it (unless `read_status` finds a status for it).
    """
    policies, invalid = policy_model.parse_policies(
        [
            p
            for p in view.objects(model.POLICY)
            if not namespace or model.namespace_of(p) == namespace
        ]
    )
    pods: list[introspect.PodReport] = []
    for pod in sorted(
        view.objects(model.POD), key=lambda p: (model.namespace_of(p), model.name_of(p))
    ):
        if namespace and model.namespace_of(pod) != namespace:
            continue
        if name and model.name_of(pod) != name:
            continue
        report = pod_report(view, pod, read_status, networks, policies)
        if name or report.attachments or report.problems or _has_networks(pod):
            pods.append(report)
    return Listing(
        pods=pods,
        policies=list(policies),
        problems=[f"{exc} (the daemon skips it)" for exc in invalid],
    )
