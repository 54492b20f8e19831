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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from netattach.policy.model import (
    AddressRange,
    IPNetwork,
    Peer,
    cidr_texts,
    range_networks,
)

HOST_TEXTS_CACHED: Final = 65536  # host ranges whose text is kept (a cluster's pods' addresses)
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


class AddressSet:
    """Compiled peer addresses: disjoint integer ranges in address order, interned per content
    (a selection's: adjacent ones joined; a named-port group's: its hosts one by one).

    The networks and the element text of each family are computed when first read, once, and
    shared by every table rendering the set.
    """

    __slots__ = (
        "__weakref__",
        "_hash",
        "_hosts",
        "_joined",
        "_networks",
        "_starts",
        "_texts",
        "ranges",
    )

    def __init__(self, ranges: tuple[AddressRange, ...]) -> None:
        self.ranges = ranges
        self._hash: int | None = None  # hashing thousands of ranges: only when asked
        self._networks: tuple[IPNetwork, ...] | None = None
        self._texts: dict[int, tuple[str, ...]] = {}
        self._joined: dict[int, str] = {}
        self._hosts: dict[tuple[int, AddressSet | None], tuple[tuple[str, ...], str]] = {}
        self._starts: list[tuple[int, int]] | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AddressSet):
            return NotImplemented
        return self is other or self.ranges == other.ranges

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.ranges)
        return self._hash

    @property
    def networks(self) -> tuple[IPNetwork, ...]:
        if self._networks is None:
            self._networks = range_networks(self.ranges)
        return self._networks

    def __iter__(self) -> Iterator[IPNetwork]:
        return iter(self.networks)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def __len__(self) -> int:
        return len(self.networks)

    def __repr__(self) -> str:
        return f"AddressSet({', '.join(str(n) for n in self.networks)})"

    def texts(self, version: int) -> tuple[str, ...]:
        """The networks of one family as nft elements: a host is its address alone."""
        found = self._texts.get(version)
        if found is None:
            out: list[str] = []
            for v, first, last in self.ranges:
                if v == version:
                    out.extend(cidr_texts(v, first, last))
            found = self._texts[version] = tuple(out)
        return found

    def text(self, version: int) -> str:
        """`texts` joined as an nft element list."""
        found = self._joined.get(version)
        if found is None:
            found = self._joined[version] = ", ".join(self.texts(version))
        return found

    def host_texts(self, version: int, blocks: AddressSet | None) -> tuple[tuple[str, ...], str]:
        """The addresses of one family that `blocks` does not hold, one element per address,
        and joined as an nft element list. Every such address is a pod's host (`AllowRule`),
        so there are as many as the selection has members, never a block's size."""
        key = (version, blocks)
        found = self._hosts.get(key)
        if found is not None:
            return found
        # The family's ranges, expanded by C code (a map over the cached expansions): a big
        # selection changes every pass, and a loop over its ranges in Python was most of a
        # pass. Only the few ranges holding a block are cut in Python.
        ranges = self.ranges[_first_of(self.ranges, version) : _first_of(self.ranges, version + 1)]
        cut = [] if blocks is None else [(f, t) for v, f, t in blocks.ranges if v == version]
        holding = sorted({bisect.bisect_right(ranges, (version, f, _TOP)) - 1 for f, _ in cut})
        if len(_TEXTS) > HOST_TEXTS_CACHED:
            _TEXTS.clear()
        expand = _TEXTS.__getitem__
        out: list[str] = []
        start = 0
        for i in holding:
            out.extend(itertools.chain.from_iterable(map(expand, ranges[start:i])))
            _, first, last = ranges[i]
            for a, b in _outside(first, last, cut):
                out.extend(expand((version, a, b)))
            start = i + 1
        out.extend(itertools.chain.from_iterable(map(expand, ranges[start:])))
        found = self._hosts[key] = (tuple(out), ", ".join(out))
        return found

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
