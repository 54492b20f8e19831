"""One operation at a time per container, across processes (RT-SERIAL).

A `flock` on `<stateDir>/locks/<containerID>.lock`: the thin plugin's processes and the daemon
serialise on the same file. Locks are taken without blocking a thread (LOCK_NB, polled with a
short growing sleep), so waiting for one container never holds up another.
"""

import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

from netattach import offload
from netattach.cni import env, errors


class Held:
    """A held lock; `discard()` removes its file on release (the container is gone for good)."""

    def __init__(self) -> None:
        self.discarded = False

    def discard(self) -> None:
        self.discarded = True


class ContainerLocks:
    def __init__(self, state_dir: Path, *, timeout: float = 120.0) -> None:
        self.directory = state_dir / "locks"
        self.timeout = timeout

    @contextlib.asynccontextmanager
    async def hold(self, container_id: str) -> AsyncIterator[Held]:
        env.check_container_id(container_id)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{container_id}.lock"
        deadline = time.monotonic() + self.timeout
        fd = await self._acquire(path, container_id, deadline)
        held = Held()
        try:
            yield held
        finally:
            if held.discarded:
                # Unlinked while still locked: a waiter that opened this inode re-checks it after
                # locking (see _acquire) and starts over on a fresh file.
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            os.close(fd)  # closing the descriptor releases the flock

    async def _acquire(self, path: Path, container_id: str, deadline: float) -> int:
        pause = 0.005
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
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
                        await offload.sleep(pause)
                        pause = min(pause * 2, 0.1)
                if _same_file(fd, path):
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the file was removed while we waited: lock the new one


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = path.stat()
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)
