"""One manifest document checked as the API server would have checked it, for what netattach
reads: kind and apiVersion, DNS-1123 names (a pod's a subdomain), string labels and annotations,
a NAD's `spec.config` a string. The directory feed's (`files`): a bad document is reported as a
problem (a message), never raised.

On the thin plugin's path: `uuid` is imported only for a policy without a UID.
"""

from __future__ import annotations

import math

from netattach import names
from netattach.cluster import model
from netattach.cni import errors

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, Final

# Patterns as text: `re` compiles each on first use and caches it, so a start of the thin
# plugin compiles only those its call needs.
_DEFAULT_NAMESPACE: Final = "default"
_UID_NAMESPACE: Final = (
    "6f1c1d0e-3b53-4b8e-9a57-2f2a1de0c0a1"  # a uuid5 namespace: netattach manifests
)
_CLUSTER_SCOPED: Final = frozenset({model.NAMESPACE})
_LIST_KINDS: Final = {"List": None} | {f"{kind}List": kind for kind in model.API_VERSIONS}


class _NotJSONError(Exception):
    pass


# -- checking one document ------------------------------------------------------------------------


def objects_of(document: Any) -> Iterator[model.KubeObject | str]:
    """The objects of our kinds in a document (a `List` gives its items), or problems (str)."""
    try:
        raw = _plain(document, "")
    except _NotJSONError as exc:
        yield str(exc)
        return
    if not isinstance(raw, dict):
        yield f"not an object but {_json_type(raw)}"
        return
    kind = raw.get("kind")
    if isinstance(kind, str) and kind in _LIST_KINDS:
        yield from _list_items(raw, kind)
        return
    found = _check_object(raw)
    if found is not None:
        yield found


def _list_items(raw: dict[str, Any], list_kind: str) -> Iterator[model.KubeObject | str]:
    # `kubectl get -o yaml` prints `kind: List`; the API's own lists are `<Kind>List`, whose
    # items carry no kind or apiVersion of their own.
    item_kind = _LIST_KINDS[list_kind]
    items = raw.get("items")
    if items is None:
        return
    if not isinstance(items, list):
        yield f"{list_kind} items is {_json_type(items)}, not a list"
        return
    for index, item in enumerate(items):
        where = f"items[{index}]"
        if not isinstance(item, dict):
            yield f"{where}: not an object but {_json_type(item)}"
            continue
        if item_kind is not None:
            item.setdefault("kind", item_kind)
            if isinstance(raw.get("apiVersion"), str):
                item.setdefault("apiVersion", raw["apiVersion"])
        if item.get("kind") in _LIST_KINDS:
            yield f"{where}: a {item['kind']} inside a {list_kind}"
            continue
        found = _check_object(item)
        if isinstance(found, str):
            yield f"{where}: {found}"
        elif found is not None:
            yield found


def _check_object(raw: dict[str, Any]) -> model.KubeObject | str | None:
    """The object when it is one of our kinds and well formed; a problem; None for other kinds."""
    kind = raw.get("kind")
    if kind is None:
        return "no kind"
    if not isinstance(kind, str):
        return f"kind is {_json_type(kind)}, not a string"
    if kind not in model.API_VERSIONS:
        return None  # a Deployment, a ConfigMap: nothing netattach reads
    problems: list[str] = []
    want = model.API_VERSIONS[kind]
    api_version = raw.get("apiVersion")
    if api_version is None:
        problems.append(f"no apiVersion (expected {want!r})")
    elif api_version != want:
        problems.append(f"apiVersion {api_version!r}, expected {want!r}")
    metadata = raw.get("metadata")
    if not isinstance(metadata, dict):
        problems.append("no metadata" if metadata is None else "metadata is not an object")
        return _problem_text(raw, problems)
    name = metadata.get("name")
    if name is None:
        problems.append("no metadata.name")
    else:
        problems += _label_problems("metadata.name", name, subdomain=kind == model.POD)
    if kind in _CLUSTER_SCOPED:
        # A namespace on a cluster-scoped object means nothing; the API server drops it too.
        metadata.pop("namespace", None)
    else:
        if metadata.get("namespace") is None:
            metadata["namespace"] = _DEFAULT_NAMESPACE  # as kubectl does for a namespaced kind
        problems += _label_problems("metadata.namespace", metadata["namespace"])
    uid = metadata.get("uid")
    if uid is not None and (not isinstance(uid, str) or not uid):
        problems.append("metadata.uid is not a non-empty string")
    for field in ("labels", "annotations"):
        problems += _string_map_problems(f"metadata.{field}", metadata, field)
    for field in ("spec", "status"):
        if field in raw and raw[field] is None:
            del raw[field]  # `spec:` with nothing after it
        elif field in raw and not isinstance(raw[field], dict):
            problems.append(f"{field} is {_json_type(raw[field])}, not an object")
    if kind == model.NAD and isinstance(raw.get("spec"), dict):
        config = raw["spec"].get("config")
        # NPWG standard §3.1: config is the delegate's JSON as a string, not an embedded object.
        if config is not None and not isinstance(config, str):
            problems.append(f"spec.config is {_json_type(config)}, not a string of JSON")
    if problems:
        return _problem_text(raw, problems)
    if kind == model.POLICY and uid is None:
        # Rules and sets carry their policy's UID (POL-CRD): one that no API server assigned
        # is derived from the policy's name, so it is the same on every reload.
        import uuid  # here: only such a policy needs it, not every start of the thin plugin

        namespace = uuid.UUID(_UID_NAMESPACE)
        metadata["uid"] = str(uuid.uuid5(namespace, f"{metadata['namespace']}/{name}"))
    obj: model.KubeObject = raw  # type: ignore[assignment]  # checked above, field by field
    return obj


def _problem_text(raw: dict[str, Any], problems: list[str]) -> str:
    return f"{describe(raw)}: {'; '.join(problems)}"


def describe(raw: Any) -> str:
    kind = raw.get("kind", "?")
    metadata = raw.get("metadata")
    if not isinstance(metadata, dict):
        return str(kind)
    name = metadata.get("name")
    namespace = metadata.get("namespace")
    if not isinstance(name, str):
        return str(kind)
    if isinstance(namespace, str) and namespace:
        return f"{kind} {namespace}/{name}"
    return f"{kind} {name}"


def _label_problems(field: str, value: Any, *, subdomain: bool = False) -> list[str]:
    if not isinstance(value, str):
        return [f"{field} is {_json_type(value)}, not a string"]
    problem = subdomain_problem(value) if subdomain else _label_problem(value)
    return [] if problem is None else [f"{field} {value!r} {problem}"]


def _label_problem(value: str) -> str | None:
    if not value:
        return "is empty"
    if len(value) > names.LABEL_MAX:
        return f"is longer than {names.LABEL_MAX} characters"
    if not names.is_label(value):
        return "is not a DNS-1123 label (lower-case letters, digits and '-')"
    return None


def subdomain_problem(value: str) -> str | None:
    if not value:
        return "is empty"
    if len(value) > names.SUBDOMAIN_MAX:
        return f"is longer than {names.SUBDOMAIN_MAX} characters"
    if not names.is_subdomain(value):
        return "is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.')"
    return None


def _string_map_problems(field: str, metadata: dict[str, Any], key: str) -> list[str]:
    value = metadata.get(key)
    if value is None:
        metadata.pop(key, None)
        return []
    if not isinstance(value, dict):
        return [f"{field} is {_json_type(value)}, not an object"]
    return [
        f"{field}[{name!r}] is {_json_type(item)}, not a string (quote it)"
        for name, item in value.items()
        if not isinstance(item, str)
    ]


def check_label(what: str, value: str) -> None:
    problem = _label_problem(value) if isinstance(value, str) else "is not a string"
    if problem is not None:
        raise errors.InvalidEnvironmentError(f"invalid {what} {value!r}", problem)


# -- plain JSON values ----------------------------------------------------------------------------


def _plain(value: Any, where: str) -> Any:
    """A fresh copy of `value` holding JSON values only: shared (aliased) parts are unshared, so
    one object's later edits never show in another. Only called once `_Budget` bounded the size.
    """
    if isinstance(value, dict):
        copy: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotJSONError(f"{where or 'document'}: key {key!r} is not a string")
            copy[key] = _plain(item, f"{where}.{key}" if where else key)
        return copy
    if isinstance(value, list):
        return [_plain(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise _NotJSONError(f"{where or 'document'}: {value} is not a JSON number")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise _NotJSONError(
        f"{where or 'document'}: a {type(value).__name__} is not a JSON value (quote it)"
    )


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"
