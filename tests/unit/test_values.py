"""`values.NamedTuple` builds what `typing.NamedTuple` builds, only cheaper to create.

Each record shape below is declared twice, once on each base, and both are put through the same
operations: what one returns or raises, the other must too (the messages of errors may differ).
"""

import copy
import pickle
import typing
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach import values

BASES: dict[str, Any] = {"typing": typing.NamedTuple, "values": values.NamedTuple}


def shapes(base: Any) -> dict[str, Any]:
    """Record classes of every form the code base declares, derived from `base`."""

    class Plain(base):  # type: ignore[misc]
        a: int
        b: str

    class Defaults(base):  # type: ignore[misc]
        """A documented record."""

        name: str
        size: int = 0
        tags: tuple[str, ...] = ()

        LIMIT = 10  # a class constant, not a field

        @property
        def big(self) -> bool:
            return self.size > self.LIMIT

        def grown(self, by: int) -> "Defaults":
            return self._replace(size=self.size + by)  # type: ignore[no-any-return]

        @classmethod
        def empty(cls) -> "Defaults":
            return cls("")

    class Empty(base):  # type: ignore[misc]
        pass

    return {"Plain": Plain, "Defaults": Defaults, "Empty": Empty}


TYPING = shapes(typing.NamedTuple)
OURS = shapes(values.NamedTuple)


def outcome(action: Callable[[], object]) -> tuple[str, object]:
    """What `action` gives: ("ok", a comparable view of the value) or ("raises", the type)."""
    try:
        value = action()
    except Exception as exc:  # the point is to compare any exception
        return ("raises", type(exc))
    if isinstance(value, tuple):
        return ("ok", (type(value).__name__, tuple(value), repr(value)))
    return ("ok", value)


def both(shape: str, action: Callable[[Any], object]) -> None:
    expected = outcome(lambda: action(TYPING[shape]))
    got = outcome(lambda: action(OURS[shape]))
    assert got == expected


values_st = st.one_of(st.integers(), st.text(max_size=5), st.none(), st.tuples(st.text(max_size=2)))
kwargs_st = st.dictionaries(st.sampled_from(["name", "size", "tags", "other", "a", "b"]), values_st)


@given(args=st.lists(values_st, max_size=4), kwargs=kwargs_st)
def test_construction_takes_and_refuses_the_same_arguments(
    args: list[object], kwargs: dict[str, object]
) -> None:
    for shape in ("Plain", "Defaults", "Empty"):
        both(shape, lambda cls: cls(*args, **kwargs))


@given(args=st.lists(values_st, max_size=4))
def test_make_takes_exactly_as_many_values_as_fields(args: list[object]) -> None:
    for shape in ("Plain", "Defaults", "Empty"):
        both(shape, lambda cls: cls._make(args))


@given(changes=kwargs_st)
def test_replace_changes_fields_and_refuses_unknown_ones(changes: dict[str, object]) -> None:
    both("Defaults", lambda cls: cls("n", 3)._replace(**changes))
    both("Plain", lambda cls: cls(1, "x")._replace(**changes))


@pytest.mark.parametrize("shape", ["Plain", "Defaults", "Empty"])
def test_the_class_describes_itself_the_same_way(shape: str) -> None:
    ours, theirs = OURS[shape], TYPING[shape]
    assert ours._fields == theirs._fields
    assert ours._field_defaults == theirs._field_defaults
    assert ours.__match_args__ == theirs.__match_args__
    assert ours.__name__ == theirs.__name__
    assert ours.__module__ == theirs.__module__
    assert issubclass(ours, tuple)
    assert not hasattr(ours(*(["x"] * len(theirs._fields))), "__dict__")


def test_docstring_methods_properties_and_constants_are_kept() -> None:
    for shapes_of in (TYPING, OURS):
        cls = shapes_of["Defaults"]
        record = cls("n", 11)
        assert cls.__doc__ == "A documented record."
        assert record.big is True
        assert record.grown(2) == cls("n", 13)
        assert cls.empty() == cls("", 0, ())
        assert cls.LIMIT == 10
        assert "LIMIT" not in cls._fields
    assert OURS["Plain"].__doc__ == TYPING["Plain"].__doc__ == "Plain(a, b)"


def test_a_record_is_a_tuple_in_every_way_that_matters() -> None:
    ours, theirs = OURS["Defaults"]("n", 2, ("t",)), TYPING["Defaults"]("n", 2, ("t",))
    assert ours == theirs == ("n", 2, ("t",))
    assert hash(ours) == hash(theirs)
    assert repr(ours) == repr(theirs) == "Defaults(name='n', size=2, tags=('t',))"
    assert ours._asdict() == theirs._asdict() == {"name": "n", "size": 2, "tags": ("t",)}
    name, size, tags = ours
    assert (name, size, tags) == ("n", 2, ("t",))
    assert (ours.name, ours.size, ours.tags) == ("n", 2, ("t",))
    assert ours[1] == 2
    assert ours[:2] == ("n", 2)
    defaults = OURS["Defaults"]
    match ours:
        case defaults(name, size):  # positional patterns use __match_args__
            assert (name, size) == ("n", 2)
        case _:
            pytest.fail("the record did not match its own class")


def test_fields_cannot_be_assigned() -> None:
    for cls in (OURS["Plain"], TYPING["Plain"]):
        record = cls(1, "x")
        with pytest.raises(AttributeError):
            record.a = 2
        with pytest.raises(AttributeError):
            record.c = 2  # no __dict__ to take it


def test_copies_and_pickles_are_equal_records_of_the_same_class() -> None:
    record = OURS["Defaults"]("n", 2, ("t",))
    for clone in (copy.copy(record), copy.deepcopy(record)):
        assert clone == record
        assert type(clone) is type(record)
    # Pickling finds a class by its module and name: a module-level record.
    unpickled = pickle.loads(pickle.dumps(_Pickled(1, "x")))
    assert unpickled == _Pickled(1, "x")
    assert type(unpickled) is _Pickled


class _Pickled(values.NamedTuple):
    a: int
    b: str


def test_bad_declarations_are_refused_as_typing_refuses_them() -> None:
    def non_default_after_default(base: Any) -> type:
        class Bad(base):  # type: ignore[misc]
            a: int = 0
            b: int

        return Bad

    def underscore_field(base: Any) -> type:
        class Bad(base):  # type: ignore[misc]
            _a: int

        return Bad

    def overwrites_machinery(base: Any) -> type:
        class Bad(base):  # type: ignore[misc]
            a: int

            def _replace(self) -> None:
                return None

        return Bad

    for declare in (non_default_after_default, underscore_field, overwrites_machinery):
        expected = outcome(lambda declare=declare: declare(typing.NamedTuple))  # type: ignore[misc]
        assert expected[0] == "raises"
        assert outcome(lambda declare=declare: declare(values.NamedTuple)) == expected  # type: ignore[misc]


def test_the_error_names_the_record_and_the_argument() -> None:
    with pytest.raises(TypeError, match=r"Plain\(\) missing 1 required argument\(s\): 'b'"):
        OURS["Plain"](a=1)
    with pytest.raises(TypeError, match=r"Plain\(\) got an unexpected keyword argument 'c'"):
        OURS["Plain"](1, "x", c=3)
    with pytest.raises(TypeError, match=r"Plain\(\) got multiple values for argument 'a'"):
        OURS["Plain"](1, a=1)
    with pytest.raises(TypeError, match=r"Plain\(\) takes 2 arguments but 3 were given"):
        OURS["Plain"](1, 2, 3)


def test_no_code_is_compiled_to_make_a_record_class() -> None:
    import builtins

    seen: list[str] = []
    real_eval, real_exec = builtins.eval, builtins.exec

    def spy_eval(*args: Any, **kwargs: Any) -> Any:
        seen.append("eval")
        return real_eval(*args, **kwargs)

    def spy_exec(*args: Any, **kwargs: Any) -> Any:
        seen.append("exec")
        return real_exec(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(builtins, "eval", spy_eval)
        patch.setattr(builtins, "exec", spy_exec)
        shapes(values.NamedTuple)
        assert seen == []
        shapes(typing.NamedTuple)  # the check can fail: typing's does compile
        assert "eval" in seen or "exec" in seen
