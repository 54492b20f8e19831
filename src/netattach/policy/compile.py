"""Policies -> a rule IR per pod and interface (POL-SELECT, POL-PEERS, POL-PORTS, POL-IPBLOCK).

Pure: the inputs are the cluster's objects, the output is data. One allow rule per policy rule
(split only when a named port resolves differently for different destination pods), with its
peers as an address set and its ports as a port set, so the rule count never grows with
peers x ports (POL-COMPACT).

`Compiler` keeps the cluster between compiles and recompiles only what a change touches: a pod,
namespace or policy changed marks the peer selections it can enter or leave and the targets
(local pods) it can select; `compile_changed` recompiles those targets alone, with every other
selection's addresses reused. `compile_pods` is the same compiler built from scratch.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import ipaddress
import itertools
from collections.abc import Iterable, KeysView, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from netattach.cluster.model import KubeObject, labels, name_of
from netattach.policy.model import (
    DIRECTIONS,
    NAMESPACE_NAME_LABEL,
    AddressRange,
    Direction,
    LabelSelector,
    Policy,
    PortSpec,
    Rule,
    merge_ranges,
)
from netattach.policy.ranges import HostRanges, shift
from netattach.policy.selection import AddressSet, AddressSets, Selection, set_name
from netattach.policy.views import Interner, PodView, ViewCache, build_view, network_status, pod_key

# A selection's named-port destinations changed this often since its groups were last counted:
# they are counted again from the destinations (a log this long is not worth reading).
DEST_LOG_MAX = 4096

__all__ = [
    "AllowRule",
    "Compiler",
    "DirectionRules",
    "InterfaceRules",
    "PortRange",
    "ViewCache",
    "allows",
    "compile_pod",
    "compile_pods",
    "namespace_labels",
    "network_status",
    "pod_key",
    "rules_to_json",
]


@dataclass(frozen=True, order=True, slots=True)
class PortRange:
    protocol: str  # TCP, UDP, SCTP
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class AllowRule:
    """Traffic from/to `peers` (None: any address) on `ports` (None: any port) passes.

    `selection` names the peers' set: every rule of a table with the same one shares it.
    `blocks`: the part of `peers` its ipBlocks give (None: none); every other address of
    `peers` is a pod's host address. Rendering keeps the two apart: the blocks never change
    while the policy stays, the hosts change with every peer coming and going, and nft makes
    changing an interval set cost the size of every interval set of the table."""

    policy_uid: str
    origin: str  # "ns/name ingress[0]"
    peers: AddressSet | None
    ports: tuple[PortRange, ...] | None
    selection: str = ""
    blocks: AddressSet | None = None


@dataclass(frozen=True, slots=True)
class DirectionRules:
    """An isolated direction: only what one of `rules` allows passes."""

    policy_uids: tuple[str, ...]  # the policies isolating this direction
    rules: tuple[AllowRule, ...]


@dataclass(frozen=True, slots=True)
class InterfaceRules:
    network: str  # "ns/net"
    ingress: DirectionRules | None  # None: not isolated
    egress: DirectionRules | None

    def direction(self, direction: Direction) -> DirectionRules | None:
        return self.ingress if direction == "ingress" else self.egress


PodRules = dict[str, InterfaceRules]  # ifname -> rules


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
    sel: _Sel
    start: int
    count: int
    # Whether its one allow rule changes with the selection's addresses alone: an egress rule
    # to named ports is one rule per group of destinations instead.
    peers_alone: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.peers_alone = self.count == 1 and not (self.direction == "egress" and self.rule.named)


# peers, ports, set name, the peers' ipBlock part
_Group = tuple[AddressSet | None, tuple[PortRange, ...] | None, str, AddressSet | None]
_PolicyKey = tuple[str, str, str]  # namespace, name, uid
_Declared = tuple[tuple[str, str, int], ...]  # a pod's declared ports (name, protocol, number)


def namespace_labels(namespaces: Iterable[KubeObject]) -> dict[str, dict[str, str]]:
    """Namespace name -> labels, with the automatic `kubernetes.io/metadata.name` label."""
    out: dict[str, dict[str, str]] = {}
    for ns in namespaces:
        out[name_of(ns)] = {NAMESPACE_NAME_LABEL: name_of(ns), **labels(ns)}
    return out


@functools.lru_cache(maxsize=65536)
def _group_name(base: str, ports: tuple[PortSpec, ...], resolved: tuple[PortRange, ...]) -> str:
    return set_name(base, ports, resolved)


@functools.lru_cache(maxsize=65536)
def _resolve(
    ports: tuple[PortSpec, ...], dest: tuple[tuple[str, str, int], ...]
) -> tuple[PortRange, ...] | None:
    """The port set, named ports resolved against the destination's declared ports `dest`
    (name, protocol, number); an unresolvable name matches nothing."""
    if not ports:
        return None
    out: set[PortRange] = set()
    for p in ports:
        if p.port is None:
            out.add(PortRange(p.protocol, 1, 65535))
        elif isinstance(p.port, int):
            out.add(PortRange(p.protocol, p.port, p.end_port or p.port))
        else:
            for name, proto, number in dest:
                if name == p.port and proto == p.protocol:
                    out.add(PortRange(p.protocol, number, number))
    return tuple(sorted(out))


# (id of a rule's ports, a pod's declared ports) -> (those ports, what they resolve to): a
# selection's named-port destinations are resolved for each one that changes, again and again
# against the same few declarations (an entry holds the ports, so their id stays theirs)
_RESOLVED: dict[
    tuple[int, tuple[tuple[str, str, int], ...]],
    tuple[tuple[PortSpec, ...], tuple[PortRange, ...] | None],
] = {}
RESOLVED_CACHED = 65536


def _resolve_cached(
    ports: tuple[PortSpec, ...], dest: tuple[tuple[str, str, int], ...]
) -> tuple[PortRange, ...] | None:
    """`_resolve`, remembered."""
    key = (id(ports), dest)
    found = _RESOLVED.get(key)
    if found is not None and found[0] is ports:
        return found[1]
    if len(_RESOLVED) >= RESOLVED_CACHED:
        _RESOLVED.clear()
    resolved = _resolve(ports, dest)
    _RESOLVED[key] = (ports, resolved)
    return resolved


class _Selectors:
    """Label selectors as small ids, each matched once per distinct label map (by its id)."""

    def __init__(self) -> None:
        self._ids: dict[LabelSelector, int] = {}
        self._selectors: list[LabelSelector] = []
        self._memo: list[dict[int, bool]] = []

    def id(self, selector: LabelSelector) -> int:
        found = self._ids.get(selector)
        if found is None:
            found = self._ids[selector] = len(self._selectors)
            self._selectors.append(selector)
            self._memo.append({})
        return found

    def matches(self, sid: int, label_id: int, labels_: Mapping[str, str]) -> bool:
        memo = self._memo[sid]
        found = memo.get(label_id)
        if found is None:
            found = memo[label_id] = self._selectors[sid].matches(labels_)
        return found


@dataclass(frozen=True, slots=True)
class _Peer:
    """A peer with its selectors as ids (None: that selector is absent)."""

    namespace_selector: int | None
    pod_selector: int | None
    block: tuple[AddressRange, ...] | None  # an ipBlock's addresses


class _Sel:
    """One selection's resolved state: its pods, and per network its addresses and groups."""

    __slots__ = (
        "addresses",
        "blocks",
        "dependents",
        "dest",
        "dest_log",
        "groups",
        "hosts",
        "names",
        "peers",
        "selection",
        "stale",
        "tallies",
    )

    def __init__(self, selection: Selection, peers: tuple[_Peer, ...]) -> None:
        self.selection = selection
        self.peers = peers
        self.hosts: dict[str, HostRanges] = {}  # network -> addresses, kept up to date
        self.stale: set[str] = set()  # networks whose `addresses` lag behind `hosts`
        self.addresses: dict[str, AddressSet | None] = {}
        self.groups: dict[tuple[str, tuple[PortSpec, ...]], list[_Group]] = {}
        # (network, a rule's ports) -> its named-port groups' hosts, kept up to date from
        # `dest_log`: a group is made again from what changed, not from every destination
        self.tallies: dict[tuple[str, tuple[PortSpec, ...]], _Tally] = {}
        self.dependents: set[str] = set()
        self.names: dict[str, str] = {}  # network -> set name
        self.blocks: AddressSet | None = None  # what its ipBlocks admit, on any network
        # network -> a pod's declared ports -> the hosts it admits of the pods declaring them
        # (named-port destinations), kept up to date host by host once first read
        self.dest: dict[str, dict[_Declared, set[AddressRange]]] = {}
        # network -> each host that joined (True) or left `dest` since the tallies last read
        self.dest_log: dict[str, list[tuple[_Declared, AddressRange, bool]]] = {}

    @property
    def everything(self) -> bool:
        return not self.peers

    def regroup(self) -> None:
        """The named-port groups are out of date: made again when next read."""
        self.groups.clear()

    def log_dest(self, network: str, declared: _Declared, host: AddressRange, held: bool) -> None:
        """A host joined (`held`) or left the destinations declaring `declared`."""
        log = self.dest_log.setdefault(network, [])
        if len(log) >= DEST_LOG_MAX:
            # tallies that fell this far behind are made again from `dest`, and the log anew
            log.clear()
            for key in [k for k in self.tallies if k[0] == network]:
                del self.tallies[key]
        log.append((declared, host, held))

    def invalidate(self) -> set[str]:
        self.hosts.clear()
        self.stale.clear()
        self.addresses.clear()
        self.groups.clear()
        self.tallies.clear()
        self.dest.clear()
        self.dest_log.clear()
        return self.dependents


@dataclasses.dataclass(slots=True)
class _Tally:
    """One rule's named-port groups on one network: per port set the destinations resolve the
    rule's ports to, how many destinations resolving them so hold each host, and the group's
    last set."""

    counts: dict[tuple[PortRange, ...], dict[AddressRange, int]] = dataclasses.field(
        default_factory=dict
    )
    sets: dict[tuple[PortRange, ...], AddressSet] = dataclasses.field(default_factory=dict)
    seen: int = 0  # how much of the selection's `dest_log` is counted

    def catch_up(
        self,
        log: list[tuple[_Declared, AddressRange, bool]],
        ports: tuple[PortSpec, ...],
        numeric: tuple[PortRange, ...] | None,
    ) -> dict[tuple[PortRange, ...], tuple[set[AddressRange], set[AddressRange]]]:
        """Count the destinations that changed since; per group, the hosts it gained and
        lost (net)."""
        changes: dict[tuple[PortRange, ...], tuple[set[AddressRange], set[AddressRange]]] = {}
        for declared, host, held in itertools.islice(log, self.seen, None):
            resolved = _resolve_cached(ports, declared)
            if not resolved or resolved == numeric:
                continue
            counts = self.counts.setdefault(resolved, {})
            gained, lost = changes.setdefault(resolved, (set(), set()))
            if held:
                count = counts[host] = counts.get(host, 0) + 1
                if count == 1:
                    shift(host, gained, lost)
            else:
                count = counts[host] - 1
                if count:
                    counts[host] = count
                else:
                    del counts[host]
                    shift(host, lost, gained)
        return changes


def _changed_set(
    before: AddressSet, gained: set[AddressRange], lost: set[AddressRange]
) -> AddressSet:
    """A named-port group's hosts after it gained and lost some, made after its last set (a
    table holding that one is updated with the change alone). The hosts stay single, not
    joined into ranges: the set is a hash set of addresses (`render`). The few that changed
    are taken out and put in with a bisection each: sorting them all again compared every
    pair of a big group's hosts anew."""
    ordered = list(before.ranges)
    for host in lost:
        del ordered[bisect.bisect_left(ordered, host)]
    for host in gained:
        bisect.insort(ordered, host)
    return AddressSet(tuple(ordered), before, tuple(sorted(gained)), tuple(sorted(lost)))


class Compiler:
    """The cluster as compile reads it, and the rules of each target, kept up to date.

    Feed it with `set_*`/`remove_*` (pods are every pod of the cluster, as peers; targets are
    the pods whose rules are wanted, with their own view of their interfaces); then
    `compile_changed` recompiles exactly the targets some change can have touched. Peer
    selections are resolved lazily, once, for the targets that use them.
    """

    def __init__(self, interner: Interner | None = None) -> None:
        self.interner = interner or Interner()
        self._selectors = _Selectors()
        self._sets = AddressSets()
        self._pods: dict[str, PodView] = {}
        self._buckets: dict[str, dict[int, dict[str, PodView]]] = {}  # ns -> label id -> pods
        self._matches: dict[str, dict[int | None, list[PodView]]] = {}  # ns -> selector -> pods
        self._owners: dict[str, dict[AddressRange, set[str]]] = {}  # network -> host -> pods
        self._ns_labels: dict[str, tuple[int, Mapping[str, str]]] = {}
        self._policies: dict[_PolicyKey, Policy] = {}
        self._policy_selector: dict[_PolicyKey, int] = {}
        self._rule_sels: dict[tuple[_PolicyKey, Direction, int], tuple[Policy, _Sel]] = {}
        # policy -> the keys of its rules in `_rule_sels`; namespace -> its policies, in key
        # order (an edit then touches its own entries, not a scan of every policy's)
        self._rule_keys: dict[_PolicyKey, set[tuple[_PolicyKey, Direction, int]]] = {}
        self._by_namespace: dict[str, dict[_PolicyKey, Policy]] = {}
        self._sels: dict[Selection, _Sel] = {}
        # (namespace, its label id, a pod's label id) -> the selections picking such a pod;
        # valid while the selections stay (labels are interned: equal ids, equal labels)
        self._picking: dict[tuple[str, int, int], frozenset[_Sel]] = {}
        # (namespace, its label id) -> the selections that can pick there (`_in_scope`);
        # valid, like `_picking`, while the selections stay
        self._scopes: dict[tuple[str, int], list[tuple[int | None, frozenset[_Sel]]]] = {}
        # network -> a pod's declared ports -> host -> how many pods declaring them hold it
        self._declaring: dict[str, dict[_Declared, dict[AddressRange, int]]] = {}
        self._dest_sels: dict[str, set[_Sel]] = {}  # network -> the selections with `dest`
        # network -> those of them that admit addresses beyond their members' (every address,
        # or ipBlocks): the only ones that can hold a host no member of theirs holds
        self._dest_wide: dict[str, set[_Sel]] = {}
        self._resolved: dict[str, set[_Sel]] = {}  # network -> the selections with `hosts` there
        self._targets: dict[str, PodView] = {}
        self._results: dict[str, PodRules] = {}
        self._uses: dict[str, set[_Sel]] = {}
        self._dirty: set[str] = set()
        # target -> the selections whose addresses alone changed since its rules were made:
        # its rules are patched in place (`_patch`), not made again
        self._moved: dict[str, set[_Sel]] = {}
        # the selections whose addresses or groups changed, not yet told to their dependents
        # (`_moved`): many changes to one selection between two compiles tell them once
        self._moved_sels: set[_Sel] = set()
        # target -> selection -> where the rules reading it put their allow rules
        self._slots: dict[str, dict[_Sel, list[_Slot]]] = {}
        # target -> (ifname, direction) -> every policy rule's slot, in order
        self._layout: dict[str, dict[tuple[str, Direction], list[_Slot]]] = {}
        # target -> the policies edited (selecting the same pods) since its rules were made:
        # their allow rules are made again and put in place (`_patch_policies`)
        self._edited: dict[str, set[_PolicyKey]] = {}

    # -- inputs ---------------------------------------------------------------------------------

    def view(self, pod: KubeObject) -> PodView:
        return build_view(pod, self.interner)

    def set_namespace(self, name: str, labels_: Mapping[str, str]) -> None:
        before = self._namespace(name)
        self._ns_labels[name] = self.interner.labels({NAMESPACE_NAME_LABEL: name, **labels_})
        if self._ns_labels[name][0] != before[0]:
            self._namespace_changed()

    def remove_namespace(self, name: str) -> None:
        before = self._ns_labels.pop(name, None)
        if before is not None and before[0] != self._namespace(name)[0]:
            self._namespace_changed()

    def set_pod(self, view: PodView) -> None:
        before = self._pods.get(view.key)
        if before is not None:
            if before == view:
                return
            self._unbucket(before)
        self._pods[view.key] = view
        self._buckets.setdefault(view.namespace, {}).setdefault(view.label_id, {})[view.key] = view
        self._pod_changed(before, view)
        self._own(before, view)

    def remove_pod(self, key: str) -> None:
        before = self._pods.pop(key, None)
        if before is not None:
            self._unbucket(before)
            self._pod_changed(before, None)
            self._own(before, None)

    def set_policies(self, policies: Iterable[Policy]) -> None:
        """The cluster's valid policies now: only those added, changed or gone count."""
        fresh = {(p.namespace, p.name, p.uid): p for p in policies}
        for key in [k for k in self._policies if k not in fresh]:
            self._set_policy(key, None)
        for key, policy in fresh.items():
            before = self._policies.get(key)
            if before is not policy and before != policy:
                self._set_policy(key, policy)

    def set_target(self, view: PodView) -> None:
        if self._targets.get(view.key) != view:
            self._targets[view.key] = view
            self._dirty.add(view.key)

    def remove_target(self, key: str) -> None:
        self._targets.pop(key, None)
        self._results.pop(key, None)
        self._dirty.discard(key)
        self._moved.pop(key, None)
        self._slots.pop(key, None)
        self._layout.pop(key, None)
        self._edited.pop(key, None)
        for sel in self._uses.pop(key, ()):
            sel.dependents.discard(key)

    def targets(self) -> list[str]:
        return list(self._targets)

    def pods(self) -> set[str]:
        return set(self._pods)

    def namespaces(self) -> set[str]:
        return set(self._ns_labels)

    # -- outputs --------------------------------------------------------------------------------

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
        self._collect()
        return out

    def rules(self, key: str) -> PodRules:
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

    # -- changes --------------------------------------------------------------------------------

    def _namespace(self, name: str) -> tuple[int, Mapping[str, str]]:
        found = self._ns_labels.get(name)
        if found is None:
            found = self.interner.labels({NAMESPACE_NAME_LABEL: name})
        return found

    def _namespace_changed(self) -> None:
        for sel in self._sels.values():
            if any(p.namespace_selector is not None for p in sel.peers):
                for network in sel.dest:
                    self._dest_sels[network].discard(sel)
                    self._dest_wide[network].discard(sel)
                for network in sel.hosts:
                    self._resolved[network].discard(sel)
                self._dirty |= sel.invalidate()

    def _own(self, before: PodView | None, after: PodView | None) -> None:
        """Keep the index of which pods hold each address (a host two pods share leaves a
        selection only when no member holds it any more)."""
        for view, keep in ((before, False), (after, True)):
            if view is None:
                continue
            for network, hosts in view.addresses.items():
                per_network = self._owners.setdefault(network, {})
                for host in hosts:
                    if keep:
                        per_network.setdefault(host, set()).add(view.key)
                    else:
                        owners = per_network.get(host)
                        if owners is not None:
                            owners.discard(view.key)
                            if not owners:
                                del per_network[host]

    def _unbucket(self, view: PodView) -> None:
        buckets = self._buckets[view.namespace]
        bucket = buckets[view.label_id]
        del bucket[view.key]
        if not bucket:
            del buckets[view.label_id]
            if not buckets:
                del self._buckets[view.namespace]

    def _pod_changed(self, before: PodView | None, after: PodView | None) -> None:
        """Invalidate the selections whose content `before` -> `after` can change: those it
        enters or leaves, and, when its addresses or ports change, those it is in (or, for
        named-port groups, whose addresses hold it). A relabel that leaves a selection's
        membership as it was touches nothing of it."""
        for view in (before, after):
            if view is not None:
                self._matches.pop(view.namespace, None)
        relabel_only = (
            before is not None
            and after is not None
            and before.addresses == after.addresses
            and before.ports == after.ports
        )
        if not relabel_only:
            self._declared_changed(before, after)
        was_in, now_in = self._picked_by(before), self._picked_by(after)
        # Per network, the hosts a selection loses and gains when the pod leaves it, joins it
        # or stays in it with other addresses: worked out once, for every selection alike.
        moves: dict[tuple[bool, bool], dict[str, tuple[list[AddressRange], list[AddressRange]]]]
        moves = {}
        member = before or after
        # (a selection resolved on none of the networks the pod has hosts on keeps all it has:
        # its addresses, its groups; most selections picking a pod are such, for a pod is on
        # one or two of a cluster's networks)
        # (a relabel moves only the selections it enters or leaves)
        picked = was_in ^ now_in if relabel_only else was_in | now_in
        touched: frozenset[_Sel] = frozenset()
        for network in _networks_of(before, after):
            resolved = self._resolved.get(network)
            if resolved:
                touched = touched | (picked & resolved) if touched else picked & resolved
        for sel in touched:
            was, now = sel in was_in, sel in now_in
            if was != now or not relabel_only:
                found = moves.get((was, now))
                if found is None:
                    found = moves[(was, now)] = _moves(
                        before if was else None, after if now else None
                    )
                assert member is not None  # a selection picked one of the two
                self._member_changed(sel, member.key, found)

    def _declared_changed(self, before: PodView | None, after: PodView | None) -> None:
        """Keep the index of which hosts pods declaring each set of ports hold, and the
        named-port destinations of the selections (`dest`): a host joins those a selection
        admits, or leaves them, as the first pod declaring those ports gets it or the last
        one loses it."""
        for view, step in ((before, -1), (after, 1)):
            if view is None:
                continue
            for network, hosts in view.addresses.items():
                counts = self._declaring.setdefault(network, {}).setdefault(view.ports, {})
                for host in hosts:
                    count = counts.get(host, 0) + step
                    if count:
                        counts[host] = count
                    else:
                        del counts[host]
                    if count == (1 if step > 0 else 0):
                        self._dest_changed(network, view.ports, host, step > 0)
                if not counts:
                    del self._declaring[network][view.ports]

    def _dest_changed(
        self, network: str, declared: _Declared, host: AddressRange, held: bool
    ) -> None:
        """Pods declaring `declared` started (`held`) or stopped holding `host`."""
        sels: set[_Sel] = self._dest_sels.get(network, set())
        if held:
            # Only a selection that admits the host can take it: one picking a pod that holds
            # it now, or one admitting more than its members (a pod joining one is counted
            # when it joins, `_admitted`); not every selection with destinations there.
            owners = self._owners.get(network, {}).get(host, ())
            picking = [self._picked_by(self._pods.get(o)) for o in owners]
            sels = self._dest_wide.get(network, set()).union(*picking) & sels
        for sel in sels:
            dest = sel.dest[network]
            if held and (sel.everything or sel.hosts[network].holds(host)):
                hosts = dest.setdefault(declared, set())
                if host in hosts:
                    continue
                hosts.add(host)
            elif not held and host in dest.get(declared, ()):
                dest[declared].discard(host)
            else:
                continue
            sel.log_dest(network, declared, host, held)
            sel.regroup()
            self._moved_all(sel)

    def _picked_by(self, view: PodView | None) -> frozenset[_Sel]:
        """The selections a pod selector of which picks `view` (a peer without an ipBlock
        whose namespace part admits its namespace and whose pod selector its labels), found
        once per namespace labels and pod labels: a pod changing is then not a test of every
        selection."""
        if view is None:
            return frozenset()
        ns_id, ns_labels = self._namespace(view.namespace)
        key = (view.namespace, ns_id, view.label_id)
        found = self._picking.get(key)
        if found is None:
            picked: set[_Sel] = set()
            for sid, sels in self._in_scope(view.namespace, ns_id, ns_labels):
                if sid is None or self._selectors.matches(sid, view.label_id, view.labels):
                    picked |= sels
            found = self._picking[key] = frozenset(picked)
        return found

    def _in_scope(
        self, namespace: str, ns_id: int, ns_labels: Mapping[str, str]
    ) -> list[tuple[int | None, frozenset[_Sel]]]:
        """The selections with a pod-selecting peer that can pick a pod of `namespace`, by
        the peer's pod selector (None: any pod): a pod's labels are then matched once per
        distinct selector of its namespace, not once per peer of every selection."""
        key = (namespace, ns_id)
        found = self._scopes.get(key)
        if found is None:
            by: dict[int | None, set[_Sel]] = {}
            for sel in self._sels.values():
                for peer in sel.peers:
                    if peer.block is None and self._in_namespace(
                        peer, namespace, ns_id, ns_labels, sel.selection.namespace
                    ):
                        by.setdefault(peer.pod_selector, set()).add(sel)
            found = self._scopes[key] = [(sid, frozenset(sels)) for sid, sels in by.items()]
        return found

    def _member_changed(
        self,
        sel: _Sel,
        key: str,
        moves: Mapping[str, tuple[list[AddressRange], list[AddressRange]]],
    ) -> None:
        """A member (`key`) left, joined or changed its addresses or ports: its hosts leave
        and join (`moves`, by network) the selection's addresses in place."""
        moved = False
        for network, hosts in sel.hosts.items():
            found = moves.get(network)
            if found is None:
                continue
            owners = self._owners.get(network, {})

            def held(host: AddressRange, owners: Mapping[AddressRange, set[str]] = owners) -> bool:
                others = owners.get(host)
                if not others or (len(others) == 1 and key in others):
                    return False  # (most addresses: one pod's own)
                return any(
                    other != key and sel in self._picked_by(self._pods.get(other))
                    for other in others
                )

            lost, gained = hosts.update(*found, held)
            if lost or gained:
                sel.stale.add(network)
                moved = True
                dest = sel.dest.get(network)
                if dest is not None:
                    self._admitted(sel, dest, network, lost, gained)
        if moved:
            # (a member without a host on any network the selection resolved moves nothing:
            # its groups, made from those addresses and from `dest`, stay as they are)
            sel.regroup()
            self._moved_all(sel)

    def _moved_all(self, sel: _Sel) -> None:
        """The selection's addresses or groups changed: patch the targets reading it."""
        self._moved_sels.add(sel)

    def _tell_dependents(self) -> None:
        for sel in self._moved_sels:
            for dependent in sel.dependents:
                self._moved.setdefault(dependent, set()).add(sel)
        self._moved_sels.clear()

    def _patch(self, key: str, moved: set[_Sel]) -> PodRules | None:
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
            peers = self._addresses(slot.sel, slot.network)
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

    def _patch_policies(self, key: str, edited: set[_PolicyKey]) -> PodRules | None:
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
            present = {_policy_key(s.policy) for s in slots} & edited
            for pkey in edited - present:
                policy = self._policies[pkey]
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
            done: set[_PolicyKey] = set()
            for slot in slots:
                pkey = _policy_key(slot.policy)
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
                    self._policies[pkey],
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
        slots: dict[_Sel, list[_Slot]] = {}
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

    def _admitted(
        self,
        sel: _Sel,
        dest: dict[_Declared, set[AddressRange]],
        network: str,
        lost: list[AddressRange],
        gained: list[AddressRange],
    ) -> None:
        """A selection's named-port destinations after its addresses lost and gained hosts."""
        if lost:
            for declared, hosts in dest.items():
                for host in hosts.intersection(lost):
                    hosts.discard(host)
                    sel.log_dest(network, declared, host, False)
        if gained:
            for declared, counts in self._declaring.get(network, {}).items():
                found = [h for h in gained if h in counts]
                if found:
                    hosts = dest.setdefault(declared, set())
                    for host in found:
                        if host not in hosts:
                            hosts.add(host)
                            sel.log_dest(network, declared, host, True)

    def _set_policy(self, key: _PolicyKey, policy: Policy | None) -> None:
        before = self._policies.pop(key, None)
        selectors = [] if before is None else [self._policy_selector.pop(key)]
        for rule_key in self._rule_keys.pop(key, ()):
            del self._rule_sels[rule_key]
        ns = key[0]
        of_namespace = self._by_namespace.get(ns, {})
        of_namespace.pop(key, None)
        if policy is not None:
            self._policies[key] = policy
            of_namespace[key] = policy
            self._policy_selector[key] = self._selectors.id(policy.pod_selector)
            selectors.append(self._policy_selector[key])
        self._by_namespace[ns] = dict(sorted(of_namespace.items()))
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

    def _collect(self) -> None:
        """Forget selections no policy rule names any more."""
        live = {id(sel) for _, sel in self._rule_sels.values()}
        for selection in [s for s, sel in self._sels.items() if id(sel) not in live]:
            sel = self._sels.pop(selection)
            for network in sel.dest:
                self._dest_sels[network].discard(sel)
                self._dest_wide[network].discard(sel)
            for network in sel.hosts:
                self._resolved[network].discard(sel)
            self._picking.clear()
            self._scopes.clear()

    # -- resolving ------------------------------------------------------------------------------

    def _in_namespace(
        self,
        peer: _Peer,
        namespace: str,
        ns_id: int,
        ns_labels: Mapping[str, str],
        policy_ns: str,
    ) -> bool:
        """Whether `peer` can pick pods of `namespace` (its namespace selector, or the
        policy's own namespace when it has none)."""
        if peer.namespace_selector is None:
            return namespace == policy_ns
        return self._selectors.matches(peer.namespace_selector, ns_id, ns_labels)

    def _rule_sel(self, policy: Policy, direction: Direction, index: int, rule: Rule) -> _Sel:
        key = ((policy.namespace, policy.name, policy.uid), direction, index)
        found = self._rule_sels.get(key)
        if found is not None and found[0] is policy:
            return found[1]
        selection = Selection.of(rule.peers, policy.namespace)
        sel = self._sels.get(selection)
        if sel is None:
            peers = tuple(
                _Peer(
                    None
                    if p.namespace_selector is None
                    else self._selectors.id(p.namespace_selector),
                    None if p.pod_selector is None else self._selectors.id(p.pod_selector),
                    None if p.ip_block is None else p.ip_block.ranges(),
                )
                for p in rule.peers
            )
            sel = self._sels[selection] = _Sel(selection, peers)
            self._picking.clear()
            self._scopes.clear()
            blocks = merge_ranges(r for p in peers if p.block is not None for r in p.block)
            sel.blocks = self._sets.get(blocks) if blocks else None
        self._rule_sels[key] = (policy, sel)
        self._rule_keys.setdefault(key[0], set()).add(key)
        return sel

    def _pods_of(self, sel: _Sel) -> Iterable[PodView]:
        """The members of a selection now (read when a network's addresses are first needed;
        then kept up to date host by host, never read again)."""
        out: list[PodView] = []
        selectors = [p for p in sel.peers if p.block is None]
        for ns in self._buckets:
            ns_id, ns_labels = self._namespace(ns)
            in_scope = {
                p.pod_selector
                for p in selectors
                if (
                    ns == sel.selection.namespace
                    if p.namespace_selector is None
                    else self._selectors.matches(p.namespace_selector, ns_id, ns_labels)
                )
            }
            if None in in_scope:
                out.extend(self._matching(ns, None))
            elif len(in_scope) == 1:
                out.extend(self._matching(ns, in_scope.pop()))
            elif in_scope:
                found = {v.key: v for sid in in_scope for v in self._matching(ns, sid)}
                out.extend(found.values())
        return out

    def _matching(self, ns: str, sid: int | None) -> list[PodView]:
        """The pods of `ns` a pod selector (None: every pod) matches, kept until one of the
        namespace's pods changes."""
        per_ns = self._matches.setdefault(ns, {})
        found = per_ns.get(sid)
        if found is None:
            found = per_ns[sid] = [
                v
                for label_id, bucket in self._buckets.get(ns, {}).items()
                if sid is None
                or self._selectors.matches(sid, label_id, next(iter(bucket.values())).labels)
                for v in bucket.values()
            ]
        return found

    def _name(self, sel: _Sel, network: str) -> str:
        found = sel.names.get(network)
        if found is None:
            if not sel.names:
                sel.names[""] = repr(sel.selection)  # the costly part, once
            found = sel.names[network] = set_name(sel.names[""], network)
        return found

    def _addresses(self, sel: _Sel, network: str) -> AddressSet | None:
        """The addresses a selection admits on `network` (None: any address)."""
        if sel.everything:
            return None
        found = sel.addresses.get(network)
        if found is None or network in sel.stale:
            hosts = sel.hosts.get(network)
            if hosts is None:
                blocks = [r for p in sel.peers if p.block is not None for r in p.block]
                members = self._pods_of(sel)
                self._resolved.setdefault(network, set()).add(sel)
                hosts = sel.hosts[network] = HostRanges(
                    blocks, [a for v in members for a in v.addresses.get(network, ())]
                )
            version, gained, lost = hosts.advance()
            if network in sel.stale:
                # Hosts came or went since it was last read: new content, which interning
                # would only hash (every range of it) to find nothing equal. It names the
                # addresses it follows and what changed since, so that a table holding those
                # is updated with the change alone (`HostSet`), and its ranges are read only
                # if something needs them whole (`ranges.Version`).
                found = AddressSet(None, sel.addresses.get(network), gained, lost, version=version)
            else:
                found = self._sets.get(hosts.snapshot())
            sel.addresses[network] = found
            sel.stale.discard(network)
        return found

    def _groups(
        self, sel: _Sel, direction: Direction, rule: Rule, network: str, target: PodView
    ) -> list[_Group]:
        """(peers, ports, set name) groups of one rule; more than one only for egress to
        named ports."""
        peers = self._addresses(sel, network)
        name = "" if peers is None else self._name(sel, network)
        blocks = None if peers is None else sel.blocks
        if direction == "ingress" or not rule.named:
            ports = _resolve(rule.ports, target.ports if direction == "ingress" else ())
            return [(peers, ports, name, blocks)]
        key = (network, rule.ports)
        found = sel.groups.get(key)
        if found is None:
            found = sel.groups[key] = self._egress_groups(
                sel, rule, network, peers=peers, name=name, blocks=blocks
            )
        return found

    def _egress_groups(
        self,
        sel: _Sel,
        rule: Rule,
        network: str,
        *,
        peers: AddressSet | None,
        name: str,
        blocks: AddressSet | None,
    ) -> list[_Group]:
        """Egress to named ports: each destination pod resolves the names itself. The hosts
        of each group of destinations resolving them alike are tallied once, then kept up to
        date from the destinations that changed since (`_Sel.dest_log`)."""
        numeric_specs = tuple(p for p in rule.ports if not isinstance(p.port, str))
        numeric = _resolve(numeric_specs, ()) if numeric_specs else ()
        out: list[_Group] = []
        if numeric:
            out.append((peers, numeric, name, blocks))
        dest = self._dest(sel, network)
        log = sel.dest_log.setdefault(network, [])
        key = (network, rule.ports)
        tally = sel.tallies.get(key)
        if tally is None:
            tally = sel.tallies[key] = _Tally()
            for declared, hosts in dest.items():
                resolved = _resolve_cached(rule.ports, declared)
                if resolved and resolved != numeric:
                    counts = tally.counts.setdefault(resolved, {})
                    for host in hosts:
                        counts[host] = counts.get(host, 0) + 1
            for resolved, counts in list(tally.counts.items()):
                if counts:
                    tally.sets[resolved] = self._sets.get(tuple(sorted(counts)))
                else:
                    del tally.counts[resolved]
        else:
            for resolved, (gained, lost) in tally.catch_up(log, rule.ports, numeric).items():
                if not gained and not lost:
                    continue
                before = tally.sets.get(resolved)
                if not tally.counts.get(resolved):
                    tally.counts.pop(resolved, None)
                    tally.sets.pop(resolved, None)
                elif before is None:
                    tally.sets[resolved] = self._sets.get(tuple(sorted(tally.counts[resolved])))
                else:
                    tally.sets[resolved] = _changed_set(before, gained, lost)
        tally.seen = len(log)
        mine = [t for k, t in sel.tallies.items() if k[0] == network]
        if all(t.seen == len(log) for t in mine):
            log.clear()  # every tally of the network has counted it
            for t in mine:
                t.seen = 0
        for ports in sorted(tally.sets):
            # Named after the rule's ports too: another rule of the same peers whose ports
            # resolve to the same numbers on other pods holds other hosts (one name for both
            # gave the second rule the first one's set).
            group_name = _group_name(name or network, rule.ports, ports)
            out.append((tally.sets[ports], ports, group_name, None))
        return out

    def _dest(self, sel: _Sel, network: str) -> Mapping[_Declared, Iterable[AddressRange]]:
        """The hosts of pods with addresses on `network` that `sel` admits, by the ports the
        pods declare: read once, then kept up to date host by host (`_declared_changed`,
        `_admitted`). Every host, for a selection of every address."""
        found = sel.dest.get(network)
        if found is None:
            hosts = sel.hosts.get(network)
            declaring = self._declaring.get(network, {})
            found = sel.dest[network] = {
                declared: set(counts) if hosts is None else {h for h in counts if hosts.holds(h)}
                for declared, counts in declaring.items()
            }
            self._dest_sels.setdefault(network, set()).add(sel)
            wide = self._dest_wide.setdefault(network, set())
            if sel.everything or sel.blocks is not None:
                wide.add(sel)
        return found

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
            sel = self._rule_sel(policy, direction, i, rule)
            fresh = self._allow_rules(
                sel, policy, direction, i, rule, network=network, target=target
            )
            slots.append(
                _Slot(ifname, direction, network, policy, i, rule, sel, len(rules), len(fresh))
            )
            rules += fresh

    def _allow_rules(
        self,
        sel: _Sel,
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
            for peers, ports, name, blocks in self._groups(sel, direction, rule, network, target)
            if (peers is None or peers) and ports != ()  # else it allows nothing
        ]

    def _compile(self, target: PodView) -> PodRules:
        key = target.key
        layout: dict[tuple[str, Direction], list[_Slot]] = {}
        selecting = [
            p
            for p in self._by_namespace.get(target.namespace, {}).values()
            if self._selectors.matches(
                self._policy_selector[(p.namespace, p.name, p.uid)],
                target.label_id,
                target.labels,
            )
        ]
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


def _networks_of(before: PodView | None, after: PodView | None) -> set[str] | KeysView[str]:
    """The networks on which `before` or `after` has a host."""
    if before is None or after is None:
        view = before or after
        return set() if view is None else view.addresses.keys()
    return before.addresses.keys() | after.addresses.keys()


def _moves(
    before: PodView | None, after: PodView | None
) -> dict[str, tuple[list[AddressRange], list[AddressRange]]]:
    """Network -> (hosts gone, hosts added), sorted, from `before`'s addresses to `after`'s
    (None: none); networks where nothing changed are left out."""
    out = {}
    old = {} if before is None else before.addresses
    new = {} if after is None else after.addresses
    for network in old.keys() | new.keys():
        had, has = set(old.get(network, ())), set(new.get(network, ()))
        if had != has:
            out[network] = (sorted(had - has), sorted(has - had))
    return out


def _policy_key(policy: Policy) -> _PolicyKey:
    return policy.namespace, policy.name, policy.uid


def compile_pod(
    pod: KubeObject,
    namespaces: Sequence[KubeObject],
    pods: Sequence[KubeObject],
    policies: Sequence[Policy],
) -> PodRules:
    """The rules of every interface of `pod` whose network some policy selecting it governs.

    An empty result means the pod is untouched (POL-SELECT).
    """
    return compile_pods([pod], namespaces, pods, policies)[pod_key(pod)]


def compile_pods(
    targets: Iterable[KubeObject],
    namespaces: Sequence[KubeObject],
    pods: Sequence[KubeObject],
    policies: Sequence[Policy],
    *,
    cache: ViewCache | None = None,
) -> dict[str, PodRules]:
    """`compile_pod` for each of `targets` ("ns/name" -> rules), from scratch.

    `cache`: reuse the pod views of an earlier compile."""
    targets = list(targets)
    compiler = Compiler(cache.interner if cache is not None else None)
    views = cache.views(pods) if cache is not None else [compiler.view(p) for p in pods]
    for ns in namespaces:
        compiler.set_namespace(name_of(ns), labels(ns))
    for view in views:
        compiler.set_pod(view)
    compiler.set_policies(policies)
    seen = {id(pod): view for pod, view in zip(pods, views, strict=True)}  # a target is a peer too
    for pod in targets:
        compiler.set_target(seen.get(id(pod)) or compiler.view(pod))
    compiler.compile_changed()
    return {pod_key(pod): compiler.rules(pod_key(pod)) for pod in targets}


def allows(
    rules: InterfaceRules | None, direction: Direction, peer_ip: str, protocol: str, port: int
) -> bool:
    """Whether the IR lets a new connection through (the peer is the source for ingress)."""
    if rules is None:
        return True
    d = rules.direction(direction)
    if d is None:
        return True
    addr = ipaddress.ip_address(peer_ip)
    for r in d.rules:
        if r.peers is not None and not any(addr in n for n in r.peers):
            continue
        if r.ports is not None and not any(
            p.protocol == protocol and p.first <= port <= p.last for p in r.ports
        ):
            continue
        return True
    return False


def rules_to_json(rules: Mapping[str, InterfaceRules]) -> dict[str, Any]:
    """The IR as JSON-ready data (golden files, debugging)."""

    def direction(d: DirectionRules | None) -> dict[str, Any] | None:
        if d is None:
            return None
        return {
            "policies": list(d.policy_uids),
            "rules": [
                {
                    "policy": r.policy_uid,
                    "origin": r.origin,
                    "peers": None if r.peers is None else [str(n) for n in r.peers],
                    "ports": None
                    if r.ports is None
                    else [[p.protocol, p.first, p.last] for p in r.ports],
                }
                for r in d.rules
            ],
        }

    return {
        ifname: {
            "network": ir.network,
            "ingress": direction(ir.ingress),
            "egress": direction(ir.egress),
        }
        for ifname, ir in sorted(rules.items())
    }
