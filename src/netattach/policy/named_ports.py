"""Named ports: a rule's ports resolved against the ports a destination pod declares.

Ingress to a named port resolves against the target's own declarations: one port set. Egress
to a named port resolves against each destination's: one allow rule per group of destinations
resolving the names alike, each group's hosts its own set. A group's hosts are tallied once
from the destinations, then kept up to date from the destinations that joined and left since
(`Tally`), each change a bisection into the group's last set (`_changed_set`)::

    selection's destinations ──> dest_log ──> Tally.catch_up ──> per group: gained, lost
    (declared ports -> hosts)    (joined/left)                   ──> _changed_set ──> AddressSet
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
from collections.abc import Iterable, Mapping

from netattach.policy.ir import PortRange
from netattach.policy.model import AddressRange, PortSpec
from netattach.policy.ranges import shift
from netattach.policy.selection import AddressSet, AddressSets, set_name

Declared = tuple[tuple[str, str, int], ...]  # a pod's declared ports (name, protocol, number)
# peers, ports, set name, the peers' ipBlock part
Group = tuple[AddressSet | None, tuple[PortRange, ...] | None, str, AddressSet | None]
DestLog = list[tuple[Declared, AddressRange, bool]]  # each host that joined (True) or left


@functools.lru_cache(maxsize=65536)
def _group_name(base: str, ports: tuple[PortSpec, ...], resolved: tuple[PortRange, ...]) -> str:
    return set_name(base, ports, resolved)


@functools.lru_cache(maxsize=65536)
def resolve(
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
    """`resolve`, remembered."""
    key = (id(ports), dest)
    found = _RESOLVED.get(key)
    if found is not None and found[0] is ports:
        return found[1]
    if len(_RESOLVED) >= RESOLVED_CACHED:
        _RESOLVED.clear()
    resolved = resolve(ports, dest)
    _RESOLVED[key] = (ports, resolved)
    return resolved


@dataclasses.dataclass(slots=True)
class Tally:
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
        log: list[tuple[Declared, AddressRange, bool]],
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


def egress_groups(
    rule_ports: tuple[PortSpec, ...],
    network: str,
    *,
    peers: AddressSet | None,
    name: str,
    blocks: AddressSet | None,
    dest: Mapping[Declared, Iterable[AddressRange]],
    log: DestLog,
    tallies: dict[tuple[str, tuple[PortSpec, ...]], Tally],
    sets: AddressSets,
) -> list[Group]:
    """The groups of one egress rule to named ports (`rule_ports`) on `network`, whose peers
    are `peers` (set `name`, ipBlock part `blocks`): each destination pod resolves the names
    itself. The hosts of each group of destinations resolving them alike are tallied once
    (`tallies`, from the selection's destinations `dest`), then kept up to date from the
    destinations that changed since (`log`)."""
    numeric_specs = tuple(p for p in rule_ports if not isinstance(p.port, str))
    numeric = resolve(numeric_specs, ()) if numeric_specs else ()
    out: list[Group] = []
    if numeric:
        out.append((peers, numeric, name, blocks))
    key = (network, rule_ports)
    tally = tallies.get(key)
    if tally is None:
        tally = tallies[key] = Tally()
        for declared, hosts in dest.items():
            resolved = _resolve_cached(rule_ports, declared)
            if resolved and resolved != numeric:
                counts = tally.counts.setdefault(resolved, {})
                for host in hosts:
                    counts[host] = counts.get(host, 0) + 1
        for resolved, counts in list(tally.counts.items()):
            if counts:
                tally.sets[resolved] = sets.get(tuple(sorted(counts)))
            else:
                del tally.counts[resolved]
    else:
        for resolved, (gained, lost) in tally.catch_up(log, rule_ports, numeric).items():
            if not gained and not lost:
                continue
            before = tally.sets.get(resolved)
            if not tally.counts.get(resolved):
                tally.counts.pop(resolved, None)
                tally.sets.pop(resolved, None)
            elif before is None:
                tally.sets[resolved] = sets.get(tuple(sorted(tally.counts[resolved])))
            else:
                tally.sets[resolved] = _changed_set(before, gained, lost)
    tally.seen = len(log)
    mine = [t for k, t in tallies.items() if k[0] == network]
    if all(t.seen == len(log) for t in mine):
        log.clear()  # every tally of the network has counted it
        for t in mine:
            t.seen = 0
    for ports in sorted(tally.sets):
        # Named after the rule's ports too: another rule of the same peers whose ports
        # resolve to the same numbers on other pods holds other hosts (one name for both
        # gave the second rule the first one's set).
        group_name = _group_name(name or network, rule_ports, ports)
        out.append((tally.sets[ports], ports, group_name, None))
    return out
