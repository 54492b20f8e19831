"""The debounced loop of the daemon's background passes (policy enforcement, hot-plug).

A change anywhere sets an event; the loop waits for a short quiet time so that a burst of
changes (a relist, a manifest rewrite) makes one pass, then runs the pass. A pass that fails
with a bug is logged and the loop goes on: the next change tries again.

Passes can be rate-limited as kube-proxy limits its syncs (`minSyncPeriod`, `burstSyncs`): a
token bucket holding `burst` passes, refilled with one every `min_interval`. A few changes on a
quiet node each get a pass at once; a cluster that never stops changing gets one pass every
`min_interval`, each taking in every change since the last.
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
    burst: int = 1,
) -> None:
    """Run `one_pass` after each time `dirty` is set (coalesced over `debounce` seconds, and
    at most `burst` passes back to back, then one every `min_interval`), until cancelled."""
    loop = asyncio.get_running_loop()
    tokens, stamp = float(burst), loop.time()

    def refilled() -> float:
        """The passes the bucket holds now (none spent since `stamp`)."""
        return min(burst, tokens + (loop.time() - stamp) / min_interval)

    while True:
        await dirty.wait()
        wait = debounce
        if min_interval > 0:
            tokens, stamp = refilled(), loop.time()
            wait = max(debounce, (1 - tokens) * min_interval)
        await asyncio.sleep(wait)
        if min_interval > 0:
            tokens, stamp = refilled() - 1, loop.time()
        dirty.clear()
        try:
            await one_pass()
        except Exception:
            log.exception("%s pass failed", what)
            if after_failure is not None:
                after_failure()
        heap.collect_between_passes()
