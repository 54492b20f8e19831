"""Untrusted YAML and JSON text as documents of plain JSON values, with bounded cost.

Used by everything that reads manifests or settings: the directory feed, `netattach validate`
and the settings loader, so they agree on what a document is and none can be made to hang or
crash by nesting or YAML alias bombs.

PyYAML is imported on the first YAML text, not with this module: the thin plugin imports it on
every call and, with its manifests' parse cache warm, never reads YAML (~10 ms saved per call).
"""

from __future__ import annotations

import functools
import json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

    import yaml

# Kubernetes objects nest about a dozen levels (managedFields included).
MAX_DEPTH: Final = 64
# Values a file may hold once YAML aliases are expanded. Without aliases a file cannot come close
# (a value costs at least two bytes); with them, a few hundred bytes can stand for 10^9 values
# ("billion laughs") that whoever walks or serialises the object later would expand.
MAX_VALUES_PER_FILE: Final = 1_000_000
_TIMESTAMP_TAG: Final = "tag:yaml.org,2002:timestamp"


class DocumentsRefusedError(Exception):
    """Text that yields no documents; `document` is where reading stopped, 0 if unknown."""

    def __init__(self, message: str, document: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.document = document


@functools.cache
def json_compatible_loader() -> type[yaml.SafeLoader]:
    """`yaml.SafeLoader` without implicit timestamps.

    Kubernetes converts YAML to JSON, where `2024-01-01` stays the string it reads as; PyYAML
    would make it a `datetime.date`, which no JSON field can hold. An explicit `!!timestamp` tag
    still makes a date, which the JSON check refuses.

    The pure-Python loader on purpose: libyaml's `CSafeLoader` recurses in C and crashes the
    process (SIGSEGV) on a file of a few hundred thousand `[`, where this one raises
    `RecursionError`.
    """
    import yaml

    class JSONCompatibleLoader(yaml.SafeLoader):
        pass

    JSONCompatibleLoader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    return JSONCompatibleLoader


def parse_documents(data: bytes, *, is_json: bool) -> list[Any]:
    """Every document of `data` (YAML, or JSON when `is_json`), or `DocumentsRefusedError`."""
    documents: list[Any] = []
    if is_json:
        try:
            documents.append(json.loads(data))
        except json.JSONDecodeError as exc:
            raise DocumentsRefusedError(
                f"not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            ) from exc
        except RecursionError as exc:
            raise DocumentsRefusedError("nested too deeply to parse", 1) from exc
        except (ValueError, TypeError) as exc:
            raise DocumentsRefusedError(f"not valid JSON: {exc}", 1) from exc
    else:
        _load_yaml(data, documents)
    # Bound what the documents expand to *before* anything walks them value by value.
    budget = _Budget()
    for index, document in enumerate(documents, start=1):
        try:
            budget.count(document)
        except DocumentsRefusedError as exc:
            raise DocumentsRefusedError(exc.message, index) from None
    return documents


def _load_yaml(data: bytes, documents: list[Any]) -> None:
    """Append each YAML document of `data` to `documents`, or `DocumentsRefusedError`."""
    import yaml

    try:
        for document in yaml.load_all(data, Loader=json_compatible_loader()):
            documents.append(document)
    except yaml.MarkedYAMLError as exc:
        reason = f"not valid YAML{_at(exc.problem_mark)}: {exc.problem or 'invalid'}"
        if exc.context:
            reason += f" ({exc.context}{_at(exc.context_mark)})"
        raise DocumentsRefusedError(f"{reason}", len(documents) + 1) from exc
    except RecursionError as exc:
        raise DocumentsRefusedError("nested too deeply to parse", len(documents) + 1) from exc
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        # ReaderError (not UTF-8/16), out-of-range dates and ints past Python's digit limit.
        raise DocumentsRefusedError(f"not valid YAML: {exc}", len(documents) + 1) from exc


def _at(mark: yaml.Mark | None) -> str:
    return "" if mark is None else f" at line {mark.line + 1} column {mark.column + 1}"


class _Budget:
    """Counts the values a file's documents expand to, visiting each shared value once.

    PyYAML builds an alias as a second reference to the anchored object, so loading a bomb is
    cheap; expanding it is not. Sizes are memoised per object, which makes counting linear in the
    *unexpanded* size, and an object met again while still being counted is an alias to itself.
    """

    def __init__(self) -> None:
        self.total = 0
        self._sizes: dict[int, int] = {}

    def count(self, document: Any) -> None:
        self.total += self._size(document, 0, set())
        if self.total > MAX_VALUES_PER_FILE:
            raise DocumentsRefusedError(_too_many())

    def _size(self, value: Any, depth: int, active: set[int]) -> int:
        if not isinstance(value, dict | list):
            return 1
        key = id(value)
        if key in self._sizes:
            return self._sizes[key]
        if key in active:
            raise DocumentsRefusedError("a YAML alias refers to itself")
        if depth >= MAX_DEPTH:
            raise DocumentsRefusedError(f"nested deeper than {MAX_DEPTH} levels")
        active.add(key)
        size = 1
        for child in value.values() if isinstance(value, dict) else value:
            size += self._size(child, depth + 1, active)
            if self.total + size > MAX_VALUES_PER_FILE:
                raise DocumentsRefusedError(_too_many())
        active.discard(key)
        self._sizes[key] = size
        return size


def _too_many() -> str:
    return f"expands to more than {MAX_VALUES_PER_FILE} values (YAML aliases?)"
