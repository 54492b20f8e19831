"""`Frozen`: the base of the few immutable value classes the thin plugin creates by hand.

The thin plugin imports its whole orchestrator on every exec. A frozen slotted dataclass costs
~0.5 ms to create (it compiles each generated method, and `slots=True` builds the class twice)
and `import dataclasses` brings `inspect`, `ast`, `dis` and `tokenize` (~7 ms). Plain records on
that path are NamedTuples; a class with an invariant, a computed default or a subclass derives
from `Frozen` instead and lists its fields in `_FIELDS`. What a frozen dataclass gives, this does
too: keyword `__init__` (written by the subclass), no assignment after it, equality with the same
class only, hashing, a `Name(field=value, ...)` repr, and copy/pickle.

Standard library only, and nothing imported: the CNI vocabulary builds on it.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, Self


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
