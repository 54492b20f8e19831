"""A selection's addresses on one network, kept up to date host by host.

The addresses are the union of fixed ranges (its ipBlocks) and of its member pods' host
addresses, as disjoint ranges in address order with adjacent ones joined (what
`model.merge_ranges` gives for the same addresses). A pod joining or leaving adds or removes its
hosts with a bisection and a splice, instead of merging every member's addresses again: the
cost of a change is the change (and one copy of the tuple), not the selection's size.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from netattach.policy.model import AddressRange, merge_ranges


def _covering(ranges: list[AddressRange], host: AddressRange) -> int:
    """The index of the range holding `host`, or -1."""
    i = bisect.bisect_right(ranges, (host[0], host[1], 1 << 130)) - 1
    if i >= 0 and ranges[i][0] == host[0] and ranges[i][1] <= host[1] <= ranges[i][2]:
        return i
    return -1


class HostRanges:
    """Fixed ranges plus counted hosts (a host two pods share stays until both leave)."""

    __slots__ = ("_blocks", "_hosts", "ranges")

    def __init__(self, blocks: Iterable[AddressRange], hosts: Iterable[AddressRange]) -> None:
        self._blocks = list(merge_ranges(blocks))
        self._hosts: dict[AddressRange, int] = {}
        for host in hosts:
            self._hosts[host] = self._hosts.get(host, 0) + 1
        self.ranges = merge_ranges([*self._blocks, *self._hosts])

    def update(self, gone: Iterable[AddressRange], added: Iterable[AddressRange]) -> bool:
        """Hosts of members that left and of members that joined; True when `ranges` changed."""
        out: list[AddressRange] | None = None
        for host in gone:
            count = self._hosts.get(host, 0)
            if count != 1:
                if count:
                    self._hosts[host] = count - 1
                continue
            del self._hosts[host]
            if _covering(self._blocks, host) >= 0:
                continue  # an ipBlock still admits it
            out = list(self.ranges) if out is None else out
            i = _covering(out, host)
            if i < 0:
                continue
            version, first, last = out[i]
            parts = []
            if first < host[1]:
                parts.append((version, first, host[1] - 1))
            if host[1] < last:
                parts.append((version, host[1] + 1, last))
            out[i : i + 1] = parts
        for host in added:
            count = self._hosts.get(host, 0)
            self._hosts[host] = count + 1
            if count:
                continue
            out = list(self.ranges) if out is None else out
            if _covering(out, host) >= 0:
                continue  # already admitted (an ipBlock)
            version, value = host[0], host[1]
            i = bisect.bisect_left(out, host)
            joined = (version, value, value)
            if i > 0 and out[i - 1][0] == version and out[i - 1][2] == value - 1:
                i -= 1
                joined = (version, out[i][1], value)
                del out[i]
            if i < len(out) and out[i][0] == version and out[i][1] == value + 1:
                joined = (version, joined[1], out[i][2])
                del out[i]
            out.insert(i, joined)
        if out is None:
            return False
        fresh = tuple(out)
        changed = fresh != self.ranges
        self.ranges = fresh
        return changed
