"""What a pod's ADD will attach, decided before anything runs.

The default network first (the cluster default, or the NAD the pod's
`v1.multus-cni.io/default-network` annotation names in its place: DEV-DEFAULT), then each
selection in annotation order (standard §6.2, §4): namespace isolation checked (§7.4), every
NAD resolved to its delegate config (§3.4.1), interface names chosen (§4.1.2.1.5), and each
delegate config prepared with the selection's `args.cni` and capability requests (SEL-CAPS).
Only when the whole plan stands does ADD run a plugin, so a bad selection or a missing NAD costs
nothing to undo.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from netattach import loggers
from netattach.attach import delegate, selection, selection_values
from netattach.cluster import model
from netattach.cni import conf, errors
from netattach.settings import network as network_settings
from netattach.values import NamedTuple

log = loggers.get("netattach.plan")


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol

    class NADLookup(Protocol):
        def lookup_nad(self, namespace: str, name: str) -> model.KubeObject | None: ...


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class PlannedAttachment(NamedTuple):
    status_name: str
    ifname: str
    is_default: bool
    network: conf.NetworkConfigList  # as it will run: name injected, args.cni merged
    capability_args: Mapping[str, Any]
    ips: tuple[str, ...] = ()
    mac: str = ""
    gateways: tuple[str, ...] = ()
    warning: str = ""  # NAD-NAMEWARN: the config names its network differently from the NAD
    # DEV-RESOURCE: the NAD's `resourceName` annotation ("" for none), and the device the
    # kubelet allocated to the pod that this attachment got (set once the plan's devices are
    # assigned, `network` then carries it as `deviceID`/`pciBusID`).
    resource: str = ""
    device: str = ""
    # DEV-DEFAULT: this default attachment is the NAD the pod's `default-network` annotation
    # names, not the operator's cluster default: a NAD author's config, so the delegate policy
    # and the node guard judge it as they judge a selection.
    pod_default: bool = False
    # IPAM-CLAIM: the selection's `ipam-claim-reference` (an IPAMClaim of the pod's namespace):
    # with netattach's IPAM, the claim's addresses, not a node's
    claim: str = ""


class NADNotFoundError(errors.AttachmentNotFoundError):
    """101: the view holds no NAD `namespace/name` (the orchestrator may read it through,
    KUBE-NADREAD, and plan again)."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(f"NetworkAttachmentDefinition {namespace}/{name} not found")
        self.namespace = namespace
        self.name = name


def lookup_nad(view: NADLookup, namespace: str, name: str) -> model.KubeObject:
    """The NAD `namespace/name` the view holds; NADNotFoundError (101) when none."""
    nad = view.lookup_nad(namespace, name)
    if nad is None:
        raise NADNotFoundError(namespace, name)
    return nad


def resolve_nad(
    view: NADLookup, namespace: str, name: str, networks_dir: Path
) -> delegate.Delegate:
    return delegate_of(lookup_nad(view, namespace, name), namespace, name, networks_dir)


def delegate_of(
    nad: model.KubeObject, namespace: str, name: str, networks_dir: Path
) -> delegate.Delegate:
    """The network the NAD `namespace/name` stands for (standard §3.4.1)."""
    spec = nad.get("spec")
    config = spec.get("config") if isinstance(spec, dict) else None
    found = delegate.resolve_delegate(
        namespace=namespace,
        name=name,
        spec_config=config if isinstance(config, str) else None,
        has_spec=isinstance(spec, dict),
        networks_dir=networks_dir,
    )
    if found.name_mismatch:
        log.warning("%s", found.name_mismatch)  # NAD-NAMEWARN, standard §3.4.3
    return found


def resource_of(nad: model.KubeObject) -> str:
    """The NAD's `resourceName` annotation, stripped ("" for none; DEV-RESOURCE)."""
    return (model.annotation(nad, model.RESOURCE_ANNOTATION) or "").strip()


def resolve_default(
    view: NADLookup, cfg: network_settings.NetworkSettings
) -> tuple[str, conf.NetworkConfigList]:
    """The cluster default network: its status name and config (DEF-ATTACH)."""
    ref = cfg.cluster_network
    if ref.kind == "nad":
        found = resolve_nad(view, ref.namespace, ref.name, cfg.networks_dir)
        return f"{ref.namespace}/{ref.name}", found.network
    if ref.kind == "file" and ref.path is not None:
        network = conf.load_file(ref.path)
        return network.name, network
    skipped: list[errors.CNIError] = []
    network_or_none = conf.find_network(cfg.networks_dir, ref.name, skipped)
    if network_or_none is None:
        raise errors.AttachmentNotFoundError(
            f"the cluster default network {ref.name!r} was not found in {str(cfg.networks_dir)!r}",
            "; ".join(f"skipped {exc}" for exc in skipped),
        )
    return network_or_none.name, network_or_none


def check_isolation(
    pod_namespace: str,
    selections: Sequence[selection.Selection],
    cfg: network_settings.NetworkSettings,
) -> None:
    """RT-RESTRICT, standard §7.4: only the pod's own namespace, or a global one."""
    if not cfg.namespace_isolation:
        return
    refused = [
        s.reference()
        for s in selections
        if s.namespace != pod_namespace and s.namespace not in cfg.global_namespaces
    ]
    if refused:
        raise errors.InvalidSelectionError(
            f"pod in namespace {pod_namespace!r} may not select {', '.join(refused)}",
            "namespace isolation allows the pod's own namespace and "
            f"{', '.join(cfg.global_namespaces) or 'no other'}",
        )


def choose_ifnames(default_ifname: str, selections: Sequence[selection.Selection]) -> list[str]:
    """Interface names by position: the requested one, else `net<N>` that nobody requested.

    Duplicates among requested names are kept here: the attachment that comes second fails
    when it runs (§4.1.2.1.5: "an earlier attachment already uses that name").
    """
    requested = {s.interface for s in selections if s.interface} | {default_ifname}
    used: set[str] = set()
    names: list[str] = []
    counter = 0
    for position, chosen in enumerate(selections, start=1):
        if chosen.interface:
            names.append(chosen.interface)
            continue
        counter = max(counter, position)
        while f"net{counter}" in requested or f"net{counter}" in used:
            counter += 1
        used.add(f"net{counter}")
        names.append(f"net{counter}")
    return names


def _requests(chosen: selection.Selection) -> dict[str, object]:
    requests: dict[str, object] = {}
    if chosen.port_mappings:
        requests["portMappings"] = [p.to_runtime_config() for p in chosen.port_mappings]
    if chosen.bandwidth is not None:
        requests["bandwidth"] = chosen.bandwidth.to_runtime_config()
    if chosen.infiniband_guid:
        requests["infinibandGUID"] = chosen.infiniband_guid
    return requests


def parse_default_network(
    text: str, *, pod_namespace: str, pod: str, default_ifname: str
) -> selection.Selection | None:
    """The NAD the pod's `v1.multus-cni.io/default-network` annotation names (DEV-DEFAULT);
    None when the annotation is blank.

    Multus's forms, parsed as a selection annotation is: `name`, `namespace/name`, or a JSON
    list of one element. An unqualified name is the pod's namespace's (standard §4.1.1; Multus
    looks it up in its own namespace). The default network is always the runtime's `CNI_IFNAME`,
    and its `portMappings` and `bandwidth` are the runtime's (SEL-CAPS), so an element asking
    for another interface or for either of those is refused; `ips`, `mac`, `cni-args`,
    `ipam-claim-reference`, `infiniband-guid` and `default-route` are honoured as for a
    selection. Raises InvalidSelectionError (102) naming the pod and quoting the value.
    """
    if not text.strip():
        return None
    try:
        found = selection.parse_selections(text, pod_namespace=pod_namespace, pod=pod)
    except errors.InvalidSelectionError as exc:
        raise _invalid_default(text, pod_namespace, pod, exc.details or exc.msg) from exc
    if len(found) != 1:
        why = f"it names {len(found)} networks, the default network is exactly one"
        raise _invalid_default(text, pod_namespace, pod, why)
    chosen = found[0]
    problems: list[str] = []
    if chosen.interface and chosen.interface != default_ifname:
        problems.append(
            f"interface {chosen.interface!r}: the default network is always the runtime's "
            f"interface {default_ifname!r}"
        )
    if chosen.port_mappings:
        problems.append("portMappings: the default network's are the runtime's (runtimeConfig)")
    if chosen.bandwidth is not None:
        problems.append("bandwidth: the default network's is the runtime's (runtimeConfig)")
    if problems:
        raise _invalid_default(text, pod_namespace, pod, "; ".join(problems))
    return chosen


def _invalid_default(
    text: str, pod_namespace: str, pod: str, details: str
) -> errors.InvalidSelectionError:
    return errors.InvalidSelectionError(
        f"invalid {model.DEFAULT_NETWORK_ANNOTATION} annotation of pod {pod_namespace}/{pod}: "
        f"{selection_values.show(text)}",
        details,
    )


def cluster_nad(cfg: network_settings.NetworkSettings) -> str:
    """The operator's cluster default network as `namespace/name`, when it is a NAD."""
    ref = cfg.cluster_network
    return f"{ref.namespace}/{ref.name}" if ref.kind == "nad" else ""


def selected(
    chosen: selection.Selection,
    *,
    ifname: str,
    view: NADLookup,
    cfg: network_settings.NetworkSettings,
) -> PlannedAttachment:
    """The attachment of one selection's NAD on `ifname`: its config with the selection's
    `cni-args`, `ips`, `mac` and claim reference applied, and the capability args it requests.
    A missing NAD is NADNotFoundError (101)."""
    nad = lookup_nad(view, chosen.namespace, chosen.name)
    found = delegate_of(nad, chosen.namespace, chosen.name, cfg.networks_dir)
    cni_args = dict(chosen.cni_args or {})
    if chosen.ipam_claim_reference:
        cni_args.setdefault("ipam-claim-reference", chosen.ipam_claim_reference)
    network, capability_args = delegate.apply_selection(
        found.network,
        ips=chosen.ips,
        mac=chosen.mac,
        cni_args=cni_args or None,
        runtime_requests=_requests(chosen),
    )
    return PlannedAttachment(
        status_name=chosen.reference(),
        ifname=ifname,
        is_default=False,
        network=network,
        capability_args=capability_args,
        ips=chosen.ips,
        mac=chosen.mac,
        gateways=chosen.default_route,
        warning=found.name_mismatch or "",
        resource=resource_of(nad),
        claim=chosen.ipam_claim_reference,
    )


def build_pod_default(
    chosen: selection.Selection,
    *,
    default_ifname: str,
    runtime_config: Mapping[str, Any],
    view: NADLookup,
    cfg: network_settings.NetworkSettings,
) -> PlannedAttachment:
    """The attachment of the NAD that replaces the cluster default network (DEV-DEFAULT): on the
    runtime's interface, with the runtime's capability args (SEL-CAPS), and the element's own
    `ips`, `mac`, `cni-args` as a selection has them. A missing NAD is NADNotFoundError (101)."""
    planned = selected(chosen, ifname=default_ifname, view=view, cfg=cfg)
    return planned._replace(
        is_default=True,
        # The runtime's, as the cluster default would have them; the element's own requests
        # (`ips`, `mac`, an InfiniBand GUID) over them.
        capability_args={**runtime_config, **planned.capability_args},
        # The operator's own NAD named by the pod is still the operator's network.
        pod_default=planned.status_name != cluster_nad(cfg),
    )


def selection_text(pod: model.KubeObject) -> str:
    """The pod's selection annotation as written ("" for none): what its plan is built from, and
    what its record keeps (hot-plug compares it with the pod's current one)."""
    return model.annotation(pod, model.NETWORKS_ANNOTATION) or ""


def build_plan(
    *,
    pod: model.KubeObject,
    default_ifname: str,
    runtime_config: Mapping[str, Any],
    view: NADLookup,
    cfg: network_settings.NetworkSettings,
    pod_default_network: bool = True,
) -> list[PlannedAttachment]:
    """The pod's plan. `pod_default_network` False: the pod's `default-network` annotation is
    not read (hot-plug never touches the default attachment, so a NAD it named that is gone
    since, or an annotation edited since, must not stop the selections from changing)."""
    namespace, name = model.namespace_of(pod), model.name_of(pod)
    selections = selection.parse_selections(
        selection_text(pod),
        pod_namespace=namespace,
        pod=name,
    )
    pod_default = parse_default_network(
        (model.annotation(pod, model.DEFAULT_NETWORK_ANNOTATION) or "")
        if pod_default_network
        else "",
        pod_namespace=namespace,
        pod=name,
        default_ifname=default_ifname,
    )
    # RT-RESTRICT holds for the default-network NAD too (DEV-DEFAULT): before any lookup.
    check_isolation(namespace, [*selections, *([pod_default] if pod_default else [])], cfg)
    if pod_default is not None:
        default = build_pod_default(
            pod_default,
            default_ifname=default_ifname,
            runtime_config=runtime_config,
            view=view,
            cfg=cfg,
        )
    else:
        default_name, default_network = resolve_default(view, cfg)
        # SEL-CAPS, standard v1.1 §7.5: the runtime's capability args go to the default
        # network only.
        default = PlannedAttachment(
            status_name=default_name,
            ifname=default_ifname,
            is_default=True,
            network=default_network,
            capability_args=dict(runtime_config),
        )
    plan = [default]
    for chosen, ifname in zip(selections, choose_ifnames(default_ifname, selections), strict=True):
        plan.append(selected(chosen, ifname=ifname, view=view, cfg=cfg))
    return plan
