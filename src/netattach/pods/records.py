"""The record of a pod's attachments: what ADD attempted, so DEL can undo exactly that.

One file per container under `<stateDir>/pods/`. It is rewritten (atomically) before each
attachment runs and once more before ADD answers, so whatever a crash interrupts, the record
names every attachment that may hold resources. DEL reads it, never the cluster view: it works
when the pod, the NAD or the API is gone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from netattach import atomic
from netattach.cni import env, errors
from netattach.runtime import cache
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

KIND = "netattachPodV1"


class CorruptPodRecordError(errors.DecodingFailureError):
    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"corrupt pod record {str(path)!r}", reason)
        self.path = path


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class AttachmentRecord(NamedTuple):
    """One attachment as ADD ran it: the config list after injection, its arguments, result."""

    status_name: str  # "namespace/name" for a NAD, the config's name for an on-disk network
    ifname: str
    is_default: bool
    config: dict[str, Any]
    capability_args: dict[str, Any]
    gateways: tuple[str, ...] = ()
    result: dict[str, Any] | None = None
    # DEV-RESOURCE: the resource and the allocated device this attachment was given ("" for
    # none); `config` carries the device too, these say which it was for the status and `status`.
    resource: str = ""
    device: str = ""

    def to_raw(self) -> dict[str, Any]:
        return {
            "statusName": self.status_name,
            "ifname": self.ifname,
            "default": self.is_default,
            "config": self.config,
            "capabilityArgs": self.capability_args,
            "gateways": list(self.gateways),
            "result": self.result,
            **({"resource": self.resource, "device": self.device} if self.device else {}),
        }

    @classmethod
    def from_raw(cls, raw: Any) -> AttachmentRecord:
        if not isinstance(raw, dict):
            raise TypeError("an attachment is not an object")
        config, caps, result = raw["config"], raw["capabilityArgs"], raw.get("result")
        gateways = raw.get("gateways", [])
        if not isinstance(config, dict) or not isinstance(caps, dict):
            raise TypeError("config and capabilityArgs must be objects")
        if result is not None and not isinstance(result, dict):
            raise TypeError("result must be an object")
        if not isinstance(gateways, list) or not all(isinstance(g, str) for g in gateways):
            raise TypeError("gateways must be a list of strings")
        return cls(
            status_name=_text(raw, "statusName"),
            ifname=_text(raw, "ifname"),
            is_default=_flag(raw, "default"),
            config=config,
            capability_args=caps,
            gateways=tuple(gateways),
            result=result,
            resource=_text(raw, "resource") if "resource" in raw else "",
            device=_text(raw, "device") if "device" in raw else "",
        )


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class PodRecord(NamedTuple):
    container_id: str
    netns: str
    namespace: str
    pod: str
    uid: str
    attachments: tuple[AttachmentRecord, ...] = ()
    complete: bool = False  # True once every attachment succeeded and ADD answered
    # The selection annotation's text the attachments were planned from ("" for none; None for
    # unknown, as in records written before this field): hot-plug compares it with the pod's.
    selection: str | None = None

    def prefix(self) -> str:
        return f"[{self.namespace}/{self.pod}/{self.uid}]"

    def to_raw(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "containerId": self.container_id,
            "netns": self.netns,
            "namespace": self.namespace,
            "pod": self.pod,
            "uid": self.uid,
            "complete": self.complete,
            "attachments": [a.to_raw() for a in self.attachments],
            **({} if self.selection is None else {"selection": self.selection}),
        }


def _text(raw: dict[str, Any], key: str) -> str:
    value = raw[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value


def _flag(raw: dict[str, Any], key: str, *, default: bool | None = None) -> bool:
    value = raw.get(key, default) if default is not None else raw[key]
    if not isinstance(value, bool):
        raise TypeError(f"{key} is not a boolean")
    return value


def _parse(path: Path, data: bytes) -> PodRecord:
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CorruptPodRecordError(path, f"not JSON ({str(exc)[:120]})") from exc
    if not isinstance(raw, dict) or raw.get("kind") != KIND:
        raise CorruptPodRecordError(path, f"not a {KIND} record")
    try:
        attachments = raw["attachments"]
        if not isinstance(attachments, list):
            raise TypeError("attachments is not a list")
        selection = raw.get("selection")
        if selection is not None and not isinstance(selection, str):
            raise TypeError("selection is not a string")
        return PodRecord(
            container_id=_text(raw, "containerId"),
            netns=_text(raw, "netns"),
            namespace=_text(raw, "namespace"),
            pod=_text(raw, "pod"),
            uid=_text(raw, "uid"),
            complete=_flag(raw, "complete", default=False),
            attachments=tuple(AttachmentRecord.from_raw(a) for a in attachments),
            selection=selection,
        )
    except (KeyError, TypeError) as exc:
        raise CorruptPodRecordError(path, f"bad field: {exc}") from exc


class PodRecords:
    """The pod records of a state directory, one file each.

    `load` keeps what it parsed, keyed by the file's inode, mtime and size: the hot-plug and
    policy passes read every record of the node after each pod change, and a file unchanged
    since (every write is a new file renamed over the old) is not read and parsed again. A
    record is immutable, so the one kept is the one handed out; `save` and `delete` forget it.
    """

    def __init__(self, state_dir: Path) -> None:
        self.directory = state_dir / "pods"
        self._parsed: dict[str, tuple[tuple[int, int, int], PodRecord]] = {}

    def path_for(self, container_id: str) -> Path:
        env.check_container_id(container_id)
        return self.directory / f"{container_id}.json"

    def save(self, record: PodRecord, *, durable: bool = True) -> None:
        """Write the record; `durable=False` when losing this version in a power cut is
        harmless (it only marks complete what an earlier durable version already names)."""
        data = json.dumps(record.to_raw(), separators=(",", ":")).encode()
        self._parsed.pop(record.container_id, None)
        try:
            atomic.write_atomic(self.path_for(record.container_id), data, durable=durable)
        except OSError as exc:
            raise errors.IOFailureError(
                f"cannot write the record of container {record.container_id}", str(exc)
            ) from exc

    def load(self, container_id: str) -> PodRecord | None:
        path = self.path_for(container_id)
        try:
            # Before the read: a file replaced in between is read new and kept under the old
            # stamp, so the next load reads it again (never the other way round).
            found = os.stat(path)
            stamp = (found.st_ino, found.st_mtime_ns, found.st_size)
            kept = self._parsed.get(container_id)
            if kept is not None and kept[0] == stamp:
                return kept[1]
            data = cache.read_record_file(path)
        except FileNotFoundError:
            self._parsed.pop(container_id, None)
            return None
        except OSError as exc:
            raise CorruptPodRecordError(path, f"unreadable ({exc.strerror or exc})") from exc
        record = _parse(path, data)
        if record.container_id != container_id:
            raise CorruptPodRecordError(path, f"it records container {record.container_id}")
        self._parsed[container_id] = (stamp, record)
        return record

    def delete(self, container_id: str) -> None:
        self._parsed.pop(container_id, None)
        try:
            # A record back after a power cut costs one harmless DEL (of nothing) at the sweep.
            atomic.remove(self.path_for(container_id), durable=False)
        except OSError as exc:
            raise errors.IOFailureError(
                f"cannot remove the record of container {container_id}", str(exc)
            ) from exc

    def sandboxes_of(self, namespace: str, pod: str, uid: str, *, but: str) -> list[str]:
        """The recorded containers of the pod `namespace/pod` (of its `uid`, when both know
        it) other than `but`; an unreadable record is of no pod."""
        found = []
        for container_id in self.container_ids():
            if container_id == but:
                continue
            try:
                record = self.load(container_id)
            except CorruptPodRecordError:
                continue
            if record is None or (record.namespace, record.pod) != (namespace, pod):
                continue
            if not uid or not record.uid or record.uid == uid:
                found.append(container_id)
        return found

    def container_ids(self) -> Iterator[str]:
        """Every recorded container, readable or not (from the file names)."""
        try:
            paths = sorted(self.directory.glob("*.json"))
        except OSError:
            return
        for gone in self._parsed.keys() - {path.stem for path in paths}:
            del self._parsed[gone]  # removed by another process (`netattach gc`)
        for path in paths:
            if env.container_id_problem(path.stem) is None:
                yield path.stem
