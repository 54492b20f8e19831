"""The Kubernetes Events the pod operations record on a pod (KUBE-EVENTS): one per attachment
made or removed, a Warning per failure, its reason what a user can act on.

    AddedInterface / RemovedInterface          `Add net1 [10.1.0.5/24] from blue/net-a`
    NetworkNameMismatch (Warning)              a NAD whose config names another network
    the error's own reason (Warning)           a failed ADD or hot-plug: an attribute of the
                                               error's class (cni/errors.py:
                                               NetworkAttachmentDefinitionNotFound, ...;
                                               delegate_guard: NetworkAttachmentRefused)

A sink without Events (the directory feed's status files) records none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from netattach.cni import errors
from netattach.pods import plan as plan_mod
from netattach.pods import pod_identity
from netattach.pods import refs as refs_mod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeGuard

    from netattach.pods import ports


def shown_ips(entries: Sequence[Mapping[str, object]], ifname: str) -> str:
    """The addresses the network-status `entries` give the interface `ifname`, as an Event
    shows them."""
    for entry in entries:
        if entry.get("interface") == ifname:
            ips = entry.get("ips", [])
            return ", ".join(str(ip) for ip in ips) if isinstance(ips, list) else ""
    return ""


def _records_events(sink: object) -> TypeGuard[ports.EventRecorder]:
    return callable(getattr(sink, "record_event", None))


class PodEvents:
    """Events on the pods of one sink: none when it records no Events."""

    def __init__(self, sink: object) -> None:
        self._sink = sink if _records_events(sink) else None

    async def record(
        self, ref: refs_mod.PodRef, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        if ref.name and self._sink is not None:
            # A static pod's config hash names no API object: the sink finds the mirror's UID.
            uid = "" if pod_identity.is_config_hash(ref.uid) else ref.uid
            await self._sink.record_event(
                ref.namespace, ref.name, reason=reason, message=message, type_=type_, uid=uid
            )

    async def failed(self, ref: refs_mod.PodRef, exc: errors.CNIError) -> None:
        """The Warning Event of a failed ADD or hot-plug: the reason is the error's own, an
        attribute of its class (cni/errors.py: `NetworkAttachmentDefinitionNotFound`, ...)."""
        await self.record(ref, exc.event_reason, str(exc), "Warning")

    async def added(
        self,
        ref: refs_mod.PodRef,
        plan: Sequence[plan_mod.PlannedAttachment],
        entries: Sequence[Mapping[str, object]],
    ) -> None:
        """An ADD's attachments, made: one Event each, in the plan's order."""
        for planned, entry in zip(plan, entries, strict=True):
            if planned.warning:
                await self.record(ref, "NetworkNameMismatch", planned.warning, "Warning")
            ips = entry.get("ips", [])
            shown = ", ".join(str(ip) for ip in ips) if isinstance(ips, list) else ""
            await self.record(
                ref,
                "AddedInterface",
                f"Add {planned.ifname} [{shown}] from {planned.status_name}",
            )
