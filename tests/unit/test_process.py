"""`netattach.process`: children run to their end, in the event loop and blocking, alike.

Every case runs both ways (`run_in_loop` under asyncio, `run_blocking` without a loop): the
daemon's delegates and nft calls take the first, the thin plugin's delegates the second.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from netattach import process
from tests.unit.processes import process_alive

Run = Callable[[list[str], bytes, float], process.Outcome]
ENV = {"PATH": "/usr/bin:/bin"}


def in_loop(argv: list[str], stdin: bytes, timeout: float) -> process.Outcome:
    return asyncio.run(process.run_in_loop(argv, ENV, stdin, timeout))


def blocking(argv: list[str], stdin: bytes, timeout: float) -> process.Outcome:
    return process.run_blocking(argv, ENV, stdin, timeout)


WAYS = pytest.mark.parametrize("run", [in_loop, blocking], ids=["in-loop", "blocking"])


@WAYS
def test_stdin_larger_than_a_pipe_goes_in_whole_and_comes_back_whole(run: Run) -> None:
    data = os.urandom(3 * 1024 * 1024)  # 48 pipe buffers: the writer must wait for the reader
    done = run(["cat"], data, 30)
    assert done.returncode == 0
    assert done.stdout == data
    assert done.stderr == b""


@WAYS
def test_a_child_that_reads_no_stdin_still_ends(run: Run) -> None:
    done = run(["sh", "-c", "echo out; echo err >&2; exit 3"], b"x" * (1024 * 1024), 30)
    assert done == process.Outcome(3, b"out\n", b"err\n")


@WAYS
def test_a_child_killed_by_a_signal_reports_the_negative_signal(run: Run) -> None:
    done = run(["sh", "-c", "kill -TERM $$"], b"", 30)
    assert done.returncode == -signal.SIGTERM


@WAYS
def test_a_missing_program_is_an_oserror_with_its_errno(run: Run, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as raised:
        run([str(tmp_path / "absent")], b"", 5)
    assert raised.value.errno == errno.ENOENT


@pytest.mark.req("CNI-TIMEOUT")
@WAYS
def test_at_the_timeout_the_whole_process_group_is_killed_and_reaped(
    run: Run, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    # The grandchild keeps stdout open: only the group kill ends the wait.
    script = f"sleep 60 & echo $! > {pids}; echo $$ >> {pids}; wait"
    with pytest.raises(process.TimedOutError) as raised:
        run(["sh", "-c", script], b"", 0.5)
    assert raised.value.timeout == 0.5
    grandchild, child = (int(line) for line in pids.read_text().split())
    assert not process_alive(child)  # killed: gone, or a zombie until the reaper's turn
    deadline = time.monotonic() + 5
    while (Path(f"/proc/{child}").exists() or process_alive(grandchild)) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.02)
    assert not Path(f"/proc/{child}").exists()  # reaped: not even a zombie
    assert not process_alive(grandchild)


@WAYS
def test_a_child_that_closes_its_output_and_runs_on_is_timed_out(run: Run) -> None:
    with pytest.raises(process.TimedOutError):
        run(["sh", "-c", "exec >&- 2>&-; sleep 60"], b"", 0.5)


def test_in_the_loop_no_thread_is_started_per_child() -> None:
    async def main() -> tuple[set[int], process.Outcome]:
        running = asyncio.create_task(process.run_in_loop(["sleep", "0.3"], ENV, b"", 10))
        await asyncio.sleep(0.1)
        during = {t.ident or 0 for t in threading.enumerate()}
        return during, await running

    before = {t.ident or 0 for t in threading.enumerate()}
    during, done = asyncio.run(main())
    assert done.returncode == 0
    assert during == before


def test_a_cancelled_run_kills_its_child_and_the_loop_reaps_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"

    async def main() -> int:
        # The child says it started on stdout and stays; the loop's reader sees the line.
        script = f"echo $$ > {pid_file}; exec sleep 60"
        running = asyncio.create_task(process.run_in_loop(["sh", "-c", script], ENV, b"", 60))
        await asyncio.sleep(0.3)
        assert pid_file.read_text().strip()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        pid = int(pid_file.read_text())
        for _ in range(250):  # the reaping runs in the loop once the child is gone
            if not Path(f"/proc/{pid}").exists():
                break
            await asyncio.sleep(0.02)
        return pid

    pid = asyncio.run(main())
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped: not even a zombie


def test_many_children_at_once_in_the_loop_each_get_their_own_output() -> None:
    async def main() -> list[process.Outcome]:
        return await asyncio.gather(
            *(
                process.run_in_loop(["sh", "-c", f"cat; echo {n}"], ENV, f"in{n}\n".encode(), 30)
                for n in range(40)
            )
        )

    for n, done in enumerate(asyncio.run(main())):
        assert done == process.Outcome(0, f"in{n}\n{n}\n".encode(), b"")


@WAYS
def test_an_ended_child_is_reaped_soon_after_and_no_zombie_stays(run: Run) -> None:
    done = run(["sh", "-c", "echo $$"], b"", 10)
    pid = int(done.stdout)
    # Its exit code was read without reaping it; the reaper thread reaps it.
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not Path(f"/proc/{pid}").exists()
    assert done.returncode == 0


def watched(loop: asyncio.AbstractEventLoop) -> set[int]:
    """The descriptors the loop's selector watches (private: no public way to ask)."""
    return set(loop._selector.get_map())  # type: ignore[attr-defined]


@pytest.mark.parametrize("ending", ["timed out", "cancelled"])
def test_a_child_that_did_not_end_well_leaves_nothing_watched(
    ending: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A descriptor closed while the loop still watches it leaves the loop watching its number;
    # the next child's pipe that reuses the number is then never reported ready, and that
    # child "hangs" until its timeout (seen: every DEL after a hung ADD's). The race that made
    # it: the killed child already gone when its pidfd is looked at. Made certain here.
    readable = process._readable

    def after_a_while(fd: int) -> bool:
        time.sleep(0.05)  # a SIGKILLed child is gone by then
        return readable(fd)

    monkeypatch.setattr(process, "_readable", after_a_while)

    async def main() -> list[process.Outcome]:
        loop = asyncio.get_running_loop()
        before = watched(loop)
        ended = []
        for _ in range(5):
            hung = process.run_in_loop(["sh", "-c", "sleep 60 & wait"], ENV, b"", 0.1)
            if ending == "timed out":
                with pytest.raises(process.TimedOutError):
                    await hung
            else:
                task = asyncio.ensure_future(hung)
                await asyncio.sleep(0.1)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            for _ in range(250):  # a cancelled run's reaping goes on in the loop
                if watched(loop) == before:
                    break
                await asyncio.sleep(0.02)
            assert watched(loop) == before
            ended.append(await process.run_in_loop(["echo", "next"], ENV, b"", 5))
        return ended

    assert asyncio.run(main()) == [process.Outcome(0, b"next\n", b"")] * 5


@pytest.mark.req("RT-ATOMIC")
def test_a_gated_child_starts_at_once_and_reads_its_stdin_after_the_gate(tmp_path: Path) -> None:
    started = tmp_path / "started"

    async def gate() -> None:
        # Completes only once the child runs: it was started before the gate, not after.
        for _ in range(500):
            if started.exists():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the child did not start before its gate completed")

    async def main() -> process.Outcome:
        return await process.run_in_loop(
            ["sh", "-c", f"touch {started}; cat"], ENV, b"config", 30, gate=gate()
        )

    assert asyncio.run(main()) == process.Outcome(0, b"config", b"")


@pytest.mark.req("RT-ATOMIC")
def test_a_failed_gate_kills_the_child_unfed_and_leaves_nothing_watched(tmp_path: Path) -> None:
    pid_file, got = tmp_path / "pid", tmp_path / "got"

    async def gate() -> None:
        for _ in range(500):
            if pid_file.exists() and pid_file.read_text().strip():
                raise OSError(errno.ENOSPC, "No space left on device")
            await asyncio.sleep(0.01)

    async def main() -> set[int]:
        loop = asyncio.get_running_loop()
        before = watched(loop)
        script = f"echo $$ > {pid_file}; cat > {got}"
        with pytest.raises(process.GateError) as failed:
            await process.run_in_loop(["sh", "-c", script], ENV, b"config", 30, gate=gate())
        assert isinstance(failed.value.__cause__, OSError)
        assert "No space left on device" in str(failed.value)
        for _ in range(250):  # the killed child's reaping goes on in the loop
            if watched(loop) == before:
                break
            await asyncio.sleep(0.02)
        return watched(loop) - before

    assert asyncio.run(main()) == set()
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not process_alive(pid)
    # It read nothing of what it was to be given (killed before or after `cat` began).
    assert not got.exists() or got.read_bytes() == b""


@pytest.mark.req("CNI-TIMEOUT")
def test_the_timeout_counts_from_the_input_not_from_the_wait_for_the_gate() -> None:
    async def slow_gate() -> None:
        await asyncio.sleep(0.6)  # longer than the child's whole timeout

    async def main() -> process.Outcome:
        return await process.run_in_loop(["cat"], ENV, b"config", 0.4, gate=slow_gate())

    assert asyncio.run(main()) == process.Outcome(0, b"config", b"")


@pytest.mark.req("RT-ATOMIC")
def test_without_a_loop_a_gated_child_also_starts_before_the_gate(tmp_path: Path) -> None:
    started = tmp_path / "started"
    seen: list[bool] = []

    def gate() -> None:
        deadline = time.monotonic() + 5
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(started.exists())

    done = process.run_blocking(
        ["sh", "-c", f"touch {started}; cat"], ENV, b"config", 30, gate=gate
    )
    assert done == process.Outcome(0, b"config", b"")
    assert seen == [True]


@pytest.mark.req("RT-ATOMIC")
def test_without_a_loop_a_failed_gate_kills_the_child_unfed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"

    def gate() -> None:
        deadline = time.monotonic() + 5
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert time.monotonic() < deadline, "the child did not start"
            time.sleep(0.01)
        raise OSError(errno.ENOSPC, "No space left on device")

    fds = set(os.listdir("/proc/self/fd"))
    with pytest.raises(process.GateError) as failed:
        process.run_blocking(["sh", "-c", f"echo $$ > {pid_file}; cat"], ENV, b"x", 30, gate=gate)
    assert isinstance(failed.value.__cause__, OSError)
    assert set(os.listdir("/proc/self/fd")) <= fds  # its pipes and pidfd closed
    assert not Path(f"/proc/{int(pid_file.read_text())}").exists()  # killed and reaped
