"""The debounced loop of the daemon's background passes (policy enforcement, hot-plug).

A change anywhere sets an event; the loop waits for a short quiet time so that a burst of
changes (a relist, a manifest rewrite) makes one pass, then runs the pass. A pass that fails
with a bug is logged and the loop goes on: the next change tries again.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from netattach import loggers
from netattach.daemon import heap


async def debounced_passes(
    dirty: asyncio.Event,
    one_pass: Callable[[], Awaitable[None]],
    *,
    debounce: float,
    log: logging.Logger | loggers.Logger,
    what: str,
    after_failure: Callable[[], None] | None = None,
    min_interval: float = 0.0,
) -> None:
    """Run `one_pass` after each time `dirty` is set (coalesced over `debounce` seconds, and
    no sooner than `min_interval` after the last pass started), until cancelled."""
    loop = asyncio.get_running_loop()
    last_start = -min_interval
    while True:
        await dirty.wait()
        await asyncio.sleep(max(debounce, last_start + min_interval - loop.time()))
        last_start = loop.time()
        dirty.clear()
        try:
            await one_pass()
        except Exception:
            log.exception("%s pass failed", what)
            if after_failure is not None:
                after_failure()
        heap.collect_between_passes()
