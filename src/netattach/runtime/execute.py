"""The seam where plugins become processes: `PluginExec`, and the real one, `SubprocessExec`.

Tests and benchmarks may substitute their own `PluginExec`; everything above this module only
sees `ExecOutcome`s and the two exceptions below. `BlockingExec` is the thin plugin's: the same
contract without an event loop (netattach.offload).
"""

import contextlib
import errno
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

from netattach import offload


# A NamedTuple, not a frozen dataclass: the thin plugin imports this module on every exec, and
# a dataclass costs ~0.5 ms to create (it compiles each of its methods), a NamedTuple a fifth.
class ExecOutcome(NamedTuple):
    returncode: int
    stdout: bytes
    stderr: bytes


class ExecTimeoutError(Exception):
    """The plugin ran longer than its timeout; its process group was killed."""

    def __init__(self, timeout: float, stderr: bytes = b"") -> None:
        super().__init__(f"timed out after {timeout:g}s")
        self.timeout = timeout
        self.stderr = stderr


class ExecStartError(Exception):
    """The plugin could not be started at all (permissions, ENOEXEC, text file busy for good)."""


class PluginExec(Protocol):
    async def run(
        self, path: Path, *, env: Mapping[str, str], stdin: bytes, timeout: float
    ) -> ExecOutcome: ...


# How nsenter reports an exec that failed because the file is being written (ETXTBSY).
_NSENTER_BUSY = b"Text file busy"


class SubprocessExec:
    """Run a plugin as a child process in its own process group.

    `host_netns` runs the plugin inside that network namespace (via `nsenter --net`), as if it
    were the node's: used by tests and the demo so that the host side of every plugin (bridges,
    sysctls, firewall rules) lives in a namespace we made, never on the real host.
    """

    def __init__(
        self,
        *,
        host_netns: str | None = None,
        busy_retries: int = 10,
        busy_backoff: float = 0.05,
    ) -> None:
        self._host_netns = host_netns
        self._busy_retries = busy_retries
        self._busy_backoff = busy_backoff

    def _argv(self, path: Path) -> Sequence[str]:
        if self._host_netns is None:
            return (str(path),)
        return ("nsenter", f"--net={self._host_netns}", "--", str(path))

    async def run(
        self, path: Path, *, env: Mapping[str, str], stdin: bytes, timeout: float
    ) -> ExecOutcome:
        for attempt in range(self._busy_retries + 1):
            outcome = await self._run_once(path, env=env, stdin=stdin, timeout=timeout)
            busy = outcome is None or (
                self._host_netns is not None
                and outcome.returncode == 126
                and _NSENTER_BUSY in outcome.stderr
            )
            if not busy:
                assert outcome is not None
                return outcome
            # "text file busy": the file is being replaced (an upgrade writing the binary).
            # libcni retries the exec; so do we, with a short growing pause.
            await offload.sleep(self._busy_backoff * (attempt + 1))
        raise ExecStartError(f"{path} stayed busy (ETXTBSY) after {self._busy_retries} retries")

    async def _run_once(
        self, path: Path, *, env: Mapping[str, str], stdin: bytes, timeout: float
    ) -> ExecOutcome | None:
        import asyncio  # here, not above: BlockingExec (the thin plugin) runs without it

        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(path),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(env),
                start_new_session=True,  # its own process group, so a timeout kills it all
            )
        except OSError as exc:
            if exc.errno == errno.ETXTBSY:
                return None
            raise ExecStartError(f"cannot execute {path}: {exc.strerror or exc}") from exc
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            raise ExecTimeoutError(timeout) from None
        except BaseException:
            # Cancelled (the caller gave up): never leave the plugin running behind us.
            _kill_group(proc.pid)
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
            raise
        assert proc.returncode is not None
        return ExecOutcome(returncode=proc.returncode, stdout=stdout, stderr=stderr)


class BlockingExec(SubprocessExec):
    """`SubprocessExec` for a process without an event loop (the thin plugin): the same process
    group, timeout, ETXTBSY retries and outcome, the caller's thread blocked meanwhile.

    Started with `posix_spawn` and read with `poll`, not through `subprocess`, whose import
    (with `locale` and `selectors`) would cost every exec of the thin plugin ~3 ms.
    """

    async def _run_once(
        self, path: Path, *, env: Mapping[str, str], stdin: bytes, timeout: float
    ) -> ExecOutcome | None:
        try:
            return _run_to_end(list(self._argv(path)), dict(env), stdin, timeout)
        except OSError as exc:
            if exc.errno == errno.ETXTBSY:
                return None
            raise ExecStartError(f"cannot execute {path}: {exc.strerror or exc}") from exc


def _run_to_end(argv: list[str], env: dict[str, str], stdin: bytes, timeout: float) -> ExecOutcome:
    """Run `argv` to its exit, `stdin` in, its output out; OSError when it cannot start."""
    child = _spawn(argv, env)
    pid = child.pid
    try:
        collected = _collect(child, stdin, timeout=timeout)
    except BaseException:
        _kill_group(pid)  # never leave the plugin running behind us
        os.waitpid(pid, 0)
        raise
    if collected is None:
        _kill_group(pid)
        os.waitpid(pid, 0)
        raise ExecTimeoutError(timeout)
    _, status = os.waitpid(pid, 0)
    stdout, stderr = collected
    return ExecOutcome(returncode=os.waitstatus_to_exitcode(status), stdout=stdout, stderr=stderr)


# What a child of `subprocess` gets back (restore_signals): Python ignores SIGPIPE, and an
# ignored signal stays ignored across exec.
_RESTORED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name)
)
_READ_CHUNK = 65536


class _Child(NamedTuple):
    """A plugin started by `BlockingExec`: its pid, and our ends of its three pipes."""

    pid: int
    stdin: int
    stdout: int
    stderr: int


def _spawn(argv: list[str], env: dict[str, str]) -> _Child:
    """Start `argv` in a session of its own (a process group, so a timeout kills it all) with
    pipes for its standard streams."""
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
    return _Child(pid=pid, stdin=stdin_w, stdout=stdout_r, stderr=stderr_r)


def _collect(child: _Child, stdin: bytes, *, timeout: float) -> tuple[bytes, bytes] | None:
    """Write `stdin`, read stdout and stderr to their ends and wait for the child to exit; None
    when `timeout` s pass first. Closes the child's three descriptors in every case."""
    import select

    stdin_w, stdout_r, stderr_r = child.stdin, child.stdout, child.stderr
    deadline = time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {stdout_r: [], stderr_r: []}
    pending = memoryview(stdin)
    poller = select.poll()
    for fd in chunks:
        poller.register(fd, select.POLLIN)
    # Readable once the process exits (Linux 5.3): a plugin that closes its output and goes on
    # running is timed out too. Without one, its exit is waited for after its output ends.
    exit_fd = _pidfd(child.pid)
    if exit_fd is not None:
        poller.register(exit_fd, select.POLLIN)
    writing = bool(pending)
    if writing:
        os.set_blocking(stdin_w, False)
        poller.register(stdin_w, select.POLLOUT)
    else:
        os.close(stdin_w)
    reading = set(chunks)
    running = exit_fd is not None
    try:
        while reading or writing or running:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for fd, _ in poller.poll(left * 1000):
                if fd == exit_fd:
                    poller.unregister(exit_fd)
                    running = False
                    continue
                if fd == stdin_w:
                    pending = _feed(stdin_w, pending)
                    if not pending:
                        poller.unregister(stdin_w)
                        os.close(stdin_w)
                        writing = False
                    continue
                data = os.read(fd, _READ_CHUNK)
                if data:
                    chunks[fd].append(data)
                else:
                    poller.unregister(fd)
                    reading.discard(fd)
    finally:
        if writing:
            os.close(stdin_w)
        for fd in chunks:
            os.close(fd)
        if exit_fd is not None:
            os.close(exit_fd)
    return b"".join(chunks[stdout_r]), b"".join(chunks[stderr_r])


def _feed(fd: int, pending: memoryview) -> memoryview:
    """Write what the pipe takes now of `pending`; what is left (nothing once it is closed)."""
    try:
        return pending[os.write(fd, pending[:_READ_CHUNK]) :]
    except BlockingIOError:
        return pending
    except BrokenPipeError:
        return pending[:0]  # it stopped reading: what it got is what it gets


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None  # a kernel before 5.3, or a seccomp profile that refuses it


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
