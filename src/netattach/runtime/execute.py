"""The seam where plugins are found and become processes: `PluginExec`, and the real one,
`SubprocessExec`.

Tests and benchmarks may substitute their own `PluginExec`, which then also says which plugins
the `CNI_PATH` directories hold (libcni's `FindInPath` is part of its exec seam too); everything
above this module only sees paths, `FileStamp`s, `ExecOutcome`s and the two exceptions below.
`BlockingExec` is the thin plugin's: the same contract without an event loop (netattach.offload).
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path

from netattach import offload, process
from netattach.runtime import find

ExecOutcome = process.Outcome

# What changes when a plugin's file is replaced: (inode, size, mtime in ns).
FileStamp = tuple[int, int, int]


class ExecTimeoutError(Exception):
    """The plugin ran longer than its timeout; its process group was killed."""

    def __init__(self, timeout: float) -> None:
        super().__init__(f"timed out after {timeout:g}s")
        self.timeout = timeout


class ExecStartError(Exception):
    """The plugin could not be started at all (permissions, ENOEXEC, text file busy for good)."""


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    class PluginExec(Protocol):
        def find_in_path(self, plugin_type: str, directories: Sequence[str]) -> Path:
            """The plugin `plugin_type` of the first of `directories` holding it (CNI-FIND);
            `errors.InvalidNetworkConfigError` when none does, or for a `type` that is no
            plain file name (`find.find_plugin`)."""
            ...

        def file_stamp(self, path: Path) -> FileStamp:
            """The stamp of the plugin at `path`, found by `find_in_path`: the runtime asks a
            plugin's VERSION once per stamp."""
            ...

        async def run(
            self,
            path: Path,
            *,
            env: Mapping[str, str],
            stdin: bytes,
            timeout: float,
            gate: Awaitable[object] | None = None,
        ) -> ExecOutcome:
            """Run the plugin at `path` to its exit. With a `gate`, the plugin reads nothing of
            `stdin` before `gate` completes, and never runs on (or is never started) when it
            raises: the caller's write-ahead record is made durable meanwhile."""
            ...


# How nsenter reports an exec that failed because the file is being written (ETXTBSY).
_NSENTER_BUSY = b"Text file busy"


class SubprocessExec:
    """Run a plugin as a child process in its own process group (`netattach.process`).

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

    def find_in_path(self, plugin_type: str, directories: Sequence[str]) -> Path:
        """The executable file `plugin_type` of the first directory holding one."""
        return find.find_plugin(plugin_type, directories)

    def file_stamp(self, path: Path) -> FileStamp:
        """The file's inode, size and modification time."""
        stat = path.stat()
        return (stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def _argv(self, path: Path) -> Sequence[str]:
        if self._host_netns is None:
            return (str(path),)
        return ("nsenter", f"--net={self._host_netns}", "--", str(path))

    async def run(
        self,
        path: Path,
        *,
        env: Mapping[str, str],
        stdin: bytes,
        timeout: float,
        gate: Awaitable[object] | None = None,
    ) -> ExecOutcome:
        argv, environ = list(self._argv(path)), dict(env)
        for attempt in range(self._busy_retries + 1):
            try:
                outcome = await self._run_once(argv, environ, stdin, timeout, gate)
            except process.TimedOutError as exc:
                raise ExecTimeoutError(exc.timeout) from None
            except OSError as exc:
                if exc.errno != errno.ETXTBSY:
                    raise ExecStartError(f"cannot execute {path}: {exc.strerror or exc}") from exc
                outcome = None
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
        self,
        argv: list[str],
        env: dict[str, str],
        stdin: bytes,
        timeout: float,
        gate: Awaitable[object] | None,
    ) -> ExecOutcome:
        return await process.run_in_loop(argv, env, stdin, timeout, gate=gate)


class BlockingExec(SubprocessExec):
    """`SubprocessExec` for a process without an event loop (the thin plugin): the same process
    group, timeout, ETXTBSY retries and outcome, the caller's thread blocked meanwhile."""

    async def _run_once(
        self,
        argv: list[str],
        env: dict[str, str],
        stdin: bytes,
        timeout: float,
        gate: Awaitable[object] | None,
    ) -> ExecOutcome:
        if gate is None:
            return process.run_blocking(argv, env, stdin, timeout)
        # No loop: the gate runs to its end in this thread once the plugin started.
        return process.run_blocking(
            argv, env, stdin, timeout, gate=lambda: offload.run(_awaiting(gate))
        )


async def _awaiting(awaitable: Awaitable[object]) -> None:
    """`awaitable` as a coroutine, which `offload.run` takes."""
    await awaitable
