"""`daemon.passes.debounced_passes`: changes coalesced into passes, passes spaced apart after
a burst."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from netattach.daemon import passes

log = logging.getLogger("test.passes")


async def _run_passes(
    changes: list[float], *, min_interval: float, burst: int = 1, fail: bool = False
) -> tuple[list[float], int]:
    """Set the event at each offset of `changes` (seconds from the start); the passes' start
    times, and how often `after_failure` ran."""
    loop = asyncio.get_running_loop()
    dirty = asyncio.Event()
    starts: list[float] = []
    failures = [0]
    begin = loop.time()

    async def one_pass() -> None:
        starts.append(loop.time() - begin)
        if fail:
            raise RuntimeError("a bug")

    def after_failure() -> None:
        failures[0] += 1

    task = asyncio.create_task(
        passes.debounced_passes(
            dirty,
            one_pass,
            debounce=0.001,
            log=log,
            what="test",
            after_failure=after_failure,
            min_interval=min_interval,
            burst=burst,
        )
    )
    for at in changes:
        await asyncio.sleep(max(0.0, begin + at - loop.time()))
        dirty.set()
    await asyncio.sleep(min_interval + 0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return starts, failures[0]


def test_passes_under_constant_change_start_no_sooner_than_the_interval_apart() -> None:
    changes = [i * 0.01 for i in range(60)]  # a change every 10 ms for 0.6 s
    starts, _ = asyncio.run(_run_passes(changes, min_interval=0.2))
    assert len(starts) >= 3  # every change was taken in by some pass, the last one included
    assert starts[-1] >= changes[-1]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.2


def test_a_change_on_a_quiet_loop_runs_at_once_not_an_interval_later() -> None:
    starts, _ = asyncio.run(_run_passes([0.0, 1.5], min_interval=1.0))
    assert len(starts) == 2
    assert starts[0] < 0.5  # the first pass ever: nothing to space it from
    assert 1.5 <= starts[1] < 2.0  # the last pass started 1.5 s before: no wait


def test_a_failing_pass_is_reported_and_the_loop_goes_on() -> None:
    starts, failures = asyncio.run(_run_passes([0.0, 0.3], min_interval=0.1, fail=True))
    assert len(starts) == 2
    assert failures == 2


def test_a_burst_of_passes_runs_at_once_then_one_an_interval() -> None:
    # Two changes close together on a quiet loop: a pass each, at once (a policy deleted and
    # made again). Under constant change after that: one pass an interval, the burst spent.
    changes = [0.0, 0.05, *(0.1 + i * 0.01 for i in range(60))]
    starts, _ = asyncio.run(_run_passes(changes, min_interval=0.2, burst=2))
    assert starts[0] < 0.04
    assert 0.05 <= starts[1] < 0.09
    assert starts[-1] >= changes[-1]  # the last change was taken in too
    # the bucket refills at one pass an interval: once it is empty, passes come that far apart
    gaps = [b - a for a, b in itertools.pairwise(starts[2:])]
    assert min(gaps) >= 0.2 * 0.95  # (the loop's clock, read twice, rounds)
    # no more passes in any stretch of time than the burst and one per interval
    for i, j in itertools.combinations(range(len(starts)), 2):
        assert j - i + 1 <= 2 + (starts[j] - starts[i]) / (0.2 * 0.95)


def test_the_burst_comes_back_after_a_quiet_time() -> None:
    # the bucket is full again after `burst` intervals without a pass
    changes = [0.0, 0.02, 0.04, 1.3, 1.32]
    starts, _ = asyncio.run(_run_passes(changes, min_interval=0.4, burst=2))
    assert len(starts) == 5
    assert starts[2] >= starts[0] + 0.4 * 0.95  # the third change waited for a token
    assert [round(s - 1.3, 1) for s in starts[-2:]] == [0.0, 0.0]  # two more at once
