"""Atomic files: write beside, fsync, rename over, fsync the directory (stdlib only).

A reader sees the old file or the new one, never half of either, even across a power cut.
`durable=False` keeps the atomic rename and skips the two fsyncs: for a file whose loss in a
power cut costs nothing but a little redundant work (a cache entry, a status that is published
again, the "complete" mark of a record whose every attachment is already durably named), since
the page cache survives any crash of the process itself.
"""

import contextlib
import os
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    directory = path.parent
    tmp = directory / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(tmp, flags, mode)
    except FileNotFoundError:  # the first file of its directory (not a mkdir on every write)
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, flags, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    if durable:
        fsync_directory(directory)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path: Path, *, durable: bool = True) -> bool:
    """Delete `path` (durably unless told otherwise); False when it was already gone."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    if durable:
        fsync_directory(path.parent)
    return True


def remove_stale_temp_files(directory: Path) -> list[Path]:
    """Remove the temp files of writers that died mid-write (their PID is gone).

    `write_atomic` names its temp file `.<name>.<pid>.<hex>.tmp`; a process killed between
    creating and renaming it leaves one behind, never read but never cleaned either.
    """
    removed: list[Path] = []
    try:
        candidates = list(directory.glob(".*.tmp"))
    except OSError:
        return removed
    for path in candidates:
        parts = path.name.split(".")
        if len(parts) < 5 or not parts[-3].isdigit():
            continue
        pid = int(parts[-3])
        if pid == os.getpid() or _alive(pid):
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
