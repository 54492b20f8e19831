"""The immutable value classes of the thin plugin's path: `NamedTuple` and `Frozen`.

The thin plugin imports its whole orchestrator on every exec, so what a class costs to *create*
is paid on every pod. A frozen slotted dataclass costs ~0.5 ms (it compiles each generated
method, and `slots=True` builds the class twice), and `import dataclasses` brings `inspect`,
`ast`, `dis` and `tokenize` (~7 ms). `typing.NamedTuple` costs ~70 us a class, most of it
compiling a `__new__` from source; with 46 of them on the path that was ~3 ms of every call.

- `NamedTuple` is, to the type checker, `typing.NamedTuple` itself. At run time it builds the
  same kind of class (a slotted `tuple` subclass with `_fields`, `_field_defaults`, `_make`,
  `_replace`, `_asdict`, a `Name(field=value, ...)` repr, copy/pickle and `match` support) with
  one shared `__new__` and nothing compiled: ~6 us a class. Plain records use it.
- `Frozen` is the base of a class with an invariant, a computed default or a subclass: it lists
  its fields in `_FIELDS`. What a frozen dataclass gives, it does too: keyword `__init__` (written
  by the subclass), no assignment after it, equality with the same class only, hashing, a
  `Name(field=value, ...)` repr, and copy/pickle.

Standard library only, and nothing imported that the plugin would not import anyway: the CNI
vocabulary builds on it. tests/unit/test_values.py holds `NamedTuple` to `typing.NamedTuple`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import itemgetter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, NamedTuple, Self

__all__ = ["Frozen", "NamedTuple"]

_MISSING: Any = object()
# What a record's class body may not define: the names the record's machinery provides.
_RESERVED = frozenset(
    ("__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults",
     "_make", "_replace", "_asdict", "__match_args__")
)  # fmt: skip


try:  # what collections.namedtuple gives each field: a C descriptor, twice a property's speed
    from _collections import _tuplegetter  # type: ignore[import-not-found]
except ImportError:  # another implementation of Python
    _tuplegetter = None


def _getter(index: int, doc: str) -> Any:
    """The accessor of field `index`."""
    if _tuplegetter is None:
        return property(itemgetter(index), doc=doc)
    return _tuplegetter(index, doc)


if TYPE_CHECKING:
    _Tuple = tuple[Any, ...]
else:
    _Tuple = tuple  # `Any` is the type checker's only


class _Record(_Tuple):
    """What every record class shares; each gets its own `__new__` from `_constructor`."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _field_defaults: ClassVar[dict[str, Any]] = {}

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> Self:
        made = tuple.__new__(cls, iterable)
        if len(made) != len(cls._fields):
            raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(made)}")
        return made

    def _replace(self, /, **changes: Any) -> Self:
        made = type(self)(*map(changes.pop, self._fields, self))
        if changes:
            raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        return made

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))

    def __repr__(self) -> str:
        shown = ", ".join(f"{f}={v!r}" for f, v in zip(self._fields, self, strict=True))
        return f"{type(self).__name__}({shown})"

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)


def _constructor(
    name: str, fields: tuple[str, ...], defaults: dict[str, Any]
) -> Callable[..., Any]:
    """The `__new__` of one record class: positional, keyword and default arguments, and the
    errors a generated `__new__` raises (TypeError naming the class and the argument)."""
    count = len(fields)
    position = {field: index for index, field in enumerate(fields)}
    template = [_MISSING] * (count - len(defaults)) + list(defaults.values())

    def new(cls: type[_Record], *args: Any, **kwargs: Any) -> _Record:
        if not kwargs and len(args) == count:
            return tuple.__new__(cls, args)
        if len(args) > count:
            raise TypeError(f"{name}() takes {count} arguments but {len(args)} were given")
        values = template.copy()
        values[: len(args)] = args
        for key, value in kwargs.items():
            index = position.get(key)
            if index is None:
                raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
            if index < len(args):
                raise TypeError(f"{name}() got multiple values for argument {key!r}")
            values[index] = value
        missing = [fields[i] for i, value in enumerate(values) if value is _MISSING]
        if missing:
            shown = ", ".join(repr(field) for field in missing)
            raise TypeError(f"{name}() missing {len(missing)} required argument(s): {shown}")
        return tuple.__new__(cls, values)

    return new


class _RecordMeta(type):
    """Builds a record class from a class body, as `typing.NamedTuple` does."""

    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
        if namespace.get("_root", False):
            return super().__new__(mcls, name, bases, namespace)
        if bases != (_RecordBase,):
            raise TypeError(f"{name}: a NamedTuple record derives from NamedTuple alone")
        fields = tuple(namespace.get("__annotations__", {}))
        defaults: dict[str, Any] = {}
        for field in fields:
            if field.startswith("_"):
                raise ValueError(f"{name}: field names cannot start with '_': {field!r}")
            if field in namespace:
                defaults[field] = namespace[field]
            elif defaults:
                first = next(iter(defaults))
                raise TypeError(
                    f"{name}: non-default field {field!r} cannot follow default field {first!r}"
                )
        body = {key: value for key, value in namespace.items() if key not in defaults}
        clashes = sorted(_RESERVED.intersection(body))
        if clashes:
            raise AttributeError(f"{name}: cannot overwrite NamedTuple attribute {clashes[0]}")
        body.setdefault("__doc__", f"{name}({', '.join(fields)})")
        body["__slots__"] = ()
        body["_fields"] = fields
        body["_field_defaults"] = defaults
        body["__match_args__"] = fields
        body["__new__"] = _constructor(name, fields, defaults)
        for index, field in enumerate(fields):
            body[field] = _getter(index, f"Alias for field number {index}")
        return type(name, (_Record,), body)


class _RecordBase(metaclass=_RecordMeta):
    """Derive a record from this (as `NamedTuple`), as from `typing.NamedTuple`."""

    _root = True


if not TYPE_CHECKING:
    NamedTuple = _RecordBase


def _rebuild(cls: type[Frozen], values: dict[str, Any]) -> Frozen:
    return cls(**values)


class Frozen:
    """An immutable value with `__slots__` named in `_FIELDS`, set once by `_init`."""

    __slots__ = ()
    _FIELDS: ClassVar[tuple[str, ...]] = ()

    def _init(self, **values: object) -> None:
        """Set every field; a subclass's `__init__` calls this with each of `_FIELDS`."""
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes` applied, through `__init__` (so its checks run again)."""
        values = {name: getattr(self, name) for name in self._FIELDS}
        values.update(changes)
        return type(self)(**values)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of immutable {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of immutable {type(self).__name__}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Frozen)  # for the type checker: type(other) is type(self)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS)
        return f"{type(self).__name__}({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        # The default reduce restores slots with setattr, which this class refuses.
        return (_rebuild, (type(self), {name: getattr(self, name) for name in self._FIELDS}))
