"""Tests that call `logs.configure` put the process's logging back as they found it."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator, Mapping

from netattach import logs


@contextlib.contextmanager
def configured(
    level: str, log_format: logs.LogFormat = "text", *, loggers: Mapping[str, str] | None = None
) -> Iterator[io.StringIO]:
    """`logs.configure` into a fresh stream for the block; then the root logger's handlers and
    level, and the level of every logger it touched, as they were."""
    root = logging.getLogger()
    handlers, root_level = list(root.handlers), root.level
    touched = {logs.OWN, *(loggers or {})}
    levels = {name: logging.getLogger(name).level for name in touched}
    stream = io.StringIO()
    try:
        logs.configure(level, log_format, stream, loggers=loggers)
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(root_level)
        for name, old in levels.items():
            logging.getLogger(name).setLevel(old)
