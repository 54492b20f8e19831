"""A SIGTERM stops the test run cleanly, and only the run: a child forked from the test process
(pyroute2 forks helpers and stops them with SIGTERM) dies of the signal and tears down nothing of
the run's (tests/conftest.py)."""

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def kept(tmp_path: Path) -> Iterator[Path]:
    """A file the run's teardown deletes: a child that ran the teardown would delete it early."""
    path = tmp_path / "na-kept"
    path.write_text("the run's")
    yield path
    path.unlink()


def test_a_forked_child_dies_of_sigterm_and_leaves_the_run_alone(kept: Path) -> None:
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a copy of pytest, stopped the way pyroute2 stops its helpers
        os.close(ready_r)
        os.write(ready_w, b"x")
        time.sleep(30)
        os._exit(0)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"x"
    os.close(ready_r)

    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)

    assert os.WIFSIGNALED(status), status
    assert os.WTERMSIG(status) == signal.SIGTERM
    assert kept.read_text() == "the run's"
