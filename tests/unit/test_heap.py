"""The node daemon's garbage collector: a young collection every `heap.YOUNG_THRESHOLD`
allocations, set by `netattach daemon` before anything else (daemon/heap.py says why)."""

import json
import subprocess
import sys
from pathlib import Path

from netattach.daemon import heap

SRC = Path(__file__).resolve().parents[2] / "src"


def test_the_daemon_command_sets_the_collector_first() -> None:
    # A config that cannot be read: the command stops at once, after setting the collector.
    code = (
        f"import gc, sys; sys.path.insert(0, {str(SRC)!r}); "
        "from netattach.cli import daemon; "
        "before = gc.get_threshold(); "
        "rc = daemon.run(config='/nonexistent/na-heap-test.yaml', shim=None); "
        "import json; print(json.dumps([before, gc.get_threshold(), rc]))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    before, after, rc = json.loads(done.stdout)
    assert before == [700, 10, 10]  # Python's default, so the change is the command's
    assert after == [heap.YOUNG_THRESHOLD, 10, 10]
    assert rc == 2
    assert "/nonexistent/na-heap-test.yaml" in done.stderr


def test_tune_keeps_the_older_generations_ratios() -> None:
    import gc

    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 7, 3)
        heap.tune()
        assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, 7, 3)
    finally:
        gc.set_threshold(*saved)


def test_a_collection_half_due_runs_between_passes_and_not_before() -> None:
    import gc

    saved = gc.get_threshold()
    held: list[list[int]] = []
    try:
        gc.set_threshold(100_000, 10, 10)
        gc.collect()  # every count at 0
        held.extend([i] for i in range(1_000))  # far from half of the threshold
        young = gc.get_count()[0]
        heap.collect_between_passes()
        assert gc.get_count()[0] >= young  # not due: nothing collected
        held.extend([i] for i in range(60_000))  # beyond half of it
        heap.collect_between_passes()
        young, middle, _ = gc.get_count()
        assert young < 1_000  # collected now
        assert middle == 1  # a young collection (the middle one was not due)
        for _ in range(10):
            held.extend([i] for i in range(60_000))
            heap.collect_between_passes()
        assert gc.get_count()[1] < 10  # the middle one ran when due, as the collector runs it
    finally:
        gc.set_threshold(*saved)
