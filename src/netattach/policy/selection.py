"""Peer selections: the `from`/`to` list of a rule, and the address sets it resolves to.

A selection is what a rule's peers are, independent of which policy or target names them:
every rule with the same peers (and, when a peer has no namespaceSelector, the same policy
namespace) is one selection, resolved once per network and shared by every table using it
(one nft set, named after the selection, not its content, so a peer joining is an element
added in place).
"""

from __future__ import annotations

import bisect
import hashlib
import ipaddress
import itertools
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final, Self

from netattach.policy.model import (
    AddressRange,
    IPNetwork,
    Peer,
    cidr_texts,
    range_networks,
)
from netattach.policy.ranges import Version, shift

HOST_TEXTS_CACHED: Final = 65536  # host ranges whose text is kept (a cluster's pods' addresses)
CHANGE_STEPS: Final = 16  # how far back a host set's changes are followed before a full diff
_TOP: Final = 1 << 130  # above any IPv6 address


@dataclass(frozen=True, slots=True)
class Selection:
    namespace: str  # where a peer without namespaceSelector looks ("" when no peer does)
    peers: tuple[Peer, ...]  # () = every address

    @classmethod
    def of(cls, peers: tuple[Peer, ...], policy_namespace: str) -> Selection:
        local = any(p.ip_block is None and p.namespace_selector is None for p in peers)
        return cls(policy_namespace if local else "", peers)


def set_name(*parts: object, prefix: str = "s") -> str:
    """A short nft name for `parts`: what a peer set selects (never what it holds), or the
    content of a port set (prefix "p")."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()
    return f"{prefix}{digest}"


class _Ranges:
    """Addresses as disjoint ranges in address order, equal and hashed by them (the hash, of
    thousands of ranges, made only when asked).

    Made again after members came and went, they name the ranges they follow (weakly: an old
    set is never kept alive) and the hosts gained and lost since, each sorted: what a table
    holding the older ones needs to be told.
    """

    __slots__ = ("__weakref__", "_follows", "_hash", "_ranges", "gained", "lost")
    _follows: weakref.ref[Self] | None

    def __init__(
        self,
        ranges: tuple[AddressRange, ...] | None,
        follows: Self | None = None,
        gained: tuple[AddressRange, ...] = (),
        lost: tuple[AddressRange, ...] = (),
    ) -> None:
        self._ranges = ranges  # None: made when first read (`AddressSet`)
        self._hash: int | None = None
        self._follows = None if follows is None else weakref.ref(follows)
        self.gained = gained
        self.lost = lost

    @property
    def ranges(self) -> tuple[AddressRange, ...]:
        found = self._ranges
        assert found is not None
        return found

    def follows(self) -> Self | None:
        """The ranges these were made after, while they live."""
        return None if self._follows is None else self._follows()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Ranges)
        if self is other:
            return True
        # Made right after the other with hosts gained or lost: not equal, and known so
        # without comparing every range (a pass compares each table with the one before).
        if (self.gained or self.lost) and self.follows() is other:
            return False
        if (other.gained or other.lost) and other.follows() is self:
            return False
        return self.ranges == other.ranges

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.ranges)
        return self._hash

    def __bool__(self) -> bool:
        return bool(self.ranges)


class Elements:
    """A set's elements as nft reads them, made into text only when first written whole: an
    update in place writes what changed (`HostSet.changes_from`), never the whole list."""

    __slots__ = ()

    def texts(self) -> tuple[str, ...]:
        raise NotImplementedError

    def text(self) -> str:
        """`texts` joined as an nft element list (made once)."""
        raise NotImplementedError


class Texts(Elements):
    """Elements given as text (port sets, ipBlocks): equal when the texts are."""

    __slots__ = ("_joined", "_texts")

    def __init__(self, texts: tuple[str, ...]) -> None:
        self._texts = texts
        self._joined: str | None = None

    def texts(self) -> tuple[str, ...]:
        return self._texts

    def text(self) -> str:
        if self._joined is None:
            self._joined = ", ".join(self._texts)
        return self._joined

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Texts):
            return NotImplemented
        return self is other or self._texts == other._texts

    def __hash__(self) -> int:
        return hash(self._texts)

    def __bool__(self) -> bool:
        return bool(self._texts)

    def __repr__(self) -> str:
        return f"Texts({self._texts!r})"


class HostSet(_Ranges, Elements):
    """The host addresses of one family a selection admits beyond its ipBlocks: a host set's
    elements, one per address, held as ranges (equal content, equal ranges).

    One that follows an older host set (`_Ranges`) updates a table holding that one with the
    hosts gained and lost alone, however big the set. One made from a `Version` reads its
    ranges only when something needs them whole (its text, a comparison the change it carries
    does not settle); whether it is empty it knows without them.
    """

    __slots__ = ("_size", "_source", "_text", "_texts")

    def __init__(
        self,
        ranges: tuple[AddressRange, ...] | None,
        follows: HostSet | None = None,
        gained: tuple[AddressRange, ...] = (),
        lost: tuple[AddressRange, ...] = (),
        *,
        source: tuple[Version, int, AddressSet | None] | None = None,
        size: int = 0,
    ) -> None:
        """`ranges`, or (None and) `source`: the version, family and ipBlocks they are read
        from, and `size`, zero when they hold no address (what `__bool__` says unread)."""
        super().__init__(ranges, follows, gained, lost)
        assert ranges is not None or source is not None
        self._source = source
        self._size = size
        self._texts: tuple[str, ...] | None = None
        self._text: str | None = None

    @property
    def ranges(self) -> tuple[AddressRange, ...]:
        found = self._ranges
        if found is None:
            assert self._source is not None
            version, family, blocks = self._source
            found = _without(blocks, version.families()[0 if family == 4 else 1], family)
            self._ranges = found
            self._source = None
        return found

    def __bool__(self) -> bool:
        return bool(self._size) if self._ranges is None else bool(self._ranges)

    def texts(self) -> tuple[str, ...]:
        if self._texts is None:
            # Expanded by C code (a map over the cached expansions of each range): a loop over
            # the ranges in Python was most of a pass when every set was written whole.
            if len(_TEXTS) > HOST_TEXTS_CACHED:
                _TEXTS.clear()
            self._texts = tuple(itertools.chain.from_iterable(map(_TEXTS.__getitem__, self.ranges)))
        return self._texts

    def text(self) -> str:
        if self._text is None:
            self._text = ", ".join(self.texts())
        return self._text

    def changes_from(self, old: HostSet) -> tuple[list[str], list[str]] | None:
        """(gone, added) taking `old`'s elements to these, each sorted, from what each set
        since `old` gained and lost; None when `old` is not an ancestor still known (the
        caller compares the elements whole)."""
        if self.follows() is old:
            # (the common case, a pass after the one the table was written in: the step's own
            # hosts, already net)
            return _host_texts(self.lost), _host_texts(self.gained)
        steps: list[HostSet] = []
        at: HostSet | None = self
        while at is not None and at is not old and len(steps) < CHANGE_STEPS:
            steps.append(at)
            at = at.follows()
        if at is not old:
            return None
        gone: set[AddressRange] = set()
        added: set[AddressRange] = set()
        for step in reversed(steps):
            for host in step.lost:
                shift(host, gone, added)
            for host in step.gained:
                shift(host, added, gone)
        return _host_texts(gone), _host_texts(added)

    def __repr__(self) -> str:
        return f"HostSet({', '.join(self.texts())})"


def _host_texts(hosts: Iterable[AddressRange]) -> list[str]:
    return sorted(_TEXTS[host][0] for host in hosts)


class AddressSet(_Ranges):
    """Compiled peer addresses: disjoint integer ranges in address order, interned per content
    (a selection's: adjacent ones joined; a named-port group's: its hosts one by one).

    The networks and the elements of each family are computed when first read, once, and
    shared by every table rendering the set. A selection's addresses made again after members
    came and went follow the ones they were made from (`_Ranges`): the host sets made from
    them carry those changes (`HostSet`).
    """

    __slots__ = ("_cidrs", "_hosts", "_networks", "_range_set", "_starts", "_version")

    def __init__(
        self,
        ranges: tuple[AddressRange, ...] | None,
        follows: AddressSet | None = None,
        gained: tuple[AddressRange, ...] = (),
        lost: tuple[AddressRange, ...] = (),
        *,
        version: Version | None = None,
    ) -> None:
        """`ranges`, or (None and) the `version` of a selection's addresses they are: made
        again after a change, they come so, and the ranges are read from it only if something
        needs them whole (a table holding the addresses before is told what changed)."""
        super().__init__(ranges, follows, gained, lost)
        self._version = version
        assert ranges is not None or version is not None
        self._networks: tuple[IPNetwork, ...] | None = None
        self._cidrs: dict[int, Texts] = {}
        # family -> (blocks, the hosts without them): one `blocks` per set in practice (its
        # selection's ipBlocks), so it is told apart by identity, not hashed and compared
        self._hosts: dict[int, tuple[AddressSet | None, HostSet]] = {}
        self._starts: list[tuple[int, int]] | None = None
        self._range_set: frozenset[AddressRange] | None = None

    @property
    def ranges(self) -> tuple[AddressRange, ...]:
        found = self._ranges
        if found is None:
            assert self._version is not None
            v4, v6 = self._version.families()
            found = self._ranges = v4 + v6
        return found

    def __bool__(self) -> bool:
        if self._ranges is None and self._version is not None:
            return any(self._version.sizes)
        return bool(self._ranges)

    @property
    def networks(self) -> tuple[IPNetwork, ...]:
        if self._networks is None:
            self._networks = range_networks(self.ranges)
        return self._networks

    def __iter__(self) -> Iterator[IPNetwork]:
        return iter(self.networks)

    def __len__(self) -> int:
        return len(self.networks)

    def __repr__(self) -> str:
        return f"AddressSet({', '.join(str(n) for n in self.networks)})"

    def cidrs(self, version: int) -> Texts:
        """The networks of one family as an interval set's elements (a host is its address
        alone)."""
        found = self._cidrs.get(version)
        if found is None:
            out: list[str] = []
            for v, first, last in self.ranges:
                if v == version:
                    out.extend(cidr_texts(v, first, last))
            found = self._cidrs[version] = Texts(tuple(out))
        return found

    def hosts(self, version: int, blocks: AddressSet | None) -> HostSet:
        """The addresses of one family that `blocks` does not hold, as a host set's elements
        (one per address). Every such address is a pod's host (`AllowRule`), so there are as
        many as the selection has members, never a block's size. `blocks`: what the ipBlocks
        of these addresses admit, which they hold whole (so no host gained or lost is in it)."""
        cached = self._hosts.get(version)
        if cached is not None and cached[0] is blocks:
            return cached[1]
        base: HostSet | None = None
        gained: tuple[AddressRange, ...] = ()
        lost: tuple[AddressRange, ...] = ()
        previous = self.follows()
        if previous is not None:
            before = previous._hosts.get(version)
            base = before[1] if before is not None and before[0] is blocks else None
            if base is not None:
                gained = _of_family(self.gained, version)
                lost = _of_family(self.lost, version)
        at = 0 if version == 4 else 1
        if self._ranges is None and self._version is not None:
            # (what the ipBlocks leave is every host beyond them; without them, every range)
            size = self._version.sizes[at] if blocks is None else self._version.extra[at]
            found = HostSet(
                None, base, gained, lost, source=(self._version, version, blocks), size=size
            )
        else:
            ranges = self.ranges
            if ranges and not (ranges[0][0] == ranges[-1][0] == version):
                # (both families: this one's part; one family alone is used as it is, uncopied)
                ranges = ranges[_first_of(ranges, version) : _first_of(ranges, version + 1)]
            found = HostSet(_without(blocks, ranges, version), base, gained, lost)
        self._hosts[version] = (blocks, found)
        return found

    def range_set(self) -> frozenset[AddressRange]:
        """The ranges as a set (a named-port group's: its hosts)."""
        if self._range_set is None:
            self._range_set = frozenset(self.ranges)
        return self._range_set

    def holds(self, host: AddressRange) -> bool:
        """Whether a host address lies in one of the ranges (bisection)."""
        if self._starts is None:
            self._starts = [(v, first) for v, first, _ in self.ranges]
        i = bisect.bisect_right(self._starts, (host[0], host[1])) - 1
        if i < 0:
            return False
        version, _, last = self.ranges[i]
        return version == host[0] and host[1] <= last


def _first_of(ranges: tuple[AddressRange, ...], version: int) -> int:
    """The index of the first range of `version` or a later one (ranges sort by family)."""
    return bisect.bisect_left(ranges, (version, -1, -1))


def _without(
    blocks: AddressSet | None, ranges: tuple[AddressRange, ...], version: int
) -> tuple[AddressRange, ...]:
    """`ranges` (of one family) without what `blocks` holds of that family."""
    if blocks is None:
        return ranges
    return _cut(ranges, [(f, t) for v, f, t in blocks.ranges if v == version], version)


def _cut(
    ranges: tuple[AddressRange, ...], cut: list[tuple[int, int]], version: int
) -> tuple[AddressRange, ...]:
    """`ranges` (of one family) without what `cut` (sorted, disjoint) covers: only the few
    ranges holding a cut's start are split, in Python; the rest are sliced as they are."""
    holding = sorted({bisect.bisect_right(ranges, (version, f, _TOP)) - 1 for f, _ in cut} - {-1})
    if not holding:
        return ranges
    out: list[AddressRange] = []
    start = 0
    for i in holding:
        out.extend(ranges[start:i])
        _, first, last = ranges[i]
        out.extend((version, a, b) for a, b in _outside(first, last, cut))
        start = i + 1
    out.extend(ranges[start:])
    return tuple(out)


def _of_family(hosts: tuple[AddressRange, ...], version: int) -> tuple[AddressRange, ...]:
    """The hosts of one family (`hosts` sorted: a slice)."""
    if not hosts:
        return hosts
    if hosts[0][0] == hosts[-1][0]:  # (one family only, as most changes are)
        return hosts if hosts[0][0] == version else ()
    return hosts[_first_of(hosts, version) : _first_of(hosts, version + 1)]


def _outside(first: int, last: int, cut: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The parts of first..last that no range of `cut` (sorted, disjoint) covers."""
    i = max(0, bisect.bisect_right(cut, (first, first)) - 1)
    while first <= last:
        while i < len(cut) and cut[i][1] < first:
            i += 1
        if i == len(cut) or cut[i][0] > last:
            yield first, last
            return
        if cut[i][0] > first:
            yield first, cut[i][0] - 1
        first = cut[i][1] + 1


class _Texts(dict[AddressRange, tuple[str, ...]]):
    """A range -> its addresses as nft reads them. Kept (up to `HOST_TEXTS_CACHED` ranges),
    since a set's hosts are written again (a new set object) whenever one member comes or goes
    while most of its ranges stay as they were, and IPv6's `str` costs ~1 µs an address; a
    dict, not `lru_cache`, so that a hit is a lookup in C with no arguments tuple built."""

    def __missing__(self, key: AddressRange) -> tuple[str, ...]:
        version, first, last = key
        if version == 4:
            found = tuple(
                f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}"
                for a in range(first, last + 1)
            )
        else:
            found = tuple(str(ipaddress.IPv6Address(a)) for a in range(first, last + 1))
        self[key] = found
        return found


_TEXTS = _Texts()


class AddressSets:
    """Interning of `AddressSet`s: equal content, one object (while any table uses it)."""

    def __init__(self) -> None:
        self._sets: weakref.WeakValueDictionary[tuple[AddressRange, ...], AddressSet] = (
            weakref.WeakValueDictionary()
        )

    def get(self, ranges: tuple[AddressRange, ...]) -> AddressSet:
        found = self._sets.get(ranges)
        if found is None:
            found = AddressSet(ranges)
            self._sets[ranges] = found
        return found
