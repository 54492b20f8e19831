"""Dynamic networks on running pods (RT-HOTPLUG): what changed, and when to act on it.

Multus needs a separate controller for this (multus-dynamic-networks-controller): it watches pod
updates, and compares the pod's selection elements with its network-status, keyed by
`namespace/name` plus the interface when one was requested. netattach does it in the daemon that
made the attachments, from the pod record rather than the published status:

    a pass       every completed local record whose pod's selection annotation differs from
                 the one its attachments were planned from (`PodRecord.selection`; a record
                 without it is compared with what it attached, as Multus compares the status)
                 is handed to `replug` (Orchestrator.replug), one container at a time
    triggers     a Pod change (the view's listener), debounced; a NAD change also retries the
                 selections that failed (a missing NAD may have been created); every record
                 once at start (an annotation edited while the daemon was down)

The diff itself (`build_change`, `differs`) and the replug that applies it are the pod
operations' (pods/replug.py); the record keeps the selection its ADD was planned from
(`plan.selection_text`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from netattach import loggers
from netattach.cluster import model
from netattach.cni import errors
from netattach.daemon import passes
from netattach.pods import plan
from netattach.pods import records as records_mod
from netattach.pods import replug as replug_mod

log = loggers.get("netattach.hotplug")

DEBOUNCE = 0.2  # quiet time before a pass: an annotation written twice makes one pass
SYNC_WAIT = 60.0

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    class PodView(Protocol):
        def lookup_pod(self, namespace: str, name: str) -> model.KubeObject | None: ...
        async def wait_synced(self, timeout: float) -> bool: ...


Replug = Callable[[str], Awaitable[bool]]


class HotPlug:
    """The debounced loop that hands changed pods to `replug` (Orchestrator.replug)."""

    def __init__(self, *, view: PodView, records: records_mod.PodRecords, replug: Replug) -> None:
        self._view = view
        self._records = records
        self._replug = replug
        self._dirty = asyncio.Event()
        # container -> the selection text that failed; not tried again until a NAD changes
        self._failed: dict[str, str] = {}
        self.passes = 0

    def notify(self, kind: str = "") -> None:
        """A view change (the store's listener): a pass will follow for Pods and NADs."""
        if kind in ("", model.NAD):
            self._failed.clear()  # the NAD a failed selection missed may be there now
        if kind in ("", model.POD, model.NAD):
            self._dirty.set()

    async def run(self) -> None:
        """Once the view has synced (never act on a half-known pod), a pass over every record,
        then one after each change, until cancelled."""
        while not await self._view.wait_synced(SYNC_WAIT):
            log.warning("hot-plug waits for the cluster view to sync")
        self._dirty.set()
        await passes.debounced_passes(
            self._dirty, self.converge, debounce=DEBOUNCE, log=log, what="hot-plug"
        )

    def pending(self) -> list[tuple[str, str]]:
        """(container, the pod's selection text) of each record whose pod selects something
        else now, sorted; a selection that failed is left out until a NAD changes."""
        found = []
        recorded = sorted(self._records.container_ids())
        for gone in set(self._failed) - set(recorded):
            del self._failed[gone]
        for container_id in recorded:
            try:
                record = self._records.load(container_id)
            except records_mod.CorruptPodRecordError:
                continue  # reported by whoever DELs it
            if record is None or not record.complete or not record.pod:
                continue
            pod = self._view.lookup_pod(record.namespace, record.pod)
            if pod is None:
                continue  # not in the view (yet, or any more)
            uid = model.uid_of(pod)
            if record.uid and uid and uid != record.uid:
                continue  # a namesake, not this container's pod
            text = plan.selection_text(pod)
            if self._failed.get(container_id) != text and replug_mod.differs(record, pod):
                found.append((container_id, text))
        return found

    async def converge(self) -> None:
        """One pass: every changed pod replugged, one after the other."""
        self.passes += 1
        for container_id, text in self.pending():
            try:
                done = await self._replug(container_id)
            except errors.CNIError:
                done = False  # logged and reported as an Event by the orchestrator
            except Exception:
                log.exception("hot-plug of container %s failed", container_id)
                done = False
            if done:
                self._failed.pop(container_id, None)
            else:
                self._failed[container_id] = text
