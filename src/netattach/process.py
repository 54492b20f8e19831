"""Child processes run to their end: started with `posix_spawn`, fed and read through pipes,
their exit seen through a pidfd and reaped by a thread of their own (standard library only).

Two ways to wait, one contract: `run_blocking` blocks the caller's thread in `poll` (the thin
plugin, which has no event loop), `run_in_loop` waits in the running asyncio loop. Both start
the child in a session of its own (so a timeout kills everything it started), write `stdin`,
read stdout and stderr to their ends, and return an `Outcome`; both raise `OSError` when the
child cannot start (its `errno` says why: ENOENT, EACCES, ETXTBSY) and `TimedOutError` once
`timeout` seconds pass, after killing the child's process group.

Not `asyncio.create_subprocess_exec`: per child that builds a `subprocess.Popen`, three pipe
transports, a protocol and a child watcher's callback chain, ~0.35 ms of CPU on the event
loop's thread; here it is a spawn, three readers and a pidfd (~0.1 ms). Nor `subprocess` in the
thin plugin, whose import (with `locale` and `selectors`) costs ~3 ms per exec.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    import queue
    from collections.abc import Awaitable, Callable

READ_CHUNK = 65536

# What a child of `subprocess` gets back (restore_signals): Python ignores SIGPIPE, and an
# ignored signal stays ignored across exec.
_RESTORED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name)
)


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class Outcome(NamedTuple):
    returncode: int
    stdout: bytes
    stderr: bytes


class TimedOutError(Exception):
    """The child ran longer than its timeout; its process group was killed, and it is gone."""

    def __init__(self, timeout: float) -> None:
        super().__init__(f"timed out after {timeout:g}s")
        self.timeout = timeout


class GateError(Exception):
    """What the child's stdin was held for failed (it is this error's cause); the child, which
    had read nothing yet, was killed."""


class _Child(NamedTuple):
    """A started child: its pid, a pidfd (None where the kernel has none), our pipe ends."""

    pid: int
    exit_fd: int | None
    stdin: int
    stdout: int
    stderr: int


def _spawn(argv: list[str], env: dict[str, str]) -> _Child:
    stdin_r, stdin_w = os.pipe()  # close-on-exec, all six: the child gets only its dup2'd copies
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    try:
        pid = os.posix_spawnp(
            argv[0],
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, stdin_r, 0),
                (os.POSIX_SPAWN_DUP2, stdout_w, 1),
                (os.POSIX_SPAWN_DUP2, stderr_w, 2),
            ],
            setsid=True,
            setsigdef=_RESTORED_SIGNALS,
        )
    except BaseException:
        for fd in (stdin_w, stdout_r, stderr_r):
            os.close(fd)
        raise
    finally:
        for fd in (stdin_r, stdout_w, stderr_w):
            os.close(fd)
    _PROGRAMS[pid] = argv[0]
    return _Child(pid, pidfd(pid), stdin_w, stdout_r, stderr_r)


# REL-BURST: each program's highest resident set seen at a child's end (`wait4`'s ru_maxrss),
# by the path it was started as; what the daemon's memory admission expects of its next run.
_PROGRAMS: dict[int, str] = {}  # pid -> program, from the spawn to the reap
_PEAKS: dict[str, int] = {}


def peak_of(program: str) -> int | None:
    """The highest resident set, in bytes, of any child of `program` reaped so far."""
    return _PEAKS.get(program)


def _note_peak(pid: int, rusage: object) -> None:
    program = _PROGRAMS.pop(pid, None)
    peak = int(getattr(rusage, "ru_maxrss", 0)) * 1024  # Linux: KiB
    if program is not None and peak > _PEAKS.get(program, 0):
        _PEAKS[program] = peak


def pidfd(pid: int) -> int | None:
    """A descriptor readable once `pid` exits (Linux 5.3), or None where there is none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None  # a kernel before 5.3, or a seccomp profile that refuses it


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _feed(fd: int, pending: memoryview) -> memoryview:
    """Write what the pipe takes now of `pending`; what is left (nothing once it is closed)."""
    try:
        return pending[os.write(fd, pending[:READ_CHUNK]) :]
    except BlockingIOError:
        return pending
    except BrokenPipeError:
        return pending[:0]  # it stopped reading: what it got is what it gets


def _reap(pid: int) -> int:
    _, status, rusage = os.wait4(pid, 0)
    _note_peak(pid, rusage)
    return os.waitstatus_to_exitcode(status)


def _exit_code(child: _Child) -> int:
    """The exit code of a child its pidfd says has exited, taken without reaping it: the
    reaping goes to the reaper's thread. Without a pidfd it is reaped here, blocking.

    Reaping is not free: the kernel then drops the child's /proc entries, and for a Go plugin
    that walked its threads' namespaces that took 3-5 ms of CPU in one reap of five on a 2-core
    node (`release_task` -> `proc_invalidate_siblings_dcache`, seen with `perf`), time the next
    delegate of the pod would wait.
    """
    if child.exit_fd is None or not hasattr(os, "P_PIDFD"):
        return _reap(child.pid)
    info = os.waitid(os.P_PIDFD, child.exit_fd, os.WEXITED | os.WNOWAIT)
    assert info is not None  # no WNOHANG: there is an answer
    _REAPER.reap(child.pid)
    # CLD_EXITED carries the exit status, CLD_KILLED and CLD_DUMPED the signal.
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


class _Reaper:
    """One thread that reaps the children `_exit_code` has seen exit, in their order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pids: queue.SimpleQueue[int] | None = None

    def reap(self, pid: int) -> None:
        with self._lock:
            if self._pids is None:
                import queue  # at the first reap: a thin call that runs no delegate never pays it

                self._pids = queue.SimpleQueue()
                threading.Thread(
                    target=self._run, args=(self._pids,), name="netattach-reaper", daemon=True
                ).start()
        self._pids.put(pid)

    @staticmethod
    def _run(pids: queue.SimpleQueue[int]) -> None:
        while True:
            _reap_quietly(pids.get())


_REAPER = _Reaper()


def _reap_quietly(pid: int) -> None:
    try:
        _, _, rusage = os.wait4(pid, 0)
    except ChildProcessError:
        _PROGRAMS.pop(pid, None)
        return
    _note_peak(pid, rusage)


def _close(*fds: int | None) -> None:
    for fd in fds:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


# -- blocking --------------------------------------------------------------------------------


def run_blocking(
    argv: list[str],
    env: dict[str, str],
    stdin: bytes,
    timeout: float,
    *,
    gate: Callable[[], object] | None = None,
) -> Outcome:
    """Run `argv` to its exit, blocking this thread. With a `gate`, the child is started, then
    `gate()` is called, then the child gets its stdin (as `run_in_loop`'s gate, `GateError`
    when it raises)."""
    child = _spawn(argv, env)
    try:
        if gate is not None:
            try:
                gate()
            except Exception as exc:
                _close(child.stdin, child.stdout, child.stderr)  # `_collect_blocking`'s, unrun
                raise GateError(f"{argv[0]} was not given its input: {exc}") from exc
        collected = _collect_blocking(child, stdin, timeout)
    except BaseException:
        kill_group(child.pid)  # never leave the child running behind us
        _reap(child.pid)
        _close(child.exit_fd)
        raise
    if collected is None:
        kill_group(child.pid)
        _reap(child.pid)
        _close(child.exit_fd)
        raise TimedOutError(timeout)
    try:
        return Outcome(_exit_code(child), *collected)
    finally:
        _close(child.exit_fd)


def _collect_blocking(child: _Child, stdin: bytes, timeout: float) -> tuple[bytes, bytes] | None:
    """Write `stdin`, read stdout and stderr to their ends and see the child exit; None when
    `timeout` s pass first. Without a pidfd its exit is waited for after its output ends.
    Closes `child`'s pipes in every case (its pidfd is the caller's)."""
    import select

    deadline = time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {child.stdout: [], child.stderr: []}
    poller = select.poll()
    for fd in chunks:
        poller.register(fd, select.POLLIN)
    # A child that closes its output and goes on running is timed out too.
    if child.exit_fd is not None:
        poller.register(child.exit_fd, select.POLLIN)
    os.set_blocking(child.stdin, False)
    pending = _feed(child.stdin, memoryview(stdin))
    writing = bool(pending)
    if writing:
        poller.register(child.stdin, select.POLLOUT)
    else:
        _close(child.stdin)
    reading = set(chunks)
    running = child.exit_fd is not None
    try:
        while reading or writing or running:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for fd, _ in poller.poll(left * 1000):
                if fd == child.exit_fd:
                    poller.unregister(fd)
                    running = False
                elif fd == child.stdin:
                    pending = _feed(fd, pending)
                    if not pending:
                        poller.unregister(fd)
                        _close(fd)
                        writing = False
                else:
                    data = os.read(fd, READ_CHUNK)
                    if data:
                        chunks[fd].append(data)
                    else:
                        poller.unregister(fd)
                        reading.discard(fd)
    finally:
        _close(child.stdout, child.stderr, *([child.stdin] if writing else []))
    return b"".join(chunks[child.stdout]), b"".join(chunks[child.stderr])


# -- in the event loop -----------------------------------------------------------------------


async def run_in_loop(
    argv: list[str],
    env: dict[str, str],
    stdin: bytes,
    timeout: float,
    *,
    gate: Awaitable[object] | None = None,
) -> Outcome:
    """Run `argv` to its exit, waiting in the running event loop.

    With a `gate`, the child starts at once but gets its stdin only once `gate` completes: its
    start-up (an exec, a Go runtime's) overlaps the caller's wait. A `gate` that raises kills
    the child, which has read nothing yet, and raises `GateError` from that error. Cancelled,
    it kills the child's process group and leaves the reaping to the loop.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    child = _spawn(argv, env)
    try:
        waiter = _LoopWaiter(loop, child)
        if gate is None:
            waiter.feed(stdin)
    except BaseException:
        kill_group(child.pid)
        _close(child.stdin, child.stdout, child.stderr)
        _reap_later(loop, child)
        raise
    timer: asyncio.TimerHandle | None = None
    try:
        if gate is not None:
            try:
                await gate
            except Exception as exc:
                raise GateError(f"{argv[0]} was not given its input: {exc}") from exc
            waiter.feed(stdin)
        # From its input on: the time spent waiting for the gate is the caller's, not the child's.
        timer = loop.call_later(timeout, waiter.time_out)
        collected = await waiter.done
    except BaseException:
        if timer is not None:
            timer.cancel()
        waiter.stop()
        kill_group(child.pid)  # never leave the child running behind us
        _reap_later(loop, child)
        raise
    timer.cancel()
    waiter.stop()
    if collected is None:
        kill_group(child.pid)
        await _exited(loop, child)
        raise TimedOutError(timeout)
    return Outcome(await _exited(loop, child), *collected)


class _LoopWaiter:
    """Feeds and drains one child's pipes from the loop's readers and writer; `done` gets the
    output once both pipes ended and (with a pidfd) the child exited, None at the timeout."""

    def __init__(self, loop: asyncio.AbstractEventLoop, child: _Child) -> None:
        self.loop = loop
        self.child = child
        self.done: asyncio.Future[tuple[bytes, bytes] | None] = loop.create_future()
        self.chunks: dict[int, list[bytes]] = {child.stdout: [], child.stderr: []}
        self.waiting: set[int] = set(self.chunks)
        self.pending = memoryview(b"")
        self.writing = True  # our stdin end stays open until `feed` has written it all
        for fd in self.chunks:
            os.set_blocking(fd, False)
            loop.add_reader(fd, self._read, fd)
        if child.exit_fd is not None:
            self.waiting.add(child.exit_fd)
            loop.add_reader(child.exit_fd, self._exit)

    def feed(self, stdin: bytes) -> None:
        """Write `stdin` to the child, what the pipe does not take now as it drains."""
        os.set_blocking(self.child.stdin, False)
        self.pending = _feed(self.child.stdin, memoryview(stdin))
        if self.pending:
            self.loop.add_writer(self.child.stdin, self._write)
        else:
            _close(self.child.stdin)
            self.writing = False

    def _write(self) -> None:
        self.pending = _feed(self.child.stdin, self.pending)
        if not self.pending:
            self.loop.remove_writer(self.child.stdin)
            _close(self.child.stdin)
            self.writing = False

    def _read(self, fd: int) -> None:
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        if data:
            self.chunks[fd].append(data)
            return
        self._ended(fd)

    def _exit(self) -> None:
        assert self.child.exit_fd is not None
        self._ended(self.child.exit_fd)

    def _ended(self, fd: int) -> None:
        self.loop.remove_reader(fd)
        self.waiting.discard(fd)
        if not self.waiting and not self.done.done():
            out, err = (b"".join(self.chunks[f]) for f in (self.child.stdout, self.child.stderr))
            self.done.set_result((out, err))

    def time_out(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def stop(self) -> None:
        """Unregister every descriptor, and close our pipe ends (not the pidfd: reaping still
        needs it). Nothing of ours may stay registered: a descriptor closed while the loop
        watches it leaves the loop watching its number, which the next child's pipe reuses and
        whose readiness the loop then never reports."""
        for fd in self.waiting:
            self.loop.remove_reader(fd)
        if self.writing:
            self.loop.remove_writer(self.child.stdin)
            _close(self.child.stdin)
            self.writing = False
        _close(self.child.stdout, self.child.stderr)


async def _exited(loop: asyncio.AbstractEventLoop, child: _Child) -> int:
    """The exit code of the child (its pipes have ended): at once once its pidfd said it
    exited, else reaping it in a worker thread (a kernel without pidfds)."""
    if child.exit_fd is None:
        return await loop.run_in_executor(None, _reap, child.pid)
    try:
        if not _readable(child.exit_fd):
            exited = loop.create_future()
            loop.add_reader(child.exit_fd, exited.set_result, None)
            try:
                await exited
            finally:
                loop.remove_reader(child.exit_fd)
        return _exit_code(child)
    finally:
        _close(child.exit_fd)


def _readable(fd: int) -> bool:
    import select

    return bool(select.select([fd], [], [], 0)[0])


def _reap_later(loop: asyncio.AbstractEventLoop, child: _Child) -> None:
    """Reap a killed child when it is gone, without anyone waiting for it."""
    if child.exit_fd is None:
        loop.run_in_executor(None, _reap_quietly, child.pid)
        return
    exit_fd = child.exit_fd

    def reap() -> None:
        loop.remove_reader(exit_fd)
        _reap_quietly(child.pid)
        _close(exit_fd)

    loop.add_reader(exit_fd, reap)
