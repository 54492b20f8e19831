"""Hot-plug (RT-HOTPLUG): a running pod's attachments made to match its selection annotation.

    build_change   the pure diff a replug applies: which attachments stay (network, interface
                   name and delegate config unchanged), which go, which come, and the interface
                   names of the new ones
    differs        does a pod select something other than what its record's attachments were
                   made for? (the daemon's hot-plug loop, daemon/hotplug.py, asks it of every
                   record; the record keeps the selection it was planned from)
    Replug         the replug itself, under the container's lock: the attachments no longer
                   selected deleted, newest first, then the new ones added, each named in the
                   record before it runs, as ADD does; Events for each (`Orchestrator.replug`)

The daemon's only: the orchestrator imports this module at its first hot-plug, so the thin
plugin's calls never load it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence

from netattach import ipam, loggers
from netattach.attach import delegate
from netattach.attach import selection as selection_mod
from netattach.cluster import model
from netattach.cni import env, errors, spec
from netattach.pods import attachments, devices
from netattach.pods import checks as checks_mod
from netattach.pods import events as events_mod
from netattach.pods import locks as locks_mod
from netattach.pods import plan as plan_mod
from netattach.pods import records as records_mod
from netattach.pods import refs as refs_mod
from netattach.runtime import chain
from netattach.settings import network as network_settings
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from netattach.pods import ports

# A replug's lines are the orchestrator's, as they have always been: an operator filters on it.
log = loggers.get("netattach.orchestrator")

_AUTO_NAME = r"net([0-9]+)"


# -- the diff ---------------------------------------------------------------------------------


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


# -- when a pod differs ------------------------------------------------------------------------


def differs(record: records_mod.PodRecord, pod: model.KubeObject) -> bool:
    """Does the pod select something other than what the record's attachments were made for?"""
    text = plan_mod.selection_text(pod)
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


# -- the replug -------------------------------------------------------------------------------


class Replug:
    """Hot-plug of one orchestrator's pods (`Orchestrator.replug`), over its collaborators and
    its guards at ADD."""

    def __init__(
        self,
        *,
        networks: network_settings.NetworkSettings,
        view: ports.ClusterView,
        sink: ports.StatusSink,
        runtime: chain.Runtime,
        records: records_mod.PodRecords,
        locks: locks_mod.ContainerLocks,
        policy: ports.PolicyEnforcer | None,
        events: events_mod.PodEvents,
        checks: checks_mod.PlanChecks,
    ) -> None:
        self._networks = networks
        self._view = view
        self._sink = sink
        self._runtime = runtime
        self._records = records
        self._locks = locks
        self._policy = policy
        self._events = events
        self._checks = checks

    async def run(self, container_id: str) -> bool:
        """Make a running pod's attachments match its selection annotation now (RT-HOTPLUG).

        Under the container's lock, so never beside its ADD, CHECK or DEL. Attachments that stay
        are not touched; the ones no longer selected are deleted, newest first; then the new ones
        are added, each named in the record before it runs (as ADD does), so whatever a crash
        interrupts, the pod's DEL still undoes it. A new attachment that fails is undone alone
        and reported (a Warning Event); the other changes stand. The default network is never
        touched. Returns False when some attachment failed; raises the error of a selection
        that cannot be planned, in which case nothing changed (a Warning Event says why).
        """
        async with self._locks.hold(container_id):
            found = self._replug_target(container_id)
            if found is None:
                return True
            record, pod = found
            ref = refs_mod.PodRef(namespace=record.namespace, name=record.pod, uid=record.uid)
            text = plan_mod.selection_text(pod)
            try:
                plan, chosen = self._replan(record, pod, text)
                change = build_change(record, plan, chosen)
                self._checks.check_plan(change.add)
                await self._checks.check_node(change.add, container_id)
                if ipam.uses_netattach(p.network for p in change.add):
                    raise errors.InvalidNetworkConfigError(
                        f"a network with ipam of type {ipam.TYPE!r} is attached at the pod's ADD "
                        "only: hot-plug does not take addresses from netattach's IPAM yet"
                    )
                # The devices of the attachments about to go are free for the new ones.
                change = await self._with_devices(change, record, pod, freed=change.remove)
            except errors.CNIError as exc:
                failed = exc.with_prefix(ref.prefix())
                log.error("%s; the pod's attachments stay as they are", failed)
                await self._events.failed(ref, failed)
                raise failed from exc
            before = self._entries(record)
            call = _replug_call(record)
            record, stuck = await self._unplug(call, ref, record, change.remove)
            removed = [att for att in change.remove if att not in stuck]
            if stuck:
                # Their names are still taken: the new attachments are named around them.
                busy = frozenset(att.ifname for att in stuck)
                change = build_change(record, plan, chosen, busy=busy)
                try:
                    # The record holds what stayed, the attachments that would not go included.
                    change = await self._with_devices(change, record, pod, freed=())
                except errors.CNIError as exc:
                    failed = exc.with_prefix(ref.prefix())
                    log.error("%s; the new attachments are not made", failed)
                    await self._events.failed(ref, failed)
                    change = change._replace(wanted=change.keep)
            record, made, failures = await self._plug(call, ref, record, change)
            record = record._replace(attachments=_replugged(record, change, made))
            self._records.save(record)
            self._checks.release(container_id)
            if self._policy is not None and (made or removed):
                try:
                    await self._policy.enforce(record, pod)
                except errors.CNIError as exc:
                    log.error("%s %s", ref.prefix(), exc)
                    await self._events.record(ref, "PolicyApplyFailed", str(exc), "Warning")
            entries = self._entries(record)
            await self._sink.publish_status(ref.namespace, ref.name, entries, uid=ref.uid)
            await self._events_replugged(
                ref, before=before, removed=removed, after=entries, change=change, made=made
            )
            if stuck or failures:
                return False
            # Only now: a pass after a crash or a failed status write finds the pod changed.
            self._records.save(record._replace(selection=text))
            return True

    async def _with_devices(
        self,
        change: Change,
        record: records_mod.PodRecord,
        pod: model.KubeObject,
        *,
        freed: Sequence[records_mod.AttachmentRecord],
    ) -> Change:
        """`change` with a device for each new attachment of a resource (DEV-RESOURCE), none of
        them held by an attachment of `record` other than those `freed`."""
        if not devices.wanted(change.add):
            return change
        given = iter(
            await devices.assign(
                change.add,
                pod=pod,
                container_id=record.container_id,
                cfg=self._networks,
                held={a.device for a in record.attachments if a.device and a not in freed},
            )
        )
        wanted = tuple(
            next(given) if isinstance(w, plan_mod.PlannedAttachment) else w for w in change.wanted
        )
        return change._replace(wanted=wanted)

    def _replug_target(
        self, container_id: str
    ) -> tuple[records_mod.PodRecord, model.KubeObject] | None:
        """The completed record of a running Kubernetes pod, and the pod the view holds."""
        try:
            record = self._records.load(container_id)
        except records_mod.CorruptPodRecordError as exc:
            log.error("%s; not hot-plugged", exc)
            return None
        if record is None or not record.complete or not record.pod:
            return None
        if not any(att.is_default for att in record.attachments):
            return None
        if not os.path.exists(record.netns):
            return None  # the sandbox is gone: the sweep deletes it
        pod = self._view.lookup_pod(record.namespace, record.pod)
        if pod is None:
            return None
        uid = model.uid_of(pod)
        if record.uid and uid and uid != record.uid:
            return None  # a namesake, not this container's pod
        return record, pod

    def _replan(
        self, record: records_mod.PodRecord, pod: model.KubeObject, text: str
    ) -> tuple[list[plan_mod.PlannedAttachment], tuple[selection_mod.Selection, ...]]:
        default = next(att for att in record.attachments if att.is_default)
        plan = plan_mod.build_plan(
            pod=pod,
            default_ifname=default.ifname,
            runtime_config=default.capability_args,
            view=self._view,
            cfg=self._networks,
            pod_default_network=False,
        )
        chosen = selection_mod.parse_selections(
            text, pod_namespace=record.namespace, pod=record.pod
        )
        return plan, chosen

    async def _unplug(
        self,
        call: env.Environment,
        ref: refs_mod.PodRef,
        record: records_mod.PodRecord,
        remove: Sequence[records_mod.AttachmentRecord],
    ) -> tuple[records_mod.PodRecord, list[records_mod.AttachmentRecord]]:
        """DEL each of `remove`, newest first; the record forgets each once it is gone. Returns
        the record and the attachments whose DEL failed (they stay recorded for the pod's DEL)."""
        stuck: list[records_mod.AttachmentRecord] = []
        for att in reversed(remove):
            one = record._replace(attachments=(att,))
            failures = await self._delete(call, one)
            if failures:
                stuck.append(att)
                await self._events.record(
                    ref, "FailedRemovingInterface", str(failures[-1]), "Warning"
                )
                continue
            left = tuple(a for a in record.attachments if a.ifname != att.ifname)
            record = record._replace(attachments=left)
            self._records.save(record)
        return record, stuck

    async def _plug(
        self,
        call: env.Environment,
        ref: refs_mod.PodRef,
        record: records_mod.PodRecord,
        change: Change,
    ) -> tuple[
        records_mod.PodRecord, dict[int, records_mod.AttachmentRecord], list[errors.CNIError]
    ]:
        """ADD each new attachment of `change` in selection order. Returns the record, the
        attachments made by their position in `change.wanted`, and the failures."""
        made: dict[int, records_mod.AttachmentRecord] = {}
        failures: list[errors.CNIError] = []
        for index, planned in enumerate(change.wanted):
            if not isinstance(planned, plan_mod.PlannedAttachment):
                continue
            try:
                intent = attachments.intent(planned, record.attachments)
            except errors.CNIError as exc:
                failure = exc.with_prefix(ref.prefix(planned.status_name))
                await self._plug_failed(ref, failure, failures)
                continue
            record = record._replace(attachments=(*record.attachments, intent))
            self._records.save(record)
            try:
                if self._policy is not None:
                    # Govern the interface before it exists (nft matches it by name), so no
                    # packet reaches it unfiltered; refined with its address once it is made.
                    await self._policy.enforce(record)
                res = await self._runtime.add_network_list(
                    planned.network,
                    attachments.runtime_conf(call, record.netns, intent),
                    record_intent=False,
                )
                delegate.verify_result(
                    res,
                    ifname=planned.ifname,
                    ips=planned.ips,
                    mac=planned.mac,
                    network=planned.status_name,
                )
                await attachments.apply_default_route(record.netns, [planned])
            except Exception as exc:
                failure = refs_mod.as_cni_error(exc, ref.prefix(planned.status_name))
                undo = await self._delete(call, record._replace(attachments=(intent,)))
                if not undo:  # else it stays recorded, for the pod's DEL to free
                    record = record._replace(attachments=record.attachments[:-1])
                    self._records.save(record)
                await self._plug_failed(ref, failure, failures)
                continue
            made[index] = intent._replace(result=res.to_raw())
            record = record._replace(attachments=(*record.attachments[:-1], made[index]))
            self._records.save(record)
        return record, made, failures

    async def _plug_failed(
        self, ref: refs_mod.PodRef, failure: errors.CNIError, failures: list[errors.CNIError]
    ) -> None:
        log.error("%s", failure)
        failures.append(failure)
        await self._events.record(ref, "FailedAddingInterface", str(failure), "Warning")

    async def _events_replugged(
        self,
        ref: refs_mod.PodRef,
        *,
        before: Sequence[Mapping[str, object]],
        removed: Sequence[records_mod.AttachmentRecord],
        after: Sequence[Mapping[str, object]],
        change: Change,
        made: Mapping[int, records_mod.AttachmentRecord],
    ) -> None:
        for att in removed:
            shown = events_mod.shown_ips(before, att.ifname)
            message = f"Remove {att.ifname} [{shown}] from {att.status_name}"
            await self._events.record(ref, "RemovedInterface", message)
        for index, planned in enumerate(change.wanted):
            if index not in made or not isinstance(planned, plan_mod.PlannedAttachment):
                continue
            if planned.warning:
                await self._events.record(ref, "NetworkNameMismatch", planned.warning, "Warning")
            shown = events_mod.shown_ips(after, planned.ifname)
            message = f"Add {planned.ifname} [{shown}] from {planned.status_name}"
            await self._events.record(ref, "AddedInterface", message)

    def _entries(self, record: records_mod.PodRecord) -> list[dict[str, object]]:
        return devices.network_status(record, device_info_dir=self._networks.device_info_dir)

    async def _delete(
        self, call: env.Environment, record: records_mod.PodRecord
    ) -> list[errors.CNIError]:
        return await attachments.delete(
            self._runtime, call, record, device_info_dir=self._networks.device_info_dir
        )


def _replug_call(record: records_mod.PodRecord) -> env.Environment:
    """The CNI environment of a hot-plugged attachment: the pod's sandbox, and CNI_ARGS as the
    kubelet passes them."""
    args = [
        ("IgnoreUnknown", "1"),
        (refs_mod.POD_NAMESPACE, record.namespace),
        (refs_mod.POD_NAME, record.pod),
        ("K8S_POD_INFRA_CONTAINER_ID", record.container_id),
    ]
    if record.uid:
        args.append((refs_mod.POD_UID, record.uid))
    return env.Environment(
        command=spec.ADD, container_id=record.container_id, netns=record.netns, args=tuple(args)
    )


def _replugged(
    record: records_mod.PodRecord,
    change: Change,
    made: Mapping[int, records_mod.AttachmentRecord],
) -> tuple[records_mod.AttachmentRecord, ...]:
    """The record's attachments in the new selection's order: the default network first, then
    what is kept or was made, then what could not be deleted (the pod's DEL retries them)."""
    placed: list[records_mod.AttachmentRecord] = []
    for index, wanted in enumerate(change.wanted):
        if isinstance(wanted, records_mod.AttachmentRecord):
            placed.append(wanted)
        elif index in made:
            placed.append(made[index])
    names = {att.ifname for att in placed}
    defaults = [att for att in record.attachments if att.is_default]
    rest = [a for a in record.attachments if not a.is_default and a.ifname not in names]
    return (*defaults, *placed, *rest)
