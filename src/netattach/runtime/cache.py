"""The attachment cache: one file per (network name, container ID, ifname) (CNI-CACHE).

Each file holds what a later CHECK, DEL or GC needs to run with the same inputs as the ADD: the
config list as it was, the runtime arguments, and the result once there is one. The file is
written *before* the ADD runs (result still empty) and again after it: a process killed in the
middle of an ADD leaves a record that GC finds and deletes, so nothing it allocated leaks.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from netattach import atomic
from netattach.cni import conf, env, errors
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

KIND = "netattachCacheV1"


class CorruptRecordError(errors.DecodingFailureError):
    """A cache file that cannot be read back (truncated, not JSON, wrong shape)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"corrupt attachment record {str(path)!r}", reason)
        self.path = path


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class AttachmentKey(NamedTuple):
    network_name: str
    container_id: str
    ifname: str

    def filename(self) -> str:
        # libcni joins the parts with "-", which names and IDs may contain, so two attachments
        # can share a file. ":" appears in none of them (network names and container IDs are
        # [A-Za-z0-9_.-], ifnames exclude ":" and "/"), so this name is unambiguous and cannot
        # escape the directory.
        return f"{self.network_name}:{self.container_id}:{self.ifname}"


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class CachedAttachment(NamedTuple):
    key: AttachmentKey
    netns: str
    config: dict[str, Any]  # the config list's raw dict, as the ADD used it
    cni_args: tuple[tuple[str, str], ...]
    capability_args: dict[str, Any]
    result: dict[str, Any] | None  # None while the ADD has not finished

    def to_raw(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "networkName": self.key.network_name,
            "containerId": self.key.container_id,
            "ifName": self.key.ifname,
            "netns": self.netns,
            "config": self.config,
            "cniArgs": [list(pair) for pair in self.cni_args],
            "capabilityArgs": self.capability_args,
            "result": self.result,
        }


def check_key(key: AttachmentKey) -> None:
    problem = conf.network_name_problem(key.network_name)
    if problem is not None:
        raise errors.InvalidNetworkConfigError(problem)
    env.check_container_id(key.container_id)
    env.check_ifname(key.ifname)


def read_record_file(path: Path) -> bytes:
    """The bytes of the regular file at `path`; `OSError` when something else stands there.

    A record's path is only ever a file we wrote, but the state directory outlives us: whatever
    is found there must not stall the caller. A plain read of a FIFO waits for a writer forever
    and one of a character device may never end, so the file is opened without blocking and read
    only when it is a regular file. (The pod records use this too.)
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _parse(path: Path, data: bytes) -> CachedAttachment:
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CorruptRecordError(path, f"not JSON ({exc})") from exc
    if not isinstance(raw, dict) or raw.get("kind") != KIND:
        raise CorruptRecordError(path, f"not a {KIND} record")
    try:
        key = AttachmentKey(
            network_name=_str(raw, "networkName"),
            container_id=_str(raw, "containerId"),
            ifname=_str(raw, "ifName"),
        )
        config = raw["config"]
        result = raw.get("result")
        cni_args = raw.get("cniArgs", [])
        capability_args = raw.get("capabilityArgs", {})
        if not isinstance(config, dict):
            raise TypeError("config is not an object")
        if result is not None and not isinstance(result, dict):
            raise TypeError("result is not an object")
        if not isinstance(capability_args, dict):
            raise TypeError("capabilityArgs is not an object")
        netns = raw.get("netns", "")
        if not isinstance(netns, str):
            raise TypeError("netns is not a string")
        if not isinstance(cni_args, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
            for p in cni_args
        ):
            raise TypeError("cniArgs is not a list of [key, value] strings")
        pairs = tuple((k, v) for k, v in cni_args)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptRecordError(path, f"bad field: {exc}") from exc
    return CachedAttachment(
        key=key,
        netns=netns,
        config=config,
        cni_args=pairs,
        capability_args=capability_args,
        result=result,
    )


def _str(raw: Mapping[str, Any], field: str) -> str:
    value = raw[field]
    if not isinstance(value, str):
        raise TypeError(f"{field} is not a string")
    return value


class AttachmentCache:
    """The cache directory; files live in `<directory>/results/`, as libcni lays them out."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory / "results"

    def path_for(self, key: AttachmentKey) -> Path:
        check_key(key)
        return self.directory / key.filename()

    def save(self, entry: CachedAttachment) -> None:
        data = json.dumps(entry.to_raw(), separators=(",", ":")).encode()
        try:
            # Not fsynced: the caller's own record of the attachment is the durable one (the
            # daemon's pod record); after a power cut a lost entry means a DEL without prevResult.
            atomic.write_atomic(self.path_for(entry.key), data, durable=False)
        except OSError as exc:
            raise errors.IOFailureError(
                f"cannot write attachment record for {entry.key.filename()!r}", str(exc)
            ) from exc

    def load(self, key: AttachmentKey) -> CachedAttachment | None:
        """The record, None when there is none; `CorruptRecordError` when it cannot be read."""
        path = self.path_for(key)
        try:
            data = read_record_file(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CorruptRecordError(path, f"unreadable ({exc.strerror or exc})") from exc
        record = _parse(path, data)
        if record.key != key:
            raise CorruptRecordError(path, f"it records {record.key}, not {key}")
        return record

    def delete(self, key: AttachmentKey) -> None:
        try:
            atomic.remove(self.path_for(key), durable=False)  # back after a power cut: one more DEL
        except OSError as exc:
            raise errors.IOFailureError(
                f"cannot remove attachment record {key.filename()!r}", str(exc)
            ) from exc

    def entries(self) -> Iterator[CachedAttachment | CorruptRecordError]:
        """Every record, in file-name order; an unreadable one is yielded as its error."""
        try:
            paths = sorted(p for p in self.directory.iterdir() if not p.name.startswith("."))
        except FileNotFoundError:
            return
        for path in paths:
            try:
                yield _parse(path, read_record_file(path))
            except CorruptRecordError as exc:
                yield exc
            except OSError as exc:
                yield CorruptRecordError(path, f"unreadable ({exc.strerror or exc})")
