"""The targets' rules: compiled whole once, then patched in place as what they read changes.

A target is a pod whose rules are wanted (a pod of this node). Its rules are compiled whole
(`_compile`) when it is new or changed, or a policy selecting it comes, goes or selects other
pods; every policy rule's allow rules are put down in order, and where they went is kept (a
slot: interface, direction, start, count). After that, two changes are patched in place:

    a selection it reads moved   the slots reading that selection made again (`_patch`)
    a policy selecting it edited the slots of that policy made again (`_patch_policies`)
    (same pods, networks and
    directions)

A patch that would change the number of allow rules of a slot falls back to a whole compile,
so the result is always what `_compile` makes of the cluster now. The targets reading each
selection are kept on the selection (`SelectionState.dependents`) and here (`_uses`), together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from netattach.policy.cluster_index import ClusterIndex, PolicyKey, policy_key
from netattach.policy.ir import AllowRule, DirectionRules, InterfaceRules, PodRules
from netattach.policy.model import DIRECTIONS, Direction, Policy, Rule
from netattach.policy.peers import Peers, SelectionState
from netattach.policy.views import PodView


@dataclass(slots=True)
class _Slot:
    """Where one rule of a policy put its allow rules in a target's rules: `count` of them
    from `start` in the rules of `direction` on `ifname`."""

    ifname: str
    direction: Direction
    network: str
    policy: Policy
    index: int  # the rule's, in the policy's rules of that direction
    rule: Rule
    sel: SelectionState
    start: int
    count: int
    # Whether its one allow rule changes with the selection's addresses alone: an egress rule
    # to named ports is one rule per group of destinations instead.
    peers_alone: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.peers_alone = self.count == 1 and not (self.direction == "egress" and self.rule.named)


class Targets:
    """The targets, their rules, and what a change since the last compile left to redo."""

    def __init__(self, index: ClusterIndex, peers: Peers) -> None:
        self._index = index
        self._selectors = index.selectors
        self._peers = peers
        self._targets: dict[str, PodView] = {}
        self._results: dict[str, PodRules] = {}
        self._uses: dict[str, set[SelectionState]] = {}  # target -> the selections it reads
        self._dirty: set[str] = set()  # targets to compile whole
        # target -> the selections whose addresses alone changed since its rules were made:
        # its rules are patched in place (`_patch`), not made again
        self._moved: dict[str, set[SelectionState]] = {}
        # target -> selection -> where the rules reading it put their allow rules
        self._slots: dict[str, dict[SelectionState, list[_Slot]]] = {}
        # target -> (ifname, direction) -> every policy rule's slot, in order
        self._layout: dict[str, dict[tuple[str, Direction], list[_Slot]]] = {}
        # target -> the policies edited (selecting the same pods) since its rules were made:
        # their allow rules are made again and put in place (`_patch_policies`)
        self._edited: dict[str, set[PolicyKey]] = {}

    def keys(self) -> list[str]:
        return list(self._targets)

    def set_target(self, view: PodView) -> None:
        """`view` is a target now (its rules wanted), or the target changed."""
        if self._targets.get(view.key) != view:
            self._targets[view.key] = view
            self._dirty.add(view.key)

    def remove_target(self, key: str) -> None:
        """`key` is no target any more: everything kept for its rules goes."""
        self._targets.pop(key, None)
        self._results.pop(key, None)
        self._dirty.discard(key)
        self._moved.pop(key, None)
        self._slots.pop(key, None)
        self._layout.pop(key, None)
        self._edited.pop(key, None)
        for sel in self._uses.pop(key, ()):
            sel.dependents.discard(key)

    def dirty(self, keys: Iterable[str]) -> None:
        """The targets `keys` read something that changed whole: compiled again."""
        self._dirty.update(keys)

    def policy_changed(
        self, key: PolicyKey, before: Policy | None, policy: Policy | None, selectors: list[int]
    ) -> None:
        """The policy `key` went from `before` to `policy` (None: absent); `selectors`: the ids
        of both's pod selectors. The targets either selects are compiled again, or have that
        policy's rules patched."""
        ns = key[0]
        # An edit that selects the same pods on the same networks and directions changes only
        # the rules of this policy in the tables of those pods: patched (`_patch_policies`).
        same_pods = (
            before is not None
            and policy is not None
            and before.pod_selector == policy.pod_selector
            and before.policy_types == policy.policy_types
            and before.networks == policy.networks
        )
        for target in self._targets.values():
            if target.namespace == ns and any(
                self._selectors.matches(sid, target.label_id, target.labels) for sid in selectors
            ):
                if same_pods:
                    self._edited.setdefault(target.key, set()).add(key)
                else:
                    self._dirty.add(target.key)

    def compile_changed(self) -> dict[str, PodRules]:
        """Recompile every target a change since the last call can have touched (patch, when
        only the addresses of selections it uses changed)."""
        out: dict[str, PodRules] = {}
        self._tell_dependents()
        for key in sorted(self._dirty):
            target = self._targets.get(key)
            if target is not None:
                out[key] = self._results[key] = self._compile(target)
        for key in sorted((self._edited.keys() | self._moved.keys()) - self._dirty):
            target = self._targets.get(key)
            if target is None:
                continue
            found: PodRules | None = self._results.get(key)
            if key in self._edited:
                found = self._patch_policies(key, self._edited[key])
                if found is not None:
                    self._results[key] = found
            if found is not None and key in self._moved:
                found = self._patch(key, self._moved[key])
            out[key] = self._results[key] = self._compile(target) if found is None else found
        self._dirty.clear()
        self._moved.clear()
        self._edited.clear()
        self._peers.collect()
        return out

    def rules(self, key: str) -> PodRules:
        """The target's rules now (compiled first, if a change touched them)."""
        self._tell_dependents()
        if (
            key in self._dirty
            or key in self._moved
            or key in self._edited
            or key not in self._results
        ):
            self._dirty.add(key)
            self.compile_changed()
        return self._results.get(key, {})

    def _tell_dependents(self) -> None:
        for sel in self._peers.take_moved():
            for dependent in sel.dependents:
                self._moved.setdefault(dependent, set()).add(sel)

    def _compile(self, target: PodView) -> PodRules:
        key = target.key
        layout: dict[tuple[str, Direction], list[_Slot]] = {}
        selecting = self._index.selecting(target)
        result: PodRules = {}
        for ifname, network in target.interfaces:
            governing = [p for p in selecting if network in p.networks]
            if not governing or ifname in result:
                continue
            per_dir: dict[Direction, DirectionRules | None] = {}
            for direction in DIRECTIONS:
                isolating = [p for p in governing if direction in p.policy_types]
                if not isolating:
                    per_dir[direction] = None
                    continue
                rules: list[AllowRule] = []
                slots = layout[(ifname, direction)] = []
                for policy in isolating:
                    self._add_policy_rules(
                        rules,
                        slots,
                        policy,
                        ifname=ifname,
                        direction=direction,
                        network=network,
                        target=target,
                    )
                per_dir[direction] = DirectionRules(tuple(p.uid for p in isolating), tuple(rules))
            result[ifname] = InterfaceRules(network, per_dir["ingress"], per_dir["egress"])
        self._index_slots(key, layout)
        return result

    def _add_policy_rules(
        self,
        rules: list[AllowRule],
        slots: list[_Slot],
        policy: Policy,
        *,
        ifname: str,
        direction: Direction,
        network: str,
        target: PodView,
    ) -> None:
        """Append the allow rules of each of `policy`'s rules in `direction` to `rules`, and
        where they went to `slots` (the full compile and the in-place one alike)."""
        for i, rule in enumerate(policy.rules(direction)):
            sel = self._peers.selection(policy, direction, i, rule)
            fresh = self._allow_rules(
                sel, policy, direction, i, rule, network=network, target=target
            )
            slots.append(
                _Slot(ifname, direction, network, policy, i, rule, sel, len(rules), len(fresh))
            )
            rules += fresh

    def _allow_rules(
        self,
        sel: SelectionState,
        policy: Policy,
        direction: Direction,
        i: int,
        rule: Rule,
        *,
        network: str,
        target: PodView,
    ) -> list[AllowRule]:
        """The allow rules of one rule of a policy, for one of the target's interfaces."""
        origin = f"{policy.key} {direction}[{i}]"
        return [
            AllowRule(policy.uid, origin, peers, ports, name, blocks)
            for peers, ports, name, blocks in self._peers.groups(
                sel, direction, rule, network, target
            )
            if (peers is None or peers) and ports != ()  # else it allows nothing
        ]

    def _patch(self, key: str, moved: set[SelectionState]) -> PodRules | None:
        """The target's rules with the allow rules of every rule reading a `moved` selection
        made again and put in place: what `_compile` would make, since nothing else changed
        (None: one of them gives more or fewer allow rules than before, compile it whole)."""
        result, slots = self._results.get(key), self._slots.get(key)
        target = self._targets.get(key)
        if result is None or slots is None or target is None:
            return None
        changes: dict[tuple[str, Direction], list[tuple[int, list[AllowRule]]]] = {}
        for sel in moved:
            for slot in slots.get(sel, ()):
                fresh = self._moved_rules(slot, result, target)
                if fresh is None:
                    return None
                changes.setdefault((slot.ifname, slot.direction), []).append((slot.start, fresh))
        out = dict(result)
        for (ifname, direction), spliced in changes.items():
            ir = out[ifname]
            d = ir.direction(direction)
            assert d is not None
            rules = list(d.rules)
            for start, fresh in spliced:
                rules[start : start + len(fresh)] = fresh
            nd = DirectionRules(d.policy_uids, tuple(rules))
            out[ifname] = InterfaceRules(
                ir.network,
                nd if direction == "ingress" else ir.ingress,
                nd if direction == "egress" else ir.egress,
            )
        return out

    def _moved_rules(
        self, slot: _Slot, result: PodRules, target: PodView
    ) -> list[AllowRule] | None:
        """The allow rules of `slot` made again after its selection's addresses moved (None:
        they are more or fewer than before). A rule whose peers alone change keeps the rest
        of its allow rule as it was: ports resolved and names made once."""
        if slot.peers_alone:
            peers = self._peers.addresses(slot.sel, slot.network)
            d = result[slot.ifname].direction(slot.direction)
            if peers and d is not None:
                old = d.rules[slot.start]
                if old.peers is peers:
                    return [old]
                return [
                    AllowRule(
                        old.policy_uid, old.origin, peers, old.ports, old.selection, old.blocks
                    )
                ]
        fresh = self._allow_rules(
            slot.sel,
            slot.policy,
            slot.direction,
            slot.index,
            slot.rule,
            network=slot.network,
            target=target,
        )
        return fresh if len(fresh) == slot.count else None

    def _patch_policies(self, key: str, edited: set[PolicyKey]) -> PodRules | None:
        """The target's rules with the allow rules of the `edited` policies made again and put
        in place of their old ones: what `_compile` would make, since those policies select
        it as before, on the same networks and directions (None: one had no rule in a
        direction it isolates, so there is no place known for it: compile it whole)."""
        result, layout = self._results.get(key), self._layout.get(key)
        target = self._targets.get(key)
        if result is None or layout is None or target is None:
            return None
        out = dict(result)
        fresh_layout = dict(layout)
        for (ifname, direction), slots in layout.items():
            ir = out[ifname]
            present = {policy_key(s.policy) for s in slots} & edited
            for pkey in edited - present:
                policy = self._index.policies()[pkey]
                if (
                    ir.network in policy.networks
                    and direction in policy.policy_types
                    and policy.rules(direction)
                ):
                    return None  # it had no rule here: where its rules go is not known
            if not present:
                continue
            d = ir.direction(direction)
            assert d is not None
            rules: list[AllowRule] = []
            fresh_slots: list[_Slot] = []
            done: set[PolicyKey] = set()
            for slot in slots:
                pkey = policy_key(slot.policy)
                if pkey not in edited:
                    kept = d.rules[slot.start : slot.start + slot.count]
                    fresh_slots.append(dataclasses.replace(slot, start=len(rules)))
                    rules += kept
                    continue
                if pkey in done:
                    continue
                done.add(pkey)
                self._add_policy_rules(
                    rules,
                    fresh_slots,
                    self._index.policies()[pkey],
                    ifname=ifname,
                    direction=direction,
                    network=ir.network,
                    target=target,
                )
            fresh_layout[(ifname, direction)] = fresh_slots
            nd = DirectionRules(d.policy_uids, tuple(rules))
            out[ifname] = InterfaceRules(
                ir.network,
                nd if direction == "ingress" else ir.ingress,
                nd if direction == "egress" else ir.egress,
            )
        self._index_slots(key, fresh_layout)
        return out

    def _index_slots(self, key: str, layout: dict[tuple[str, Direction], list[_Slot]]) -> None:
        """The target's slots by selection, and the selections it reads (`dependents`)."""
        slots: dict[SelectionState, list[_Slot]] = {}
        for per_direction in layout.values():
            for slot in per_direction:
                slots.setdefault(slot.sel, []).append(slot)
        for sel in self._uses.pop(key, ()):
            sel.dependents.discard(key)
        for sel in slots:
            sel.dependents.add(key)
        self._uses[key] = set(slots)
        self._slots[key] = slots
        self._layout[key] = layout
