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
