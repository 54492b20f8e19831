"""Devices the kubelet allocated to a pod, handed to its attachments (DEV-RESOURCE, DEV-INFO).

A NAD annotated `k8s.v1.cni.cncf.io/resourceName` stands for a device-plugin resource (or a
DRA claim): each attachment of it gets one of the devices the kubelet allocated to the pod, read
from the kubelet's PodResources API once per ADD, in selection order, never one twice (Multus's
rule). The device reaches the delegates as Multus passes it (`attach.delegate.with_device`) and
is recorded with the attachment, so DEL, CHECK and a restarted daemon use the same one.

    assign              the plan with each resource attachment's device (before the write-ahead
                        record: nothing has run yet, so a refusal leaves nothing behind)
    prepare_device_info a device plugin's device-info copied to the attachment's CNI file,
                        for a delegate declaring `CNIDeviceInfoFile` (as Multus copies it)
    network_status      the pod's network-status entries with each attachment's device-info:
                        the delegate's (CNI) file, else the device plugin's
    discard_device_info the CNI file gone with its attachment

Errors, each naming the pod, the NAD and the resource, before any plugin ran (whether the NAD's
namespace may name the resource at all is the delegate policy's, delegate_guard.check_nad):
    InvalidSelectionError (102)   the pod has no device of the resource, or fewer than it has
                                  attachments of it
    PodResourcesUnavailableError (11)  the kubelet does not answer (the kubelet retries)
    TryAgainLaterError (11)       the kubelet does not list the pod (it has just restarted)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from netattach import atomic, loggers, offload
from netattach.attach import delegate, status
from netattach.cluster import model
from netattach.cni import errors, result
from netattach.pods import plan as plan_mod
from netattach.pods import records as records_mod
from netattach.settings import network as network_settings

log = loggers.get("netattach.devices")


def wanted(plan: Sequence[plan_mod.PlannedAttachment]) -> bool:
    """Whether any attachment of `plan` needs a device."""
    return any(planned.resource for planned in plan)


async def assign(
    plan: Sequence[plan_mod.PlannedAttachment],
    *,
    pod: model.KubeObject,
    container_id: str,
    cfg: network_settings.NetworkSettings,
    held: Collection[str] = (),
) -> list[plan_mod.PlannedAttachment]:
    """`plan` with a device for each attachment whose NAD names a resource; `held`: devices the
    pod's other attachments already have (hot-plug)."""
    if not wanted(plan):
        return list(plan)
    namespace, name = model.namespace_of(pod), model.name_of(pod)
    # Imported only for a pod with a device to find: gRPC costs the thin plugin ~0.1 s.
    from netattach.cluster import podresources

    socket = cfg.pod_resources_socket
    try:
        found = await offload.to_thread(podresources.read_pod_devices, socket, namespace, name)
    except errors.CNIError as exc:
        raise type(exc)(
            f"cannot find the devices of pod {namespace}/{name}: {exc.msg}", exc.details
        ) from exc
    log.debug("pod %s/%s devices (%s): %s", namespace, name, found.method, dict(found.by_name))
    if not found.known:
        # A kubelet just restarted answers before it has loaded its pods: try again.
        raise errors.TryAgainLaterError(
            f"the kubelet's PodResources API does not list pod {namespace}/{name} (yet)",
            f"{found.method} at {str(socket)!r}",
        )
    claims = _claim_names(pod)
    taken = set(held)
    assigned: list[plan_mod.PlannedAttachment] = []
    for planned in plan:
        if not planned.resource:
            assigned.append(planned)
            continue
        names = [planned.resource, *claims.get(planned.resource, ())]
        devices = [device for n in names for device in found.get(n)]
        free = [device for device in devices if device not in taken]
        if not free:
            raise errors.InvalidSelectionError(
                _shortage(planned, f"{namespace}/{name}", devices, found.by_name),
                f"the kubelet's PodResources API ({found.method}) at {str(socket)!r}",
            )
        device = free[0]
        taken.add(device)
        assigned.append(_given(planned, device, container_id, cfg.device_info_dir))
    return assigned


def _claim_names(pod: model.KubeObject) -> dict[str, tuple[str, ...]]:
    """The pod's claim names (`spec.resourceClaims[].name`) and the ResourceClaim each became
    (status.resourceClaimStatuses): a NAD's resourceName may name either."""
    found: dict[str, tuple[str, ...]] = {}
    pod_status = pod.get("status")
    raw = pod_status.get("resourceClaimStatuses") if isinstance(pod_status, dict) else None
    for entry in raw if isinstance(raw, list) else ():
        if isinstance(entry, dict):
            claim, made = entry.get("name"), entry.get("resourceClaimName")
            if isinstance(claim, str) and isinstance(made, str) and made:
                found[claim] = (*found.get(claim, ()), made)
    return found


def _shortage(
    planned: plan_mod.PlannedAttachment,
    pod: str,
    devices: Sequence[str],
    allocated: Mapping[str, Sequence[str]],
) -> str:
    nad = f"NetworkAttachmentDefinition {planned.status_name}"
    if not devices:
        shown = ", ".join(f"{n} ({len(ids)})" for n, ids in sorted(allocated.items())) or "none"
        return (
            f"{nad} needs a device of resource {planned.resource!r}, but the kubelet allocated "
            f"pod {pod} none (allocated: {shown}); request it in the pod's resources"
        )
    return (
        f"{nad} needs a device of resource {planned.resource!r}, but pod {pod} has "
        f"{len(devices)} and each is taken by an earlier attachment: request one per attachment"
    )


def _given(
    planned: plan_mod.PlannedAttachment, device: str, container_id: str, base: Path
) -> plan_mod.PlannedAttachment:
    info_file = status.cni_device_info_path(
        base, planned.network.name, container_id, planned.ifname
    )
    network, capability_args = delegate.with_device(
        planned.network, planned.capability_args, device=device, device_info_file=str(info_file)
    )
    return planned._replace(network=network, capability_args=capability_args, device=device)


def prepare_device_info(planned: plan_mod.PlannedAttachment, base: Path) -> None:
    """Before the attachment's ADD: the device plugin's device-info for its device, copied to the
    file its delegate was handed (`CNIDeviceInfoFile`), as Multus copies it. Best effort: a
    missing or unreadable file leaves the delegate to write its own."""
    handed = planned.capability_args.get(delegate.DEVICE_INFO_CAPABILITY)
    if not planned.device or not isinstance(handed, str):
        return
    source = status.dp_device_info_path(base, planned.resource, planned.device)
    problems: list[str] = []
    info = status.load_device_info(source, problems=problems)
    for problem in problems:
        log.warning("%s", problem)
    if info is None:
        return
    import json

    try:
        Path(handed).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_atomic(Path(handed), json.dumps(info).encode(), mode=0o644, durable=False)
    except OSError as exc:
        log.warning("cannot copy device-info %r to %r: %s", str(source), handed, exc)


def network_status(
    record: records_mod.PodRecord,
    parsed: Sequence[result.Result] | None = None,
    *,
    device_info_dir: Path,
) -> list[dict[str, object]]:
    """The pod's network-status entries (`attach.status.status_entries`), the problems of a
    device-info file logged (DEV-INFO: a bad one never fails an attachment that worked)."""
    problems: list[str] = []
    entries = status.status_entries(
        record, parsed, device_info_dir=device_info_dir, problems=problems
    )
    for problem in problems:
        log.warning("%s", problem)
    return entries


def discard_device_info(att: records_mod.AttachmentRecord, container_id: str, base: Path) -> None:
    """The attachment's CNI device-info file removed with it (a DEL leaves no file behind)."""
    network = str(att.config.get("name", ""))
    path = status.cni_device_info_path(base, network, container_id, att.ifname)
    try:
        atomic.remove(path, durable=False)
    except OSError as exc:
        log.warning("cannot remove device-info %r: %s", str(path), exc)
