"""What the API server does with a custom resource and its CRD's structural schema.

In this order, as the apiextensions server does: unknown fields are pruned (unless
`x-kubernetes-preserve-unknown-fields`), `default`s are filled in, then the object is validated
(`type`, `enum`, `required`, `items`, `additionalProperties`, `x-kubernetes-int-or-string`,
`nullable`). `apiVersion`, `kind` and `metadata` at the root are left to the caller. Validation
answers a list of `Cause`s (the server's 422 `details.causes`). Simplification: formats, patterns,
lengths, `minimum`/`maximum`, CEL rules and `oneOf`/`allOf`/`not` are not checked.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from tests.kube.api import Obj


@dataclasses.dataclass(frozen=True)
class Cause:
    reason: str  # FieldValueInvalid, FieldValueRequired, FieldValueNotSupported
    field: str
    message: str

    def as_json(self) -> Obj:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def text(self) -> str:
        return f"{self.field}: {self.message}"


_ROOT_META = ("apiVersion", "kind", "metadata")


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _preserves(schema: Obj) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))


def prune_and_default(obj: Obj, schema: Obj) -> Obj:
    """A copy of `obj` with unknown fields pruned and defaults applied (root metadata kept)."""
    result = copy.deepcopy(obj)
    props = schema.get("properties", {})
    for key in list(result):
        if key in _ROOT_META:
            continue
        if key not in props:
            if not _preserves(schema):
                del result[key]
            continue
        result[key] = _walk(result[key], props[key])
        if result[key] is _DROP:
            del result[key]
    _defaults(result, schema, skip=_ROOT_META)
    return result


_DROP: Any = object()


def _walk(value: Any, schema: Obj) -> Any:
    if value is None and "default" in schema and not schema.get("nullable"):
        return _DROP  # null where a default exists is pruned, then defaulted by the parent
    if isinstance(value, dict):
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        if props is not None:
            for key in list(value):
                if key in props:
                    value[key] = _walk(value[key], props[key])
                    if value[key] is _DROP:
                        del value[key]
                elif not _preserves(schema):
                    del value[key]
            _defaults(value, schema)
        elif isinstance(additional, dict):
            for key in list(value):
                value[key] = _walk(value[key], additional)
        elif not _preserves(schema) and schema.get("type") == "object" and additional is None:
            value.clear()
        return value
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_walk(item, schema["items"]) for item in value]
    return value


def _defaults(value: Obj, schema: Obj, skip: tuple[str, ...] = ()) -> None:
    for key, sub in schema.get("properties", {}).items():
        if key not in skip and key not in value and "default" in sub:
            value[key] = copy.deepcopy(sub["default"])


def validate(obj: Obj, schema: Obj) -> list[Cause]:
    """The validation errors of `obj` against a structural schema (root metadata skipped)."""
    causes: list[Cause] = []
    props = schema.get("properties", {})
    for key in schema.get("required", []):
        if key not in obj and key not in _ROOT_META:
            causes.append(Cause("FieldValueRequired", key, "Required value"))
    for key, value in obj.items():
        if key in _ROOT_META or key not in props:
            continue
        _check(value, props[key], key, causes)
    return causes


def _quote(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _check(value: Any, schema: Obj, path: str, causes: list[Cause]) -> None:
    expected = schema.get("type")
    actual = _type_of(value)
    if value is None and schema.get("nullable"):
        return
    if schema.get("x-kubernetes-int-or-string"):
        if actual not in ("integer", "string"):
            causes.append(
                Cause(
                    "FieldValueInvalid",
                    path,
                    f'Invalid value: "{actual}": {path} in body must be of type '
                    f'integer,string: "{actual}"',
                )
            )
        return
    if expected is not None:
        ok = actual == expected or (expected == "number" and actual == "integer")
        if not ok:
            causes.append(
                Cause(
                    "FieldValueInvalid",
                    path,
                    f'Invalid value: "{actual}": {path} in body must be of type '
                    f'{expected}: "{actual}"',
                )
            )
            return
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_quote(v) for v in schema["enum"])
        causes.append(
            Cause(
                "FieldValueNotSupported",
                path,
                f"Unsupported value: {_quote(value)}: supported values: {supported}",
            )
        )
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                causes.append(Cause("FieldValueRequired", f"{path}.{key}", "Required value"))
        props = schema.get("properties", {})
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            if key in props:
                _check(item, props[key], f"{path}.{key}", causes)
            elif isinstance(additional, dict):
                _check(item, additional, f"{path}.{key}", causes)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _check(item, schema["items"], f"{path}[{index}]", causes)
