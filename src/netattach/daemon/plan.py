"""What a pod's ADD will attach, decided before anything runs.

The default network first, then each selection in annotation order (standard §6.2, §4):
namespace isolation checked (§7.4), every NAD resolved to its delegate config (§3.4.1),
interface names chosen (§4.1.2.1.5), and each delegate config prepared with the selection's
`args.cni` and capability requests (SEL-CAPS). Only when the whole plan stands does ADD run a
plugin, so a bad selection or a missing NAD costs nothing to undo.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from netattach import loggers
from netattach.attach import delegate, selection
from netattach.cluster import model
from netattach.cni import conf, errors
from netattach.daemon import settings as settings_mod
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


class NADNotFoundError(errors.AttachmentNotFoundError):
    """101: the view holds no NAD `namespace/name` (the orchestrator may read it through,
    KUBE-NADREAD, and plan again)."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(f"NetworkAttachmentDefinition {namespace}/{name} not found")
        self.namespace = namespace
        self.name = name


def resolve_nad(
    view: NADLookup, namespace: str, name: str, networks_dir: Path
) -> delegate.Delegate:
    nad = view.lookup_nad(namespace, name)
    if nad is None:
        raise NADNotFoundError(namespace, name)
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


def nad_resource(view: NADLookup, namespace: str, name: str) -> str:
    """The `resourceName` annotation of the NAD `namespace/name` ("" for none; DEV-RESOURCE)."""
    nad = view.lookup_nad(namespace, name)
    return (model.annotation(nad, model.RESOURCE_ANNOTATION) or "").strip() if nad else ""


def resolve_default(
    view: NADLookup, cfg: settings_mod.NetworkSettings
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
    pod_namespace: str, selections: Sequence[selection.Selection], cfg: settings_mod.NetworkSettings
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


def build_plan(
    *,
    pod: model.KubeObject,
    default_ifname: str,
    runtime_config: Mapping[str, Any],
    view: NADLookup,
    cfg: settings_mod.NetworkSettings,
) -> list[PlannedAttachment]:
    namespace, name = model.namespace_of(pod), model.name_of(pod)
    selections = selection.parse_selections(
        model.annotation(pod, model.NETWORKS_ANNOTATION) or "",
        pod_namespace=namespace,
        pod=name,
    )
    check_isolation(namespace, selections, cfg)
    default_name, default_network = resolve_default(view, cfg)
    # SEL-CAPS, standard v1.1 §7.5: the runtime's capability args go to the default network only.
    plan = [
        PlannedAttachment(
            status_name=default_name,
            ifname=default_ifname,
            is_default=True,
            network=default_network,
            capability_args=dict(runtime_config),
        )
    ]
    for chosen, ifname in zip(selections, choose_ifnames(default_ifname, selections), strict=True):
        found = resolve_nad(view, chosen.namespace, chosen.name, cfg.networks_dir)
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
        plan.append(
            PlannedAttachment(
                status_name=chosen.reference(),
                ifname=ifname,
                is_default=False,
                network=network,
                capability_args=capability_args,
                ips=chosen.ips,
                mac=chosen.mac,
                gateways=chosen.default_route,
                warning=found.name_mismatch or "",
                resource=nad_resource(view, chosen.namespace, chosen.name),
            )
        )
    return plan
