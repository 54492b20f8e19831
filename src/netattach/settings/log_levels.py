"""How much netattach logs: its own level, and the level of other libraries' loggers.

logLevel   debug, info, warning or error (netattach's loggers)
loggers    {name: level} for other loggers (httpx2, lightkube, asyncio...), warning unless named
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from netattach.settings import fields
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, Literal

    LogLevel = Literal["debug", "info", "warning", "error"]

LOG_LEVELS: Final[tuple[LogLevel, ...]] = ("debug", "info", "warning", "error")
# Patterns as text: `re` compiles each on first use and caches it, so a start of the thin
# plugin compiles only those its call needs.
_LOGGER_NAME: Final = r"^[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*$"


class LoggingSettings(NamedTuple):
    level: LogLevel = "info"
    # Other libraries' loggers (httpx2, lightkube, asyncio...) log at warning unless named here.
    loggers: tuple[tuple[str, LogLevel], ...] = ()


def level(value: object, key: str, problems: list[str]) -> LogLevel | None:
    if value is None:
        return None
    for known in LOG_LEVELS:
        if value == known:
            return known
    problems.append(f"{key}: must be one of {', '.join(LOG_LEVELS)}, got {fields.show(value)}")
    return None


def loggers(
    value: object, key: str, problems: list[str]
) -> tuple[tuple[str, LogLevel], ...] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(
            f"{key}: must be a mapping of logger names to levels, got {fields.show(value)}"
        )
        return None
    named: list[tuple[str, LogLevel]] = []
    for name, given in value.items():
        if not isinstance(name, str) or not re.match(_LOGGER_NAME, name):
            problems.append(f"{key}: {fields.show(name)} is not a logger name (like httpx2 or a.b)")
            continue
        checked = level(given, f"{key}.{name}", problems)
        if checked is not None:
            named.append((name, checked))
    return tuple(named)
