"""Loggers for the modules the thin plugin imports: `logging` is imported when a line is due.

The thin plugin imports its whole orchestrator on every exec, and `import logging` costs ~6 ms
of it (`traceback`, `linecache`, `tokenize`, `string`, `weakref`), although a call that goes
well logs nothing at the default level. A `Logger` here has the `logging.Logger` calls those
modules make; until `logging` is imported it decides from the levels `set_level` recorded, as
`logging` would with nothing configured (the root logger passes WARNING and above), and a call
that passes imports `logging`, runs the hook `on_first_use` gave (the thin plugin's
`basicConfig`), applies the recorded levels, and logs. Once `logging` is imported, by anyone,
a `Logger` is only a way to its `logging.Logger`: the daemon and the tests see no difference.

Standard library only, and nothing imported at import time.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import logging
    from collections.abc import Callable
    from typing import Any

DEBUG = 10
INFO = 20
WARNING = 30
ERROR = 40
# `logging`'s own: with nothing configured, the root logger's level.
_UNCONFIGURED_LEVEL = WARNING
_LEVEL_NAMES = {"DEBUG": DEBUG, "INFO": INFO, "WARNING": WARNING, "ERROR": ERROR, "CRITICAL": 50}

_pending_levels: dict[str, int] = {}
_first_use_hooks: list[Callable[[], None]] = []


def _numeric(level: int | str) -> int:
    return level if isinstance(level, int) else _LEVEL_NAMES[level.upper()]


def _logging_ready() -> bool:
    """Whether `logging` is imported; if so, what was recorded for it is applied first."""
    if "logging" not in sys.modules:
        return False
    if _first_use_hooks or _pending_levels:
        import logging

        hooks = _first_use_hooks[:]
        _first_use_hooks.clear()
        for hook in hooks:
            hook()
        for name, level in _pending_levels.items():
            logging.getLogger(name).setLevel(level)
        _pending_levels.clear()
    return True


def on_first_use(hook: Callable[[], None]) -> None:
    """Run `hook` (which configures `logging`) just before `logging` is first used from here."""
    _first_use_hooks.append(hook)
    _logging_ready()


def set_level(name: str, level: int | str) -> None:
    """`logging.getLogger(name).setLevel(level)`, now if `logging` is imported, else when it is."""
    if _logging_ready():
        import logging

        logging.getLogger(name).setLevel(level)
    else:
        _pending_levels[name] = _numeric(level)


def _unconfigured_level(name: str) -> int:
    """The effective level of logger `name` before `logging` is imported: the nearest recorded."""
    while True:
        if name in _pending_levels:
            return _pending_levels[name]
        if "." not in name:
            return _UNCONFIGURED_LEVEL
        name = name.rpartition(".")[0]


class Logger:
    """`logging.getLogger(name)`, got when first needed."""

    __slots__ = ("_logger", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: logging.Logger | None = None

    def _real(self) -> logging.Logger:
        if self._logger is None:
            import logging

            _logging_ready()
            self._logger = logging.getLogger(self.name)
        return self._logger

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 (logging's name)
        if self._logger is None and not _logging_ready():
            return level >= _unconfigured_level(self.name)
        return self._real().isEnabledFor(level)

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        self._emit(level, msg, args, kwargs)

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._emit(DEBUG, msg, args, kwargs)

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._emit(INFO, msg, args, kwargs)

    def warning(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._emit(WARNING, msg, args, kwargs)

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._emit(ERROR, msg, args, kwargs)

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        kwargs.setdefault("exc_info", True)
        self._emit(ERROR, msg, args, kwargs)

    def _emit(
        self, level: int, msg: object, args: tuple[object, ...], kwargs: dict[str, Any]
    ) -> None:
        if self.isEnabledFor(level):
            # Two frames up: the record names the caller of the level's method, not this one.
            kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 2
            self._real().log(level, msg, *args, **kwargs)


def get(name: str) -> Logger:
    """The logger `name`, as `logging.getLogger(name)` would give it, got when first needed."""
    return Logger(name)
