"""`netattach.quickjson` is `json.dumps`/`json.loads` for what the shim exchanges, without `json`.

Proved against the `json` module itself: the same text out for every JSON value, the same value
back for every text `json` accepts, and an error for every text it refuses; and the slow path
(an interpreter without `_json`) the same again.
"""

import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netattach import quickjson
from tests.shim.conftest import run_isolated

# Any text, lone surrogates included: the shim carries undecodable config bytes that way.
TEXT = st.text(st.characters(codec=None, exclude_categories=()))
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.none() | st.booleans() | st.integers() | FLOATS | TEXT
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=25,
)


@given(VALUES)
@settings(max_examples=400)
def test_dumps_writes_what_json_dumps_writes(value: object) -> None:
    assert quickjson.dumps(value) == json.dumps(value)


@given(VALUES)
@settings(max_examples=400)
def test_loads_reads_back_what_json_wrote(value: object) -> None:
    text = json.dumps(value)

    assert quickjson.loads(text) == json.loads(text)


@given(st.text(alphabet=' \t\n\r{}[]",:0123456789.eE+-truefalsnl\\u', max_size=30))
@settings(max_examples=600)
def test_loads_accepts_and_refuses_what_json_does(text: str) -> None:
    try:
        expected = json.loads(text)
    except ValueError as refused:
        with pytest.raises(ValueError, match=re.escape(refused.args[0].split(":")[0])):
            quickjson.loads(text)
        return
    assert quickjson.loads(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Expecting value: line 1 column 1 (char 0)"),
        ("  \n", "Expecting value: line 2 column 1 (char 3)"),
        ('{"a": 1} x', "Extra data: line 1 column 10 (char 9)"),
        ('{"a": 1,}', "Expecting property name enclosed in double quotes"),
        ('"abc', "Unterminated string starting at: line 1 column 1 (char 0)"),
    ],
)
def test_errors_say_what_json_says(text: str, message: str) -> None:
    with pytest.raises(json.JSONDecodeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        quickjson.loads(text)


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}'])
def test_constants_json_would_accept_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a JSON value"):
        quickjson.loads(text)


@pytest.mark.parametrize("value", [math.nan, [math.inf], {"a": -math.inf}])
def test_out_of_range_floats_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        quickjson.dumps(value)


def test_a_value_json_cannot_write_is_refused_by_its_type_name() -> None:
    with pytest.raises(TypeError, match="Object of type bytes is not JSON serializable"):
        quickjson.dumps({"a": b"raw"})


def test_the_first_error_of_a_fresh_interpreter_is_json_s_own() -> None:
    # Before 3.12 `_json` finds JSONDecodeError only if `json.decoder` was imported already.
    done = run_isolated("from netattach import quickjson; quickjson.loads('{not json')")

    assert done.stderr.splitlines()[-1] == (
        "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)"
    )


def test_deep_nesting_is_a_recursion_error_as_in_json() -> None:
    with pytest.raises(RecursionError):
        quickjson.loads("[" * 100_000)


def test_without_the_accelerator_the_json_module_gives_the_same_answers() -> None:
    # `sys.modules["_json"] = None` makes `import _json` fail, as on an interpreter without it.
    done = run_isolated(
        "sys.modules['_json'] = None; from netattach import quickjson; "
        "value = {'a': [1, 2.5, None, True, 'x\\udcff']}; "
        "text = quickjson.dumps(value); assert quickjson.loads(text) == value, text; "
        "print(text); quickjson.loads('NaN')"
    )

    assert done.stdout == '{"a": [1, 2.5, null, true, "x\\udcff"]}\n'
    assert "ValueError: NaN is not a JSON value" in done.stderr
