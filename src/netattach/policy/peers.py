"""Peer resolution: which pods each selection picks, and the addresses and groups it resolves to.

A selection (`selection.Selection`: a rule's peers) is resolved once per network, for the
targets whose rules read it, and then kept up to date as pods, namespaces and policies change,
instead of being resolved again:

    a pod changes ──> the selections it enters, leaves or is in (`_picked_by`, memoised per
                      namespace labels and pod labels) ──> their hosts, in place (`HostRanges`)
                  ──> the named-port destinations it joins or leaves (`dest`, `dest_log`)
    a namespace's labels change ──> every selection with a namespace selector, read again

A selection whose addresses or groups changed is noted (`take_moved`): the targets reading it
have their rules patched (`targets`).
"""

from __future__ import annotations

from collections.abc import Iterable, KeysView, Mapping

from netattach.policy.cluster_index import ClusterIndex, Peer, PodChange, PolicyKey
from netattach.policy.model import AddressRange, Direction, Policy, PortSpec, Rule, merge_ranges
from netattach.policy.named_ports import Declared, DestLog, Group, Tally, egress_groups, resolve
from netattach.policy.ranges import HostRanges
from netattach.policy.selection import AddressSet, AddressSets, Selection, set_name
from netattach.policy.views import PodView

# A selection's named-port destinations changed this often since its groups were last counted:
# they are counted again from the destinations (a log this long is not worth reading).
DEST_LOG_MAX = 4096


class SelectionState:
    """One selection's resolved state: its pods, and per network its addresses and groups.

    `dependents`, the targets whose rules read it, is kept by `targets.Targets`."""

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

    def __init__(self, selection: Selection, peers: tuple[Peer, ...]) -> None:
        self.selection = selection
        self.peers = peers
        self.hosts: dict[str, HostRanges] = {}  # network -> addresses, kept up to date
        self.stale: set[str] = set()  # networks whose `addresses` lag behind `hosts`
        self.addresses: dict[str, AddressSet | None] = {}
        self.groups: dict[tuple[str, tuple[PortSpec, ...]], list[Group]] = {}
        # (network, a rule's ports) -> its named-port groups' hosts, kept up to date from
        # `dest_log`: a group is made again from what changed, not from every destination
        self.tallies: dict[tuple[str, tuple[PortSpec, ...]], Tally] = {}
        self.dependents: set[str] = set()
        self.names: dict[str, str] = {}  # network -> set name
        self.blocks: AddressSet | None = None  # what its ipBlocks admit, on any network
        # network -> a pod's declared ports -> the hosts it admits of the pods declaring them
        # (named-port destinations), kept up to date host by host once first read
        self.dest: dict[str, dict[Declared, set[AddressRange]]] = {}
        # network -> each host that joined (True) or left `dest` since the tallies last read
        self.dest_log: dict[str, DestLog] = {}

    @property
    def everything(self) -> bool:
        return not self.peers

    def regroup(self) -> None:
        """The named-port groups are out of date: made again when next read."""
        self.groups.clear()

    def log_dest(self, network: str, declared: Declared, host: AddressRange, held: bool) -> None:
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


class Peers:
    """Every selection the policies' rules name, resolved on the networks targets read it on."""

    def __init__(self, index: ClusterIndex) -> None:
        self._index = index
        self._selectors = index.selectors
        self._sets = AddressSets()
        self._owners: dict[str, dict[AddressRange, set[str]]] = {}  # network -> host -> pods
        self._rule_sels: dict[tuple[PolicyKey, Direction, int], tuple[Policy, SelectionState]] = {}
        # policy -> the keys of its rules in `_rule_sels` (an edit then touches its own
        # entries, not a scan of every policy's)
        self._rule_keys: dict[PolicyKey, set[tuple[PolicyKey, Direction, int]]] = {}
        self._sels: dict[Selection, SelectionState] = {}
        # (namespace, its label id, a pod's label id) -> the selections picking such a pod;
        # valid while the selections stay (labels are interned: equal ids, equal labels)
        self._picking: dict[tuple[str, int, int], frozenset[SelectionState]] = {}
        # (namespace, its label id) -> the selections that can pick there (`_in_scope`);
        # valid, like `_picking`, while the selections stay
        self._scopes: dict[tuple[str, int], list[tuple[int | None, frozenset[SelectionState]]]] = {}
        # network -> the selections with `dest`
        self._dest_sels: dict[str, set[SelectionState]] = {}
        # network -> those of them that admit addresses beyond their members' (every address,
        # or ipBlocks): the only ones that can hold a host no member of theirs holds
        self._dest_wide: dict[str, set[SelectionState]] = {}
        # network -> the selections with `hosts` there
        self._resolved: dict[str, set[SelectionState]] = {}
        # the selections whose addresses or groups changed, not yet told to their dependents
        self._moved_sels: set[SelectionState] = set()

    def selection(
        self, policy: Policy, direction: Direction, index: int, rule: Rule
    ) -> SelectionState:
        """The selection of a policy's rule (its peers), resolved once for every rule naming
        the same peers."""
        key = ((policy.namespace, policy.name, policy.uid), direction, index)
        found = self._rule_sels.get(key)
        if found is not None and found[0] is policy:
            return found[1]
        selection = Selection.of(rule.peers, policy.namespace)
        sel = self._sels.get(selection)
        if sel is None:
            peers = tuple(
                Peer(
                    None
                    if p.namespace_selector is None
                    else self._selectors.id(p.namespace_selector),
                    None if p.pod_selector is None else self._selectors.id(p.pod_selector),
                    None if p.ip_block is None else p.ip_block.ranges(),
                )
                for p in rule.peers
            )
            sel = self._sels[selection] = SelectionState(selection, peers)
            self._picking.clear()
            self._scopes.clear()
            blocks = merge_ranges(r for p in peers if p.block is not None for r in p.block)
            sel.blocks = self._sets.get(blocks) if blocks else None
        self._rule_sels[key] = (policy, sel)
        self._rule_keys.setdefault(key[0], set()).add(key)
        return sel

    def forget_rules(self, key: PolicyKey) -> None:
        """The policy `key` changed or went: its rules' selections are found again."""
        for rule_key in self._rule_keys.pop(key, ()):
            del self._rule_sels[rule_key]

    def namespace_changed(self) -> set[str]:
        """A namespace's labels changed: every selection with a namespace selector is resolved
        again when next read. The targets reading those (to compile again)."""
        dirty: set[str] = set()
        for sel in self._sels.values():
            if any(p.namespace_selector is not None for p in sel.peers):
                for network in sel.dest:
                    self._dest_sels[network].discard(sel)
                    self._dest_wide[network].discard(sel)
                for network in sel.hosts:
                    self._resolved[network].discard(sel)
                dirty |= sel.invalidate()
        return dirty

    def pod_changed(self, change: PodChange) -> None:
        """Update the selections whose content a pod's change can change: those it enters or
        leaves, and, when its addresses or ports change, those it is in (or, for named-port
        groups, whose addresses hold it). A relabel that leaves a selection's membership as
        it was touches nothing of it."""
        before, after, relabel_only = change.before, change.after, change.relabel_only
        for network, declared, host, held in change.declared:
            self._dest_changed(network, declared, host, held)
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
        touched: frozenset[SelectionState] = frozenset()
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
        self._own(before, after)

    def _moved_all(self, sel: SelectionState) -> None:
        """The selection's addresses or groups changed: patch the targets reading it."""
        self._moved_sels.add(sel)

    def take_moved(self) -> set[SelectionState]:
        """The selections whose addresses or groups changed since this was last asked (many
        changes to one selection between two compiles count once)."""
        moved, self._moved_sels = self._moved_sels, set()
        return moved

    def addresses(self, sel: SelectionState, network: str) -> AddressSet | None:
        """The addresses a selection admits on `network` (None: any address)."""
        if sel.everything:
            return None
        found = sel.addresses.get(network)
        if found is None or network in sel.stale:
            hosts = sel.hosts.get(network)
            if hosts is None:
                blocks = [r for p in sel.peers if p.block is not None for r in p.block]
                members = self._index.members(sel.peers, sel.selection.namespace)
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

    def groups(
        self, sel: SelectionState, direction: Direction, rule: Rule, network: str, target: PodView
    ) -> list[Group]:
        """(peers, ports, set name) groups of one rule; more than one only for egress to
        named ports."""
        peers = self.addresses(sel, network)
        name = "" if peers is None else self._name(sel, network)
        blocks = None if peers is None else sel.blocks
        if direction == "ingress" or not rule.named:
            ports = resolve(rule.ports, target.ports if direction == "ingress" else ())
            return [(peers, ports, name, blocks)]
        key = (network, rule.ports)
        found = sel.groups.get(key)
        if found is None:
            found = sel.groups[key] = egress_groups(
                rule.ports,
                network,
                peers=peers,
                name=name,
                blocks=blocks,
                dest=self._dest(sel, network),
                log=sel.dest_log.setdefault(network, []),
                tallies=sel.tallies,
                sets=self._sets,
            )
        return found

    def collect(self) -> None:
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

    def _dest_changed(
        self, network: str, declared: Declared, host: AddressRange, held: bool
    ) -> None:
        """Pods declaring `declared` started (`held`) or stopped holding `host`."""
        sels: set[SelectionState] = self._dest_sels.get(network, set())
        if held:
            # Only a selection that admits the host can take it: one picking a pod that holds
            # it now, or one admitting more than its members (a pod joining one is counted
            # when it joins, `_admitted`); not every selection with destinations there.
            owners = self._owners.get(network, {}).get(host, ())
            picking = [self._picked_by(self._index.pod(o)) for o in owners]
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

    def _picked_by(self, view: PodView | None) -> frozenset[SelectionState]:
        """The selections a pod selector of which picks `view` (a peer without an ipBlock
        whose namespace part admits its namespace and whose pod selector its labels), found
        once per namespace labels and pod labels: a pod changing is then not a test of every
        selection."""
        if view is None:
            return frozenset()
        ns_id, ns_labels = self._index.namespace(view.namespace)
        key = (view.namespace, ns_id, view.label_id)
        found = self._picking.get(key)
        if found is None:
            picked: set[SelectionState] = set()
            for sid, sels in self._in_scope(view.namespace, ns_id, ns_labels):
                if sid is None or self._selectors.matches(sid, view.label_id, view.labels):
                    picked |= sels
            found = self._picking[key] = frozenset(picked)
        return found

    def _in_scope(
        self, namespace: str, ns_id: int, ns_labels: Mapping[str, str]
    ) -> list[tuple[int | None, frozenset[SelectionState]]]:
        """The selections with a pod-selecting peer that can pick a pod of `namespace`, by
        the peer's pod selector (None: any pod): a pod's labels are then matched once per
        distinct selector of its namespace, not once per peer of every selection."""
        key = (namespace, ns_id)
        found = self._scopes.get(key)
        if found is None:
            by: dict[int | None, set[SelectionState]] = {}
            for sel in self._sels.values():
                for peer in sel.peers:
                    if peer.block is None and self._in_namespace(
                        peer, namespace, ns_id, ns_labels, sel.selection.namespace
                    ):
                        by.setdefault(peer.pod_selector, set()).add(sel)
            found = self._scopes[key] = [(sid, frozenset(sels)) for sid, sels in by.items()]
        return found

    def _in_namespace(
        self,
        peer: Peer,
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

    def _member_changed(
        self,
        sel: SelectionState,
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
                    other != key and sel in self._picked_by(self._index.pod(other))
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

    def _admitted(
        self,
        sel: SelectionState,
        dest: dict[Declared, set[AddressRange]],
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
            for declared, counts in self._index.declaring(network).items():
                found = [h for h in gained if h in counts]
                if found:
                    hosts = dest.setdefault(declared, set())
                    for host in found:
                        if host not in hosts:
                            hosts.add(host)
                            sel.log_dest(network, declared, host, True)

    def _name(self, sel: SelectionState, network: str) -> str:
        found = sel.names.get(network)
        if found is None:
            if not sel.names:
                sel.names[""] = repr(sel.selection)  # the costly part, once
            found = sel.names[network] = set_name(sel.names[""], network)
        return found

    def _dest(self, sel: SelectionState, network: str) -> Mapping[Declared, Iterable[AddressRange]]:
        """The hosts of pods with addresses on `network` that `sel` admits, by the ports the
        pods declare: read once, then kept up to date host by host (`_dest_changed`,
        `_admitted`). Every host, for a selection of every address."""
        found = sel.dest.get(network)
        if found is None:
            hosts = sel.hosts.get(network)
            declaring = self._index.declaring(network)
            found = sel.dest[network] = {
                declared: set(counts) if hosts is None else {h for h in counts if hosts.holds(h)}
                for declared, counts in declaring.items()
            }
            self._dest_sels.setdefault(network, set()).add(sel)
            wide = self._dest_wide.setdefault(network, set())
            if sel.everything or sel.blocks is not None:
                wide.add(sel)
        return found


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
