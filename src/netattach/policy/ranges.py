"""A selection's addresses on one network, kept up to date host by host.

The addresses are the union of fixed ranges (its ipBlocks) and of its member pods' host
addresses, as disjoint ranges in address order with adjacent ones joined (what
`model.merge_ranges` gives for the same addresses). A pod joining or leaving adds or removes its
hosts with a bisection and a splice, instead of merging every member's addresses again: the
cost of a change is the change, not the selection's size. The tuples the compiler reads are
made once per pass, however many changes came in between: each family's apart (`families`:
a table's host sets take them as they are), or both joined (`snapshot`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence

from netattach.policy.model import AddressRange, merge_ranges


def _covering(ranges: list[AddressRange], host: AddressRange) -> int:
    """The index of the range of `ranges` (a selection's ipBlocks) holding `host`, or -1: a
    range starting at the host sorts right where it would go, one starting before it just
    before."""
    i = bisect.bisect_left(ranges, host)
    if i < len(ranges) and ranges[i][0] == host[0] and ranges[i][1] == host[1]:
        return i
    if i and ranges[i - 1][0] == host[0] and ranges[i - 1][1] <= host[1] <= ranges[i - 1][2]:
        return i - 1
    return -1


def shift(host: AddressRange, into: set[AddressRange], back: set[AddressRange]) -> None:
    """Count `host` in `into`, unless it is in `back` (the move undoes an earlier one): the
    net of a sequence of joins and leaves."""
    if host in back:
        back.discard(host)
    else:
        into.add(host)


class HostRanges:
    """Fixed ranges plus hosts; which hosts another member still holds, the caller knows.

    Each family's ranges are a list of (version, first, last) beside a list of their firsts:
    a host is found by bisecting integers (a bisection over the tuples compared them tuple
    by tuple, the most of a member change)."""

    __slots__ = ("_blocks", "_families", "_gained", "_lost", "_snapshot", "_starts", "_v4", "_v6")

    def __init__(self, blocks: Sequence[AddressRange], hosts: Iterable[AddressRange]) -> None:
        self._blocks = list(merge_ranges(blocks)) if blocks else []
        merged = merge_ranges([*self._blocks, *hosts])
        # each family's ranges apart (IPv4 sort first): a change copies its own family only
        split = bisect.bisect_left(merged, (6, -1, -1))
        self._v4 = list(merged[:split])
        self._v6 = list(merged[split:])
        self._starts = {4: [r[1] for r in self._v4], 6: [r[1] for r in self._v6]}
        self._snapshot: tuple[AddressRange, ...] | None = merged
        self._families: tuple[tuple[AddressRange, ...], tuple[AddressRange, ...]] | None = None
        self._gained: set[AddressRange] = set()  # since `changes` was last called
        self._lost: set[AddressRange] = set()

    def snapshot(self) -> tuple[AddressRange, ...]:
        if self._snapshot is None:
            v4, v6 = self.families()
            self._snapshot = v4 + v6
        return self._snapshot

    def families(self) -> tuple[tuple[AddressRange, ...], tuple[AddressRange, ...]]:
        """The IPv4 ranges and the IPv6 ones, apart (what `snapshot` joins)."""
        if self._families is None:
            self._families = tuple(self._v4), tuple(self._v6)
        return self._families

    def changes(self) -> tuple[tuple[AddressRange, ...], tuple[AddressRange, ...]]:
        """(gained, lost): the hosts that joined and left since the last call, net (a host
        that came and went again is in neither), each sorted."""
        out = tuple(sorted(self._gained)), tuple(sorted(self._lost))
        self._gained.clear()
        self._lost.clear()
        return out

    def _find(self, host: AddressRange) -> tuple[list[AddressRange], list[int], int, int]:
        """(the host's family's ranges, their firsts, where the host would go, the index of
        the range holding it or -1)."""
        ranges = self._v4 if host[0] == 4 else self._v6
        starts = self._starts[host[0]]
        value = host[1]
        i = bisect.bisect_left(starts, value)
        if i < len(starts) and starts[i] == value:
            return ranges, starts, i, i
        if i and ranges[i - 1][2] >= value:
            return ranges, starts, i, i - 1
        return ranges, starts, i, -1

    def holds(self, host: AddressRange) -> bool:
        return self._find(host)[3] >= 0

    def update(
        self,
        gone: Iterable[AddressRange],
        added: Iterable[AddressRange],
        held: Callable[[AddressRange], bool],
    ) -> tuple[list[AddressRange], list[AddressRange]]:
        """Hosts of a member that left and of one that joined (`held`: whether another member
        still has a host); the hosts the addresses lost and gained (both empty: no change)."""
        lost: list[AddressRange] = []
        gained: list[AddressRange] = []
        blocks = self._blocks
        for host in gone:
            if held(host) or (blocks and _covering(blocks, host) >= 0):
                continue  # still admitted
            ranges, starts, _, i = self._find(host)
            if i < 0:
                continue
            version, first, last = ranges[i]
            value = host[1]
            parts = []
            if first < value:
                parts.append((version, first, value - 1))
            if value < last:
                parts.append((version, value + 1, last))
            ranges[i : i + 1] = parts
            starts[i : i + 1] = [part[1] for part in parts]
            lost.append(host)
            shift(host, self._lost, self._gained)
        for host in added:
            ranges, starts, i, holder = self._find(host)
            if holder >= 0:
                continue  # already admitted
            version, value = host[0], host[1]
            first = last = value
            if i > 0 and ranges[i - 1][2] == value - 1:
                i -= 1
                first = ranges[i][1]
                del ranges[i], starts[i]
            if i < len(ranges) and starts[i] == value + 1:
                last = ranges[i][2]
                del ranges[i], starts[i]
            ranges.insert(i, (version, first, last))
            starts.insert(i, first)
            gained.append(host)
            shift(host, self._gained, self._lost)
        if lost or gained:
            self._snapshot = self._families = None
        return lost, gained
