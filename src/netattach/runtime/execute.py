"""The seam where plugins become processes: `PluginExec`, and the real one, `SubprocessExec`.

Tests and benchmarks may substitute their own `PluginExec`; everything above this module only
sees `ExecOutcome`s and the two exceptions below. `BlockingExec` is the thin plugin's: the same
contract without an event loop (netattach.offload).
"""

import contextlib
import errno
import os
import signal
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
    group, timeout, ETXTBSY retries and outcome, the caller's thread blocked meanwhile."""

    async def _run_once(
        self, path: Path, *, env: Mapping[str, str], stdin: bytes, timeout: float
    ) -> ExecOutcome | None:
        import subprocess

        try:
            proc = subprocess.Popen(  # noqa: ASYNC220 (run without an event loop)
                self._argv(path),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(env),
                start_new_session=True,  # its own process group, so a timeout kills it all
            )
        except OSError as exc:
            if exc.errno == errno.ETXTBSY:
                return None
            raise ExecStartError(f"cannot execute {path}: {exc.strerror or exc}") from exc
        with proc:  # its pipes closed and the process reaped, however this ends
            try:
                stdout, stderr = proc.communicate(stdin, timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait()
                raise ExecTimeoutError(timeout) from None
            except BaseException:
                _kill_group(proc.pid)  # never leave the plugin running behind us
                raise
        return ExecOutcome(returncode=proc.returncode, stdout=stdout, stderr=stderr)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
