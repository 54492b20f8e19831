"""`policy.ranges.HostRanges`: hosts joining and leaving in place give what merging gives
(a host another member still holds stays)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.policy.model import AddressRange, merge_ranges
from netattach.policy.ranges import HostRanges

host_st = st.tuples(st.sampled_from([4, 6]), st.integers(0, 40)).map(lambda t: (t[0], t[1], t[1]))
block_st = st.tuples(st.sampled_from([4, 6]), st.integers(0, 40), st.integers(0, 6)).map(
    lambda t: (t[0], t[1], t[1] + t[2])
)


@settings(max_examples=500, deadline=None)
@given(
    blocks=st.lists(block_st, max_size=4),
    initial=st.lists(host_st, max_size=12),
    steps=st.lists(
        st.tuples(st.lists(host_st, max_size=3), st.lists(host_st, max_size=3)), max_size=12
    ),
)
def test_updates_in_place_equal_a_merge_of_what_is_left(
    blocks: list[AddressRange],
    initial: list[AddressRange],
    steps: list[tuple[list[AddressRange], list[AddressRange]]],
) -> None:
    ranges = HostRanges(blocks, initial)
    present = list(initial)  # a multiset: a host two members share
    for leaving, joining in steps:
        gone = []
        for host in leaving:
            if host in present:  # only members' hosts ever leave
                present.remove(host)
                gone.append(host)
        added = [h for h in joining if h not in gone]  # as callers give them: disjoint
        before = ranges.snapshot()
        covered = {h: ranges.holds(h) for h in [*gone, *added]}
        lost, gained = ranges.update(gone, added, held=lambda host: host in present)
        present.extend(added)
        assert ranges.snapshot() == merge_ranges([*blocks, *present])
        if not lost and not gained:
            assert ranges.snapshot() == before
        # exactly the hosts that stopped or started being admitted
        assert sorted(set(lost)) == sorted(lost)
        assert sorted(set(gained)) == sorted(gained)
        assert set(lost) == {h for h in covered if covered[h] and not ranges.holds(h)}
        assert set(gained) == {h for h in covered if not covered[h] and ranges.holds(h)}
