"""Delegates admitted by memory as well as by count (REL-BURST).

The daemon forks its delegate plugins into its own cgroup: a burst of pods after a node reboot
runs `maxConcurrentDelegates` of them at once, and eight heavy plugins (~55 MiB each) beside the
daemon pass a 256 MiB limit; the kernel then kills the daemon, and every pod of the node waits.
So a delegate starts only when what the plugins already running are expected to hold, plus what
this one is expected to hold, fits in the cgroup's limit less the daemon's own resident set and
a margin; the rest wait their turn in order. One plugin always runs when none is: a burst is
slower, never stuck.

    expected    a program's highest resident set at any earlier end (`process.peak_of`), or
                UNMEASURED before its first run; times SAFETY
    limit       the lowest memory limit (v2 `memory.max`, v1 `memory.limit_in_bytes`) of the
                daemon's cgroup and its ancestors; none (unlimited, or no cgroup file) and only
                the count bound applies
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
from pathlib import Path

from netattach import loggers, process

# On the thin plugin's path (the orchestrator counts waits): no asyncio, no typing at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    from collections.abc import AsyncIterator, Callable
    from typing import Final

log = loggers.get("netattach.runtime")

MIB: Final = 1 << 20
UNMEASURED: Final = 64 * MIB  # a program never seen end: as much as a heavy plugin
SAFETY: Final = 1.25  # a peak seen once may be passed a little by the next run
MARGIN_SHARE: Final = 0.1  # of the limit, kept free (the page cache, the Python heap's growth)
MIN_MARGIN: Final = 16 * MIB
UNLIMITED: Final = 1 << 60  # cgroup v1 says "no limit" with a number near 2**63


def cgroup_limit(
    root: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")
) -> int | None:
    """The memory limit that binds this process, in bytes (the lowest of its cgroup's and of
    the ancestors the mount shows); None for none."""
    try:
        lines = own.read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    found: list[int] = []
    for line in lines:
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if controllers == "":  # v2: the unified hierarchy
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        # the cgroup and each ancestor; inside a cgroup namespace its own cgroup is the root
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):
            limit = _read_limit(base.joinpath(*parts[:depth]) / name)
            if limit is not None:
                found.append(limit)
    return min(found) if found else None


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except OSError:
        return None
    try:
        value = int(text)  # "max" (v2's none) is no number
    except ValueError:
        return None
    return None if value >= UNLIMITED else value


def own_resident() -> int:
    """This process's resident set, in bytes."""
    try:
        pages = int(Path("/proc/self/statm").read_text(encoding="ascii").split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


# The waits for memory of the delegates one call (an ADD) runs, for its Event: the call sets a
# list of its own (`count_waits`), the admissions under it add to it.
_WAITS: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "netattach_memory_waits", default=None
)


def count_waits() -> list[float]:
    """From now on in this context, each wait for memory (seconds) is added to the list given."""
    waits: list[float] = []
    _WAITS.set(waits)
    return waits


class MemoryGate:
    """Admission of delegate runs against the cgroup's limit (`limit` None: all admitted)."""

    def __init__(
        self,
        limit: int | None,
        *,
        resident: Callable[[], int] = own_resident,
        peak_of: Callable[[str], int | None] = process.peak_of,
    ) -> None:
        self.limit = limit
        self._resident = resident
        self._peak_of = peak_of
        self.admitted = 0  # bytes the running delegates are expected to hold (a metric)
        self.waiting = 0  # delegates waiting for memory (a metric)
        self._running = 0
        import asyncio  # the daemon's only: the thin plugin admits by count alone

        self._changed: asyncio.Condition = asyncio.Condition()

    def expected(self, program: str) -> int:
        peak = self._peak_of(program)
        return int((peak if peak is not None else UNMEASURED) * SAFETY)

    def budget(self) -> int:
        """What the delegates may hold together now: the limit less the daemon and a margin."""
        if self.limit is None:
            return UNLIMITED
        margin = max(MIN_MARGIN, int(self.limit * MARGIN_SHARE))
        return self.limit - self._resident() - margin

    def _fits(self, need: int) -> bool:
        return self._running == 0 or self.admitted + need <= self.budget()

    @contextlib.asynccontextmanager
    async def admission(self, program: str) -> AsyncIterator[None]:
        """Held while `program` runs: entered once its expected memory fits."""
        need = self.expected(program) if self.limit is not None else 0
        async with self._changed:
            if not self._fits(need):
                self.waiting += 1
                log.debug(
                    "%s waits for memory: %d MiB expected, %d MiB admitted of %d MiB",
                    program, need // MIB, self.admitted // MIB, self.budget() // MIB,
                )  # fmt: skip
                began = time.monotonic()
                try:
                    await self._changed.wait_for(lambda: self._fits(need))
                finally:
                    self.waiting -= 1
                    waits = _WAITS.get()
                    if waits is not None:
                        waits.append(time.monotonic() - began)
            self.admitted += need
            self._running += 1
        try:
            yield
        finally:
            async with self._changed:
                self.admitted -= need
                self._running -= 1
                self._changed.notify_all()
