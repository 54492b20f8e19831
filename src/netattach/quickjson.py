"""`json.dumps` and `json.loads`, for the shim, without importing `json`.

Importing `json` costs the shim ~6 ms of its ~20 ms start-up, almost all of it `re` (which
`json.decoder` and `json.scanner` compile patterns with at import). The parsing and printing
themselves are CPython's C accelerator `_json`, which `json` uses too and which imports nothing:
this module drives it directly. Same output as `json.dumps(value)` (ASCII, `", "` and `": "`),
same values as `json.loads(text)` for the JSON the shim exchanges; NaN and Infinity are refused
both ways. An interpreter without `_json` gets the `json` module, as the slow path.

Errors: `ValueError` (`json.JSONDecodeError` when the text is not JSON: such text is handed to
`json` itself, so the error path imports it and is slow) and `RecursionError` for absurd
nesting, as `json` raises.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# JSON's four whitespace characters (RFC 8259 §2); `str.strip()` would take more.
_WHITESPACE = " \t\n\r"


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value")


def _refuse_unencodable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _DecoderSettings:
    """What `_json.make_scanner` reads of a `json.JSONDecoder`: its defaults, constants refused."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_refuse_constant)


def _slow_loads(text: str) -> object:
    import json  # the slow path only: see the module's docstring

    return json.loads(text, parse_constant=_refuse_constant)


def _slow_dumps(value: object) -> str:
    import json

    return json.dumps(value, allow_nan=False)


try:
    import _json
except ImportError:  # PyPy and the like: the json module does the same job
    loads, dumps = _slow_loads, _slow_dumps
else:
    # typeshed types the argument as a JSONDecoder; the scanner only reads the six attributes.
    _scan: Callable[[str, int], tuple[object, int]] = _json.make_scanner(
        _DecoderSettings()  # type: ignore[arg-type]
    )
    # (markers, default, encoder, indent, key_separator, item_separator, sort_keys, skipkeys,
    # allow_nan), as `json.JSONEncoder.iterencode` calls it; markers=None skips the cycle check,
    # which JSON decoded from text cannot need.
    _encode: Callable[[object, int], list[str]] = _json.make_encoder(
        None,
        _refuse_unencodable,
        _json.encode_basestring_ascii,
        None,
        ": ",
        ", ",
        False,
        False,
        False,
    )

    def dumps(value: object) -> str:
        """`json.dumps(value, allow_nan=False)`."""
        return "".join(_encode(value, 0))

    def loads(text: str) -> object:
        """`json.loads(text)` for a `str`, NaN and Infinity refused."""
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = _scan(text, start)
        except (StopIteration, SystemError):
            # Not JSON: `json` says why, in its own words. (SystemError: up to Python 3.11
            # `_json` raises its errors as `json.decoder.JSONDecodeError` only once something
            # else has imported that.)
            return _slow_loads(text)
        if text[end:].strip(_WHITESPACE):
            return _slow_loads(text)  # "Extra data"
        return value
