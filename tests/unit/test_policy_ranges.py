"""`policy.ranges.HostRanges`: hosts joining and leaving in place give what merging gives
(a host another member still holds stays); a version of them reads as they were when made."""

from __future__ import annotations

import weakref

from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.policy.model import AddressRange, merge_ranges
from netattach.policy.ranges import BEHIND_MAX, HostRanges, Version

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


@settings(max_examples=300, deadline=None)
@given(
    blocks=st.lists(block_st, max_size=3),
    initial=st.lists(host_st, max_size=10),
    steps=st.lists(
        st.tuples(
            st.lists(host_st, max_size=3),
            st.lists(host_st, max_size=3),
            st.booleans(),  # a version made after the step
            st.booleans(),  # one kept version read now
        ),
        max_size=40,
    ),
)
def test_every_version_reads_as_the_addresses_were_when_it_was_made(
    blocks: list[AddressRange],
    initial: list[AddressRange],
    steps: list[tuple[list[AddressRange], list[AddressRange], bool, bool]],
) -> None:
    # Versions are read at any time after they were made (or never), in any order: each
    # gives the ranges of its moment, and says how big it is without being read.
    ranges = HostRanges(blocks, initial)
    present = list(initial)
    kept: list[tuple[Version, tuple[AddressRange, ...]]] = []

    def make() -> None:
        version, _, _ = ranges.advance()
        want = merge_ranges([*blocks, *present])
        assert version.sizes == tuple(sum(r[0] == v for r in want) for v in (4, 6))
        outside = {(v, a, a) for v, f, t in want for a in range(f, t + 1)} - {
            (v, a, a) for v, f, t in merge_ranges(blocks) for a in range(f, t + 1)
        }
        assert version.extra == tuple(sum(h[0] == v for h in outside) for v in (4, 6))
        kept.append((version, want))

    make()
    for leaving, joining, made, read in steps:
        gone = [h for h in dict.fromkeys(leaving) if h in present]
        for host in gone:
            present.remove(host)
        added = [h for h in joining if h not in gone]
        ranges.update(gone, added, held=lambda host: host in present)
        present.extend(added)
        if made:
            make()
        if read:
            version, want = kept[len(kept) // 2]
            assert version.families() == _apart(want)
    for version, want in reversed(kept):
        assert version.families() == _apart(want)


def _apart(ranges: tuple[AddressRange, ...]) -> tuple[tuple[AddressRange, ...], ...]:
    return tuple(r for r in ranges if r[0] == 4), tuple(r for r in ranges if r[0] == 6)


def test_a_version_far_behind_is_read_and_keeps_no_later_one_alive() -> None:
    ranges = HostRanges([], [(4, 0, 0)])
    oldest, _, _ = ranges.advance()
    later = []
    for n in range(1, BEHIND_MAX + 2):
        ranges.update([], [(4, 2 * n, 2 * n)], held=lambda _: False)
        later.append(weakref.ref(ranges.advance()[0]))
    # The oldest version is still held: read once it fell BEHIND_MAX versions behind, it no
    # longer needs (nor keeps) the versions after it; only the newest, which ranges holds.
    assert [ref() is None for ref in later] == [True] * BEHIND_MAX + [False]
    assert oldest.families() == (((4, 0, 0),), ())
