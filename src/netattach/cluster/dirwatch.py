"""Being woken when a directory's entries change: inotify on Linux (through ctypes, no new
dependency), nothing elsewhere (the caller's polling is then all there is).

`DirectoryWatch.wait(timeout)` returns as soon as a file in the directory is written and closed,
created, deleted, renamed in or out, or has its attributes changed, or when `timeout` passes.
It says nothing about what changed: the caller rescans (cheap: one `scandir` and a stat per
file) and rereads only the files whose stamp moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

# <sys/inotify.h>
IN_MODIFY: Final = 0x00000002
IN_ATTRIB: Final = 0x00000004
IN_CLOSE_WRITE: Final = 0x00000008
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_NONBLOCK: Final = 0o4000
IN_CLOEXEC: Final = 0o2000000
WATCH_MASK: Final = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)
READ_SIZE: Final = 64 * 1024  # events are drained, never decoded


class DirectoryWatch:
    """An inotify watch on one directory, read from the running event loop."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd: int | None = None
        self._woken = asyncio.Event()

    @property
    def active(self) -> bool:
        return self._fd is not None

    def start(self) -> bool:
        """Watch the directory; False (and polling only) where inotify is not available."""
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            init, add = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError) as exc:
            log.info("no inotify (%s): %s is polled", exc, self.directory)
            return False
        add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        fd = init(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            log.info(
                "inotify_init1: %s: %s is polled", os.strerror(ctypes.get_errno()), self.directory
            )
            return False
        if add(fd, os.fsencode(self.directory), WATCH_MASK) < 0:
            log.info(
                "inotify_add_watch %s: %s: polled",
                self.directory,
                os.strerror(ctypes.get_errno()),
            )
            os.close(fd)
            return False
        self._fd = fd
        asyncio.get_running_loop().add_reader(fd, self._readable)
        return True

    def _readable(self) -> None:
        assert self._fd is not None
        with contextlib.suppress(BlockingIOError):
            while os.read(self._fd, READ_SIZE):
                pass
        self._woken.set()

    async def wait(self, timeout: float) -> bool:
        """Until the directory changes (True) or `timeout` seconds pass (False)."""
        try:
            await asyncio.wait_for(self._woken.wait(), timeout)
        except TimeoutError:
            return False
        self._woken.clear()
        return True

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd = None
