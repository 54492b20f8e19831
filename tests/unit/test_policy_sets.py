"""A selection's addresses as nft sets: its pods' hosts one by one, its ipBlocks as ranges."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from netattach.policy.model import merge_ranges
from netattach.policy.selection import AddressSet

BASE = {4: int(ipaddress.IPv4Address("10.0.0.0")), 6: int(ipaddress.IPv6Address("fd00::"))}

hosts_st = st.lists(st.tuples(st.sampled_from((4, 6)), st.integers(0, 40)), max_size=30)
blocks_st = st.lists(
    st.tuples(st.sampled_from((4, 6)), st.integers(0, 40), st.integers(0, 6)), max_size=4
)


@given(hosts=hosts_st, blocks=blocks_st)
def test_a_host_set_is_the_hosts_no_block_holds(
    hosts: list[tuple[int, int]], blocks: list[tuple[int, int, int]]
) -> None:
    host_ranges = [(v, BASE[v] + a, BASE[v] + a) for v, a in hosts]
    block_ranges = [(v, BASE[v] + a, BASE[v] + a + n) for v, a, n in blocks]
    peers = AddressSet(merge_ranges([*host_ranges, *block_ranges]))
    cut = AddressSet(merge_ranges(block_ranges)) if block_ranges else None
    for version in (4, 6):
        found = peers.hosts(version, cut)
        texts, joined = found.texts(), found.text()
        want = sorted(
            {
                a
                for v, a, _ in host_ranges
                if v == version and not any(v == b and f <= a <= t for b, f, t in block_ranges)
            }
        )
        assert [int(ipaddress.ip_address(t)) for t in texts] == want
        assert joined == ", ".join(texts)
