"""`json.dumps` and `json.loads`, for the shim, without importing `json`.

Importing `json` costs the shim ~6 ms of its ~20 ms start-up, almost all of it `re` (which
`json.decoder` and `json.scanner` compile patterns with at import). The parsing and printing
themselves are CPython's C accelerator `_json`, which `json` uses too and which imports nothing:
this module drives it directly. Same output as `json.dumps(value)` (ASCII, `", "` and `": "`),
same values as `json.loads(text)` for the JSON the shim exchanges; NaN and Infinity are refused
both ways. An interpreter without `_json` gets the `json` module, as the slow path.

Errors: `ValueError` (a `json.JSONDecodeError` when the text is not JSON, which imports `json`
then — the error path may be slow) and `RecursionError` for absurd nesting, as `json` raises.
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


try:
    import _json
except ImportError:  # PyPy and the like: the json module does the same job
    import json

    def dumps(value: object) -> str:
        return json.dumps(value, allow_nan=False)

    def loads(text: str) -> object:
        return json.loads(text, parse_constant=_refuse_constant)

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
        if isinstance(value, str):  # the C encoder only takes containers and scalars other than str
            return str(_json.encode_basestring_ascii(value))
        return "".join(_encode(value, 0))

    def loads(text: str) -> object:
        """`json.loads(text)` for a `str`, NaN and Infinity refused."""
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = _scan(text, start)
        except StopIteration as stop:
            raise _decode_error("Expecting value", text, stop.value) from None
        except SystemError:
            # Up to Python 3.11, `_json` raises its errors as `json.decoder.JSONDecodeError`
            # looked up in `sys.modules` without importing it, and fails thus when it is absent.
            import json.decoder  # noqa: F401 - only on the error path: see the module's docstring

            value, end = _scan(text, start)  # raises that error now
        end += len(text[end:]) - len(text[end:].lstrip(_WHITESPACE))
        if end != len(text):
            raise _decode_error("Extra data", text, end)
        return value


def _decode_error(message: str, text: str, position: int) -> ValueError:
    import json  # only on the error path: see the module's docstring

    return json.JSONDecodeError(message, text, position)
