"""The checks every settings group shares: one key each, every problem collected.

Each check takes the key's value, its full key path (`readiness.timeout`, or under the thin
plugin's inline settings `settings.readiness.timeout`) and the list of problems; it returns the
value, or None for a key that is absent or null (the caller applies the default) and for a bad
value (after appending the problem as `key.path: reason, got value`). Nothing here raises: the
whole mapping is checked and its problems raised together (`settings.settings`). A name is
checked by the DNS-1123 rules of `netattach.names`.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

# Bad values are quoted in problems, cut to this many characters.
_SHOW_CHARS: Final = 80
# reprlib bounds the work as well as the text: YAML aliases let a few bytes stand for a structure
# far too large to repr in full ("billion laughs").
_REPR = reprlib.Repr()
_REPR.maxstring = _SHOW_CHARS
_REPR.maxother = _SHOW_CHARS
_REPR.maxlevel = 3


def check_keys(
    raw: Mapping[object, object], known: tuple[str, ...], prefix: str, problems: list[str]
) -> None:
    """Report every key of `raw` outside `known`, suggesting the known key it looks like."""
    for name, value in raw.items():
        if name in known:
            continue
        shown = name if isinstance(name, str) else repr(name)
        import difflib  # only for a config with a mistake in it

        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
        problems.append(f"{prefix}{shown}: unknown key{hint}, got {show(value)}")


def path(value: object, key: str, problems: list[str]) -> Path | None:
    # Absolute only: the daemon and the thin plugin (run by the container runtime) have
    # different working directories, so a relative path would mean two places.
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        problems.append(f"{key}: must be an absolute path, got {show(value)}")
        return None
    return Path(value)


def flag(value: object, key: str, problems: list[str]) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    problems.append(f"{key}: must be true or false, got {show(value)}")
    return None


def seconds(value: object, key: str, problems: list[str], *, most: float) -> float | None:
    """A number of seconds, more than 0 and at most `most`."""
    if value is None:
        return None
    # bool is an int to Python, but `true` seconds is a mistake.
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= most
    ):
        problems.append(
            f"{key}: must be a number of seconds, more than 0 and at most {most:g}, "
            f"got {show(value)}"
        )
        return None
    return float(value)


def switch(value: object, key: str, known: tuple[str, ...], problems: list[str]) -> bool | None:
    """A `{enabled: BOOL}` section: its flag (True when left out); None when absent or bad."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(f"{key}: must be a mapping such as {{enabled: true}}, got {show(value)}")
        return None
    start = len(problems)
    check_keys(value, known, f"{key}.", problems)
    enabled = flag(value.get("enabled"), f"{key}.enabled", problems)
    if len(problems) > start:
        return None
    return True if enabled is None else enabled


def show(value: object) -> str:
    shown = _REPR.repr(value)
    if len(shown) > _SHOW_CHARS:
        return shown[:_SHOW_CHARS] + "..."
    return shown
