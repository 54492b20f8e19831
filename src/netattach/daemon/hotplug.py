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

`build_change` is the pure diff the orchestrator applies: which attachments stay (network,
interface name and delegate config unchanged), which go, which come, and the interface names of
the new ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence

from netattach import loggers
from netattach.attach import delegate
from netattach.attach import selection as selection_mod
from netattach.cluster import model
from netattach.cni import errors
from netattach.daemon import plan as plan_mod
from netattach.daemon import records as records_mod
from netattach.values import NamedTuple

log = loggers.get("netattach.hotplug")

DEBOUNCE = 0.2  # quiet time before a pass: an annotation written twice makes one pass
SYNC_WAIT = 60.0

# Patterns as text: `re` compiles each on first use and caches it, so a start of the thin
# plugin compiles only those its call needs.
_AUTO_NAME = r"net([0-9]+)"


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    class PodView(Protocol):
        def lookup_pod(self, namespace: str, name: str) -> model.KubeObject | None: ...
        async def wait_synced(self, timeout: float) -> bool: ...


Replug = Callable[[str], Awaitable[bool]]


# -- the diff ---------------------------------------------------------------------------------


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class Change(NamedTuple):
    """A running pod's attachments against its new plan (the default network left out).

    `wanted` is the new selection in order: a kept attachment as recorded, or a new one planned
    with its final interface name. `remove` holds the recorded attachments no longer wanted, in
    record order.
    """

    wanted: tuple[records_mod.AttachmentRecord | plan_mod.PlannedAttachment, ...]
    remove: tuple[records_mod.AttachmentRecord, ...]

    @property
    def add(self) -> tuple[plan_mod.PlannedAttachment, ...]:
        return tuple(w for w in self.wanted if isinstance(w, plan_mod.PlannedAttachment))

    @property
    def keep(self) -> tuple[records_mod.AttachmentRecord, ...]:
        return tuple(w for w in self.wanted if isinstance(w, records_mod.AttachmentRecord))


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def same_delegate(att: records_mod.AttachmentRecord, planned: plan_mod.PlannedAttachment) -> bool:
    """The recorded attachment is what `planned` would make, so it can stay as it is. One
    whose ADD never finished (no result) may be half made: it is never kept. One given a device
    (DEV-RESOURCE) is compared as `planned` would run with that same device."""
    network, capability_args = planned.network, planned.capability_args
    if att.device and att.resource == planned.resource:
        handed = att.capability_args.get(delegate.DEVICE_INFO_CAPABILITY)
        network, capability_args = delegate.with_device(
            network,
            capability_args,
            device=att.device,
            device_info_file=handed if isinstance(handed, str) else "",
        )
    return (
        att.result is not None
        and not att.is_default
        and att.status_name == planned.status_name
        and att.gateways == planned.gateways
        and _canonical(att.config) == _canonical(network.raw)
        and _canonical(att.capability_args) == _canonical(dict(capability_args))
    )


def build_change(
    record: records_mod.PodRecord,
    plan: Sequence[plan_mod.PlannedAttachment],
    selections: Sequence[selection_mod.Selection],
    *,
    busy: frozenset[str] = frozenset(),
) -> Change:
    """Match the record's attachments with the plan (`plan_mod.build_plan` of the pod now, and
    the selections it was built from). `busy`: interface names that stay in use although their
    attachment is not wanted (one whose DEL failed). Raises InvalidSelectionError when two
    requested interface names collide, before anything changes."""
    secondary = [p for p in plan if not p.is_default]
    if len(secondary) != len(selections):
        raise errors.InternalError(
            f"a plan of {len(secondary)} attachments for {len(selections)} selections"
        )
    default_ifnames = {a.ifname for a in record.attachments if a.is_default}
    requested = [s.interface for s in selections if s.interface]
    _check_requested(requested, default_ifnames)
    recorded = [a for a in record.attachments if not a.is_default]
    taken: list[bool] = [False] * len(recorded)
    wanted: list[records_mod.AttachmentRecord | plan_mod.PlannedAttachment | None]
    wanted = [None] * len(secondary)

    def claim(index: int, planned: plan_mod.PlannedAttachment, ifname: str | None) -> None:
        for position, att in enumerate(recorded):
            if taken[position] or not same_delegate(att, planned):
                continue
            if ifname is not None and att.ifname != ifname:
                continue
            if ifname is None and (att.ifname in requested or att.ifname in default_ifnames):
                continue  # its name is asked for by another selection now
            taken[position] = True
            wanted[index] = att
            return

    # Requested names first (Multus's key: namespace/name/interface), then the generated ones:
    # by the name the plan gives them when that one is recorded, else any same attachment.
    for index, (planned, chosen) in enumerate(zip(secondary, selections, strict=True)):
        if chosen.interface:
            claim(index, planned, planned.ifname)
    for index, (planned, chosen) in enumerate(zip(secondary, selections, strict=True)):
        if not chosen.interface and wanted[index] is None:
            claim(index, planned, planned.ifname)
    for index, (planned, chosen) in enumerate(zip(secondary, selections, strict=True)):
        if not chosen.interface and wanted[index] is None:
            claim(index, planned, None)

    in_use = set(default_ifnames) | set(requested) | set(busy)
    in_use |= {w.ifname for w in wanted if isinstance(w, records_mod.AttachmentRecord)}
    final: list[records_mod.AttachmentRecord | plan_mod.PlannedAttachment] = []
    for index, (planned, chosen) in enumerate(zip(secondary, selections, strict=True)):
        kept = wanted[index]
        if kept is not None:
            final.append(kept)
            continue
        ifname = planned.ifname if chosen.interface else _free_name(planned.ifname, in_use)
        in_use.add(ifname)
        final.append(planned._replace(ifname=ifname))
    remove = tuple(att for att, was_taken in zip(recorded, taken, strict=True) if not was_taken)
    return Change(wanted=tuple(final), remove=remove)


def _check_requested(requested: Sequence[str], default_ifnames: set[str]) -> None:
    seen: set[str] = set()
    for ifname in requested:
        if ifname in default_ifnames:
            raise errors.InvalidSelectionError(
                f"interface {ifname!r} is the cluster default network's interface"
            )
        if ifname in seen:
            # standard §4.1.2.1.5: an interface name already used fails the attachment
            raise errors.InvalidSelectionError(f"interface {ifname!r} is requested twice")
        seen.add(ifname)


def _free_name(planned: str, in_use: set[str]) -> str:
    """`planned` (a generated `netN`) when nobody uses it, else the next `netN` nobody does."""
    if planned not in in_use:
        return planned
    match = re.fullmatch(_AUTO_NAME, planned)
    number = int(match.group(1)) if match else 1
    while f"net{number}" in in_use:
        number += 1
    return f"net{number}"


# -- when to act ------------------------------------------------------------------------------


def selection_text(pod: model.KubeObject) -> str:
    return model.annotation(pod, model.NETWORKS_ANNOTATION) or ""


def differs(record: records_mod.PodRecord, pod: model.KubeObject) -> bool:
    """Does the pod select something other than what the record's attachments were made for?"""
    text = selection_text(pod)
    if record.selection is not None:
        return record.selection != text
    # A record from before `selection` was kept: compare with what is attached, as Multus
    # compares the selection with the network-status.
    try:
        chosen = selection_mod.parse_selections(
            text, pod_namespace=record.namespace, pod=record.pod
        )
    except errors.CNIError:
        return True  # the replug reports it
    attached = [(a.status_name, a.ifname) for a in record.attachments if not a.is_default]
    for wants_name in (True, False):
        for one in chosen:
            if bool(one.interface) != wants_name:
                continue
            match = next(
                (
                    pair
                    for pair in attached
                    if pair[0] == one.reference()
                    and (not one.interface or pair[1] == one.interface)
                ),
                None,
            )
            if match is None:
                return True
            attached.remove(match)
    return bool(attached)


class HotPlug:
    """The debounced loop that hands changed pods to `replug` (Orchestrator.replug)."""

    def __init__(self, *, view: PodView, records: records_mod.PodRecords, replug: Replug) -> None:
        self._view = view
        self._records = records
        self._replug = replug
        # The daemon's loop only: the thin plugin imports this module (selection_text) without
        # asyncio.
        import asyncio

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
        from netattach.daemon import passes  # asyncio's: see __init__

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
            text = selection_text(pod)
            if self._failed.get(container_id) != text and differs(record, pod):
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


__all__ = ["Change", "HotPlug", "build_change", "differs", "same_delegate"]
