"""Waiting on a condition with a deadline, for the harnesses that start processes and servers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def poll(
    what: str,
    predicate: Callable[[], Any],
    timeout: float,
    every: float,
    error: Callable[[str], BaseException],
) -> Any:
    """Call `predicate()` every `every` seconds until it returns something truthy (returned);
    after `timeout` seconds raise `error` of a message naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)
