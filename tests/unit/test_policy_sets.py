"""A selection's addresses as nft sets: its pods' hosts one by one, its ipBlocks as ranges."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from netattach.policy.model import merge_ranges
from netattach.policy.ranges import HostRanges
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


def test_an_address_set_made_of_a_version_is_the_set_of_its_ranges() -> None:
    v4 = ((4, 10, 10), (4, 12, 14))
    v6 = ((6, 1 << 100, 1 << 100),)
    whole = AddressSet(v4 + v6)
    version, _, _ = HostRanges([], [*v4, *v6]).advance()
    apart = AddressSet(None, version=version)
    assert bool(apart)
    assert apart.hosts(4, None).ranges is version.families()[0]  # each family as it is
    assert apart.hosts(6, None).ranges is version.families()[1]
    assert [apart.hosts(v, None).texts() for v in (4, 6)] == [
        whole.hosts(v, None).texts() for v in (4, 6)
    ]
    assert apart == whole  # the ranges of both, joined when read
    assert hash(apart) == hash(whole)
    assert apart.ranges == v4 + v6
    only_v4, _, _ = HostRanges([], v4).advance()
    assert bool(AddressSet(None, version=only_v4))
    assert not AddressSet(None, version=only_v4).hosts(6, None)
    assert not AddressSet(None, version=HostRanges([], []).advance()[0])


def test_host_ranges_give_each_family_apart_and_joined() -> None:
    hosts = HostRanges([], [(6, 7, 7), (4, 3, 3), (4, 5, 5)])
    assert hosts.advance()[0].families() == (((4, 3, 3), (4, 5, 5)), ((6, 7, 7),))
    hosts.update([], [(4, 4, 4), (6, 9, 9)], lambda _: False)
    assert hosts.advance()[0].families() == (((4, 3, 5),), ((6, 7, 7), (6, 9, 9)))
    assert hosts.snapshot() == ((4, 3, 5), (6, 7, 7), (6, 9, 9))
    assert hosts.holds((6, 9, 9))
    assert not hosts.holds((4, 9, 9))


@given(
    before=st.lists(st.tuples(st.sampled_from((4, 6)), st.integers(0, 40)), max_size=20),
    gone=st.lists(st.tuples(st.sampled_from((4, 6)), st.integers(0, 40)), max_size=5),
    added=st.lists(st.tuples(st.sampled_from((4, 6)), st.integers(0, 40)), max_size=5),
)
def test_a_set_made_after_another_equals_it_exactly_when_its_addresses_do(
    before: list[tuple[int, int]], gone: list[tuple[int, int]], added: list[tuple[int, int]]
) -> None:
    # Sets made one after the other, as a pass makes them, compare as their content does,
    # whether the comparison is settled by the change they carry or by their ranges.
    hosts = [(v, BASE[v] + n, BASE[v] + n) for v, n in before]
    left = [(v, BASE[v] + n, BASE[v] + n) for v, n in gone]
    joined = [(v, BASE[v] + n, BASE[v] + n) for v, n in added]
    ranges = HostRanges([], hosts)
    first = AddressSet(None, version=ranges.advance()[0])
    held = set(hosts)
    leaving = [h for h in dict.fromkeys(left) if h in held]
    ranges.update(leaving, [h for h in joined if h not in leaving], held=lambda _: False)
    now, gained, lost = ranges.advance()
    second = AddressSet(None, first, gained, lost, version=now)
    same = merge_ranges(hosts) == merge_ranges(
        [*(h for h in hosts if h not in leaving), *(h for h in joined if h not in leaving)]
    )
    assert (second == first) is same
    assert (first == second) is same
    for version in (4, 6):
        new, old = second.hosts(version, None), first.hosts(version, None)
        assert (new == old) is (new.ranges == old.ranges)


@given(hosts=hosts_st, blocks=blocks_st, gone=hosts_st, added=hosts_st)
def test_host_sets_read_from_a_version_equal_those_of_the_ranges_it_holds(
    hosts: list[tuple[int, int]],
    blocks: list[tuple[int, int, int]],
    gone: list[tuple[int, int]],
    added: list[tuple[int, int]],
) -> None:
    # What a table is built from after a change (a version, read only when needed) is what it
    # was built from before (the ranges themselves), emptiness included, before or after the
    # addresses moved on.
    host_ranges = [(v, BASE[v] + a, BASE[v] + a) for v, a in hosts]
    block_ranges = [(v, BASE[v] + a, BASE[v] + a + n) for v, a, n in blocks]
    cut = AddressSet(merge_ranges(block_ranges)) if block_ranges else None
    live = HostRanges(block_ranges, host_ranges)
    version, _, _ = live.advance()
    lazy, eager = AddressSet(None, version=version), AddressSet(live.snapshot())
    leaving = [(v, BASE[v] + a, BASE[v] + a) for v, a in gone]
    live.update(leaving, [(v, BASE[v] + a, BASE[v] + a) for v, a in added], lambda _: False)
    for family in (4, 6):
        for blocks_given in (cut, None):
            found, want = lazy.hosts(family, blocks_given), eager.hosts(family, blocks_given)
            assert bool(found) is bool(want.ranges)
            assert found.ranges == want.ranges
            assert found.texts() == want.texts()
