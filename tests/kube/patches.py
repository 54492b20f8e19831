"""The PATCH formats of the Kubernetes API: JSON merge, strategic merge and JSON patch.

- `merge_patch`: RFC 7386 (`application/merge-patch+json`): objects merge recursively, `null`
  deletes a key, anything else (lists included) replaces.
- `strategic_merge_patch` (`application/strategic-merge-patch+json`): like a merge patch, except
  that the lists Kubernetes declares with a patch merge key are merged element by element
  (`STRATEGIC_MERGE_KEYS`: containers by name, conditions by type, ownerReferences by uid, ...) and
  the lists declared as sets of primitives (`metadata.finalizers`) are unioned. The directives
  `$patch: replace|delete` (maps and list elements), `$deleteFromPrimitiveList/<field>`,
  `$setElementOrder/<field>` (ignored) and `$retainKeys` (ignored) are understood. Lists without a
  declared strategy are replaced, as the real server does. Simplification: the merge keys are a
  fixed table covering Pod, Namespace and Event, not the full OpenAPI of every type.
- `json_patch`: RFC 6902 (`application/json-patch+json`): add, remove, replace, move, copy, test,
  with RFC 6901 pointers (`~0`, `~1`, `-` for the end of a list).

Errors raise `PatchError`; `bad_request` tells a malformed patch document (the server answers 400)
from one that does not apply to the object (422).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


class PatchError(ValueError):
    def __init__(self, message: str, *, bad_request: bool = False) -> None:
        super().__init__(message)
        self.bad_request = bad_request


# -- RFC 7386 ----------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 MergePatch(target, patch); neither argument is modified."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# -- strategic merge patch ---------------------------------------------------------------------

_MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): "",
    ("metadata", "ownerReferences"): "uid",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "hostAliases"): "ip",
    ("spec", "resourceClaims"): "name",
    ("spec", "schedulingGates"): "name",
    ("status", "conditions"): "type",
    ("status", "podIPs"): "ip",
    ("status", "hostIPs"): "ip",
    ("status", "resourceClaimStatuses"): "name",
}
for _containers in ("containers", "initContainers", "ephemeralContainers"):
    _MERGE_KEYS[("spec", _containers)] = "name"
    _MERGE_KEYS[("spec", _containers, "*", "env")] = "name"
    _MERGE_KEYS[("spec", _containers, "*", "ports")] = "containerPort"
    _MERGE_KEYS[("spec", _containers, "*", "volumeMounts")] = "mountPath"
    _MERGE_KEYS[("spec", _containers, "*", "volumeDevices")] = "devicePath"
    _MERGE_KEYS[("spec", _containers, "*", "resizePolicy")] = "resourceName"

STRATEGIC_MERGE_KEYS: Mapping[tuple[str, ...], str] = _MERGE_KEYS
"""Path (map keys, "*" for a list element) -> the merge key of the list there, or "" for a list
of primitives merged as a set. Paths are relative to the object root."""

_DIRECTIVE = "$patch"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_ORDER = "$setElementOrder/"
_RETAIN = "$retainKeys"


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Apply a strategic merge patch to an object; neither argument is modified."""
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object", bad_request=True)
    result = _smp_map(target if isinstance(target, dict) else {}, patch, ())
    return {} if result is None else result


def _smp_map(target: dict[str, Any], patch: dict[str, Any], path: tuple[str, ...]) -> Any:
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    if directive not in (None, "merge"):
        raise PatchError(f"Unknown patch type: {directive}", bad_request=True)
    result = copy.deepcopy(target)
    for key, value in patch.items():
        if key.startswith(_DELETE_PRIMITIVE):
            field = key[len(_DELETE_PRIMITIVE) :]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [item for item in result[field] if item not in value]
            continue
        if key.startswith("$"):
            continue  # $setElementOrder/..., $retainKeys, $patch
        if value is None:
            result.pop(key, None)
            continue
        sub = (*path, key)
        current = result.get(key)
        if isinstance(value, dict):
            merged = _smp_map(current if isinstance(current, dict) else {}, value, sub)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and sub in STRATEGIC_MERGE_KEYS:
            base = current if isinstance(current, list) else []
            result[key] = _smp_list(base, value, sub, STRATEGIC_MERGE_KEYS[sub])
        else:
            result[key] = copy.deepcopy(value)
    return result


def _smp_list(target: list[Any], patch: list[Any], path: tuple[str, ...], key: str) -> list[Any]:
    if not key:  # a set of primitives
        if any(isinstance(item, dict) and item.get(_DIRECTIVE) == "replace" for item in patch):
            return [item for item in patch if not isinstance(item, dict)]
        merged = list(target)
        merged.extend(item for item in patch if item not in merged)
        return merged
    if any(isinstance(item, dict) and item.get(_DIRECTIVE) == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if isinstance(i, dict) and _DIRECTIVE not in i]
    result = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {key}")
        index = next(
            (
                i
                for i, old in enumerate(result)
                if isinstance(old, dict) and old.get(key) == item[key]
            ),
            None,
        )
        if item.get(_DIRECTIVE) == "delete":
            if index is not None:
                del result[index]
            continue
        if index is None:
            merged = _smp_map({}, item, (*path, "*"))
            if merged is not None:
                result.append(merged)
        else:
            merged = _smp_map(result[index], item, (*path, "*"))
            if merged is None:
                del result[index]
            else:
                result[index] = merged
    return result


# -- RFC 6902 ----------------------------------------------------------------------------------


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str):
        raise PatchError("missing or invalid 'path' in a JSON patch operation")
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index: {token!r}")
    index = int(token)
    limit = len(container) if for_add else len(container) - 1
    if index > limit:
        raise PatchError(f"array index out of bounds: {index}")
    return index


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"path does not exist: /{'/'.join(tokens)}")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_add=False)]
        else:
            raise PatchError(f"path does not exist: /{'/'.join(tokens)}")
    return node


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path does not exist: /{'/'.join(tokens)}")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False)]
    raise PatchError(f"path does not exist: /{'/'.join(tokens)}")


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_add=True), value)
    else:
        raise PatchError(f"cannot add to a scalar at /{'/'.join(tokens)}")
    return doc


def _remove(doc: Any, tokens: list[str]) -> tuple[Any, Any]:
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"unable to remove nonexistent key: {last}: missing value")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, for_add=False))
    raise PatchError(f"path does not exist: /{'/'.join(tokens)}")


def json_patch(target: Any, operations: Any) -> Any:
    """Apply an RFC 6902 JSON patch; `target` is not modified."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a JSON array of operations", bad_request=True)
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise PatchError(f"invalid JSON patch operation: {op!r}", bad_request=True)
        kind = op["op"]
        tokens = _pointer(op.get("path"))
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"missing value in a {kind!r} operation")
        if kind == "add":
            doc = _add(doc, tokens, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc, _ = _remove(doc, tokens)
        elif kind == "replace":
            _get(doc, tokens)  # must exist
            if tokens:
                doc, _ = _remove(doc, tokens)
            doc = _add(doc, tokens, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from"))
            if kind == "move":
                if tokens[: len(source)] == source and tokens != source:
                    raise PatchError("cannot move a value into one of its children")
                doc, value = _remove(doc, source)
            else:
                value = copy.deepcopy(_get(doc, source))
            doc = _add(doc, tokens, value)
        elif kind == "test":
            if _get(doc, tokens) != op["value"]:
                raise PatchError(f"testing value /{'/'.join(tokens)} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}", bad_request=True)
    return doc
