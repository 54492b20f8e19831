"""One operation at a time per container, across processes (RT-SERIAL).

A `flock` on `<stateDir>/locks/<containerID>.lock`: the thin plugin's processes and the daemon
serialise on the same file. Locks are taken without blocking a thread (LOCK_NB, polled with a
short growing sleep), so waiting for one container never holds up another.
"""

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

from netattach.cni import env, errors


class ContainerLocks:
    def __init__(self, state_dir: Path, *, timeout: float = 120.0) -> None:
        self.directory = state_dir / "locks"
        self.timeout = timeout

    @contextlib.asynccontextmanager
    async def hold(self, container_id: str) -> AsyncIterator[None]:
        env.check_container_id(container_id)
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / f"{container_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + self.timeout
            pause = 0.005
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise errors.TryAgainLaterError(
                            f"container {container_id} is busy with another operation",
                            f"waited {self.timeout:g}s for its lock",
                        ) from None
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 0.1)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock
