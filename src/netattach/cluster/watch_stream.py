"""One line of a watch stream, read the way a real API server sends it (KUBE-BOOKMARK).

A watch line is `{"type": ..., "object": ...}`. What the object is depends on the type, so the
type is read first and the object decoded only when it is a resource:

    BOOKMARK    a skeleton object that is not a valid resource (kube-apiserver 1.28 sends a Pod
                with `spec.containers: null`): only its metadata.resourceVersion is read
    ERROR       a `Status` (410 Expired, say): raised as `lightkube.ApiError`, as a failed request
    ADDED, MODIFIED, DELETED
                the resource, decoded into lightkube's typed model; one the model cannot decode
                (a field of a newer API version, a skewed server) becomes `Undecodable` with its
                kind, name and resourceVersion read from the raw JSON, so the watch goes on

A line that is not a watch event at all (not JSON, no `type`) is a broken stream: `ValueError`.

`parse_list` reads a page of a list the same way: each item is decoded on its own, so one the
model cannot decode is an `Undecodable` beside the others, not a failed list. The page is split
into its items' raw JSON first and each item decoded only when its turn comes: a page of 500 pods
parsed whole is ~10 MB of Python objects at once, and the heap it grew stays resident (in holes
between the objects kept) long after the page is gone.
"""

import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

import lightkube
import msgspec
from lightkube.core import decoders

BOOKMARK: Final = "BOOKMARK"
ERROR: Final = "ERROR"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Bookmark:
    resource_version: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    type: str  # ADDED, MODIFIED or DELETED
    obj: Any  # an instance of the watched resource class


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Undecodable:
    type: str
    kind: str
    namespace: str
    name: str
    resource_version: str
    why: str

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where or '(no name)'}"


Event = Bookmark | Change | Undecodable


def _raw_mapping(raw: bytes) -> Mapping[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, Mapping) else {}


def _text(mapping: Mapping[str, Any], key: str) -> str:
    value = mapping.get(key)
    return value if isinstance(value, str) else ""


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def parse_line(line: str | bytes, resource: type[Any], kind: str) -> Event:
    """The event of one watch line of `resource` (whose kind is `kind`).

    Raises `lightkube.ApiError` for an ERROR event, `ValueError` for a line that is no event.
    """
    try:
        event = decoders.decode_watch_event(line.encode() if isinstance(line, str) else line)
    except (ValueError, TypeError) as exc:
        shown = line[:200] if isinstance(line, str) else line[:200].decode(errors="replace")
        raise ValueError(f"not a watch event: {shown!r} ({exc})") from exc
    raw = bytes(event.object)
    if event.type == ERROR:
        raise lightkube.ApiError(status=decoders.decode_status(raw))
    if event.type == BOOKMARK:
        # Never decoded as the resource: the skeleton is not one.
        return Bookmark(resource_version=_text(_metadata(_raw_mapping(raw)), "resourceVersion"))
    try:
        return Change(type=event.type, obj=decoders.decode_object(raw, resource))
    except (ValueError, TypeError) as exc:  # msgspec.ValidationError is a ValueError
        obj = _raw_mapping(raw)
        meta = _metadata(obj)
        return Undecodable(
            type=event.type,
            kind=_text(obj, "kind") or kind,
            namespace=_text(meta, "namespace"),
            name=_text(meta, "name"),
            resource_version=_text(meta, "resourceVersion"),
            why=str(exc),
        )


def _decode_item(raw: msgspec.Raw, resource: type[Any], kind: str) -> Change | Undecodable:
    # The item as the whole page's json.loads would have made it, then the model, as before.
    item: object = None
    try:
        item = json.loads(bytes(raw))
        if not isinstance(item, Mapping):
            raise TypeError(f"a list item is {type(item).__name__}, not an object")
        if issubclass(resource, dict):  # lightkube's generic resources: custom resources
            return Change(type="ADDED", obj=resource(item))
        return Change(type="ADDED", obj=resource.from_dict(dict(item)))
    except (ValueError, TypeError) as exc:  # msgspec.ValidationError is a ValueError
        obj = item if isinstance(item, Mapping) else {}
        meta = _metadata(obj)
        return Undecodable(
            type="ADDED",
            kind=_text(obj, "kind") or kind,
            namespace=_text(meta, "namespace"),
            name=_text(meta, "name"),
            resource_version=_text(meta, "resourceVersion"),
            why=str(exc),
        )


class _Page(msgspec.Struct):
    """A list page with its items left as raw JSON (views into the page's bytes)."""

    items: list[msgspec.Raw] | None = None
    metadata: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))


def _decoded(raw_items: list[msgspec.Raw], resource: type[Any], kind: str) -> Iterator[Event]:
    while raw_items:
        # Popped, not iterated: each item's raw view goes as soon as it is decoded.
        yield _decode_item(raw_items.pop(), resource, kind)


def parse_list(body: bytes, resource: type[Any], kind: str) -> tuple[str, str, Iterator[Event]]:
    """A list page: its resourceVersion ("" when absent), its continue token ("" on the last
    page) and its items, as ADDED `Change`s or `Undecodable`s decoded one at a time as they are
    iterated (in the page's order). `ValueError` when the page itself is not a list."""
    try:
        page = msgspec.json.decode(body, type=_Page)
    except msgspec.ValidationError as exc:  # JSON, but not an object with a list of items
        raise ValueError(f"a list of {kind} is not a list object") from exc
    except msgspec.DecodeError as exc:
        raise ValueError(f"a list of {kind} is not JSON: {exc}") from exc
    meta = _raw_mapping(bytes(page.metadata))
    raw_items = page.items or []
    raw_items.reverse()
    items = _decoded(raw_items, resource, kind)
    return _text(meta, "resourceVersion"), _text(meta, "continue"), items
