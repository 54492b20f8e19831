"""A selection's addresses on one network, kept up to date host by host.

The addresses are the union of fixed ranges (its ipBlocks) and of its member pods' host
addresses, as disjoint ranges in address order with adjacent ones joined (what
`model.merge_ranges` gives for the same addresses). A pod joining or leaving adds or removes its
hosts with a bisection and a splice, instead of merging every member's addresses again: the
cost of a change is the change, not the selection's size.

What the compiler reads is a `Version`: the addresses at one moment (once per pass, however
many changes came in between), whose ranges are made into tuples only if something reads them
whole. Most versions are never read so: a table holding the one before is told the hosts gained
and lost. Copying every range of every selection that changed, once a pass, and freeing the
copies a pass later, was a tenth of the daemon's time under churn.
"""

from __future__ import annotations

import bisect
import collections
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from netattach.policy.model import AddressRange, merge_ranges

# A version this many versions older than the newest, and still held, has its ranges made: no
# chain of changes to replay grows longer (nor the versions it keeps alive).
BEHIND_MAX: Final = 16

Families = tuple[tuple[AddressRange, ...], tuple[AddressRange, ...]]


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


def _find(ranges: list[AddressRange], starts: list[int], value: int) -> tuple[int, int]:
    """(where a host of address `value` would go in one family's ranges, the index of the range
    holding it or -1), by bisecting the ranges' firsts."""
    i = bisect.bisect_left(starts, value)
    if i < len(starts) and starts[i] == value:
        return i, i
    if i and ranges[i - 1][2] >= value:
        return i, i - 1
    return i, -1


def _take(ranges: list[AddressRange], starts: list[int], i: int, value: int) -> None:
    """Take the address `value` out of the range at `i`, which holds it."""
    version, first, last = ranges[i]
    parts = []
    if first < value:
        parts.append((version, first, value - 1))
    if value < last:
        parts.append((version, value + 1, last))
    ranges[i : i + 1] = parts
    starts[i : i + 1] = [part[1] for part in parts]


def _put(ranges: list[AddressRange], starts: list[int], i: int, host: AddressRange) -> None:
    """Put `host`, which no range holds, at `i`, joining the ranges it touches."""
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


class Version:
    """The addresses a `HostRanges` held at one moment; each family's ranges made into a tuple
    when first read (`families`), not before.

    Until then a version is known by what came after it: the newest is the live ranges without
    the hosts that changed since it was made; an older one is the next version's ranges with
    that step's hosts taken back. Reading one replays those steps on a copy (Baker's trick for
    persistent arrays). `sizes` and `extra` say, without reading it, how many ranges each
    family has and how many of its hosts lie outside the ipBlocks.
    """

    __slots__ = (
        "__weakref__",
        "_families",
        "_gained",
        "_lost",
        "_newer",
        "_owner",
        "extra",
        "sizes",
    )

    def __init__(self, owner: HostRanges, sizes: tuple[int, int], extra: tuple[int, int]) -> None:
        self._families: Families | None = None
        self._owner: HostRanges | None = owner  # while this is the newest version
        # once it is not: the next version, and the hosts that one gained and lost since
        self._newer: Version | None = None
        self._gained: Iterable[AddressRange] = ()
        self._lost: Iterable[AddressRange] = ()
        self.sizes = sizes
        self.extra = extra

    def families(self) -> Families:
        """The IPv4 ranges and the IPv6 ones, apart."""
        found = self._families
        if found is None:
            found = self._families = self._read()
            self._newer = None  # (the steps after it are no longer needed to know it)
            self._gained = self._lost = ()
        return found

    def _read(self) -> Families:
        steps: list[Version] = []
        at = self
        while at._families is None and at._newer is not None:
            steps.append(at)
            at = at._newer
        if at._families is not None:
            v4, v6 = list(at._families[0]), list(at._families[1])
            undo: list[tuple[Iterable[AddressRange], Iterable[AddressRange]]] = []
        else:
            owner = at._owner
            assert owner is not None
            if not steps and not owner.moved:
                return tuple(owner._v4), tuple(owner._v6)  # the live ranges, as they are
            v4, v6 = list(owner._v4), list(owner._v6)
            undo = [(owner._gained, owner._lost)]
        undo += [(step._gained, step._lost) for step in reversed(steps)]
        lists = {4: (v4, [r[1] for r in v4]), 6: (v6, [r[1] for r in v6])}
        for gained, lost in undo:
            for host in gained:
                ranges, starts = lists[host[0]]
                _, i = _find(ranges, starts, host[1])
                _take(ranges, starts, i, host[1])
            for host in lost:
                ranges, starts = lists[host[0]]
                i, _ = _find(ranges, starts, host[1])
                _put(ranges, starts, i, host)
        return tuple(v4), tuple(v6)

    def advanced(
        self, newer: Version, gained: Iterable[AddressRange], lost: Iterable[AddressRange]
    ) -> None:
        """`newer` follows this one, having gained and lost these hosts since."""
        self._owner = None
        if self._families is None:
            self._newer, self._gained, self._lost = newer, gained, lost


class HostRanges:
    """Fixed ranges plus hosts; which hosts another member still holds, the caller knows.

    Each family's ranges are a list of (version, first, last) beside a list of their firsts:
    a host is found by bisecting integers (a bisection over the tuples compared them tuple
    by tuple, the most of a member change)."""

    __slots__ = (
        "_blocks",
        "_extra",
        "_gained",
        "_lost",
        "_older",
        "_starts",
        "_v4",
        "_v6",
        "_version",
    )

    def __init__(self, blocks: Sequence[AddressRange], hosts: Iterable[AddressRange]) -> None:
        self._blocks = list(merge_ranges(blocks)) if blocks else []
        merged = merge_ranges([*self._blocks, *hosts])
        # each family's ranges apart (IPv4 sort first): a change touches its own family only
        split = bisect.bisect_left(merged, (6, -1, -1))
        self._v4 = list(merged[:split])
        self._v6 = list(merged[split:])
        self._starts = {4: [r[1] for r in self._v4], 6: [r[1] for r in self._v6]}
        # per family, the addresses held beyond the ipBlocks (every one a member's host)
        self._extra = {v: _size(merged, v) - _size(self._blocks, v) for v in (4, 6)}
        self._version: Version | None = None  # the newest one made
        self._gained: set[AddressRange] = set()  # since it was made
        self._lost: set[AddressRange] = set()
        # the versions made, oldest first, that are not read yet (and may still be)
        self._older: collections.deque[weakref.ref[Version]] = collections.deque()

    @property
    def moved(self) -> bool:
        """Whether hosts came or went since the newest version was made."""
        return bool(self._gained or self._lost)

    def snapshot(self) -> tuple[AddressRange, ...]:
        """The ranges of both families, joined (a copy, made now)."""
        return (*self._v4, *self._v6)

    def advance(self) -> tuple[Version, tuple[AddressRange, ...], tuple[AddressRange, ...]]:
        """The addresses now, and the hosts they gained and lost since the last call (net: a
        host that came and went again is in neither), each sorted."""
        gained, lost = tuple(sorted(self._gained)), tuple(sorted(self._lost))
        older = self._version
        if older is not None and not gained and not lost:
            return older, gained, lost
        self._gained.clear()
        self._lost.clear()
        version = self._version = Version(
            self, (len(self._v4), len(self._v6)), (self._extra[4], self._extra[6])
        )
        if older is not None:
            older.advanced(version, gained, lost)
        waiting = self._older
        waiting.append(weakref.ref(version))
        while waiting and ((first := waiting[0]()) is None or first._families is not None):
            waiting.popleft()
        if len(waiting) > BEHIND_MAX:
            behind = waiting.popleft()()
            if behind is not None:
                behind.families()
        return version, gained, lost

    def holds(self, host: AddressRange) -> bool:
        ranges = self._v4 if host[0] == 4 else self._v6
        return _find(ranges, self._starts[host[0]], host[1])[1] >= 0

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
            ranges = self._v4 if host[0] == 4 else self._v6
            starts = self._starts[host[0]]
            _, i = _find(ranges, starts, host[1])
            if i < 0:
                continue
            _take(ranges, starts, i, host[1])
            lost.append(host)
            self._extra[host[0]] -= 1
            shift(host, self._lost, self._gained)
        for host in added:
            ranges = self._v4 if host[0] == 4 else self._v6
            starts = self._starts[host[0]]
            i, holder = _find(ranges, starts, host[1])
            if holder >= 0:
                continue  # already admitted
            _put(ranges, starts, i, host)
            gained.append(host)
            self._extra[host[0]] += 1
            shift(host, self._gained, self._lost)
        return lost, gained


def _size(ranges: Iterable[AddressRange], version: int) -> int:
    """How many addresses of one family disjoint `ranges` hold."""
    return sum(last - first + 1 for v, first, last in ranges if v == version)
