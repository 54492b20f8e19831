"""Hot-plug (RT-HOTPLUG): a running pod's attachments made to match its selection annotation.

`build_change` is the pure diff a replug applies: which attachments stay (network, interface
name and delegate config unchanged), which go, which come, and the interface names of the new
ones. `differs` says whether a pod selects something other than what its record's attachments
were made for (the daemon's hot-plug loop, daemon/hotplug.py, asks it of every record).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from netattach.attach import delegate
from netattach.attach import selection as selection_mod
from netattach.cluster import model
from netattach.cni import errors
from netattach.pods import plan as plan_mod
from netattach.pods import records as records_mod
from netattach.values import NamedTuple

# Patterns as text: `re` compiles each on first use and caches it, so a start of the thin
# plugin compiles only those its call needs.
_AUTO_NAME = r"net([0-9]+)"


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


# -- when a pod differs ------------------------------------------------------------------------


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
