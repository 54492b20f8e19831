"""Where blocking work waits: in a worker thread under an event loop, inline without one.

The daemon runs every call on one asyncio event loop, so a blocking step (an fsynced write, a
pause before a retry) goes to a worker thread or yields to the loop. The thin plugin has one
call to make and exits: it runs the same coroutines with `run`, without an event loop, since
importing asyncio costs every exec of the plugin ~25 ms (a third of its start on 2 cores). With
no loop running there is nothing else to wait for, so the same steps simply block.

`to_thread` and `sleep` pick by themselves: inline when no event loop runs in this thread
(asyncio not even imported, or imported and idle), else asyncio's.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")
else:  # only the type checker reads a type parameter; `typing` stays off the thin plugin's path
    T = "T"


def loop_running() -> bool:
    """Whether an asyncio event loop runs in this thread (without importing asyncio)."""
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and asyncio.events._get_running_loop() is not None


async def to_thread(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`asyncio.to_thread` under an event loop; a plain call without one."""
    if not loop_running():
        return func(*args, **kwargs)
    import asyncio

    return await asyncio.to_thread(func, *args, **kwargs)


async def sleep(seconds: float) -> None:
    """`asyncio.sleep` under an event loop; `time.sleep` without one (nothing at all for 0:
    `sleep(0)` is a yield to the loop, and without one there is nothing to yield to)."""
    if not loop_running():
        if seconds > 0:
            time.sleep(seconds)  # noqa: ASYNC251 (no event loop: nothing else is waiting)
        return
    import asyncio

    await asyncio.sleep(seconds)


def start(coro: Coroutine[Any, Any, T]) -> Awaitable[T]:
    """Begin `coro` alongside the caller: a task under an event loop; without one, `coro` runs
    where the caller first awaits it (nothing else runs meanwhile anyway). Either may be
    awaited again, for the same value or error."""
    if not loop_running():
        return _Deferred(coro)
    import asyncio

    return asyncio.ensure_future(coro)


class _Deferred(Awaitable[T]):
    """A coroutine run at its first await, whose outcome every later await gets again."""

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro: Coroutine[Any, Any, T] | None = coro
        self._value: tuple[T] | None = None
        self._error: Exception | None = None

    def __await__(self) -> Generator[Any, None, T]:
        if self._coro is not None:
            coro, self._coro = self._coro, None
            try:
                self._value = ((yield from coro.__await__()),)
            except Exception as exc:
                self._error = exc
        if self._error is not None:
            raise self._error
        assert self._value is not None, "awaited again after its first await was abandoned"
        return self._value[0]


class SuspendedError(RuntimeError):
    """A coroutine run by `run` awaited something only an event loop can wake."""


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to its end in this thread, without an event loop.

    Everything it awaits must finish without suspending: this module's `to_thread` and `sleep`
    do (no loop runs), as do plain coroutines. One that suspends (an asyncio future, a lock
    another task holds) has nothing to wake it: that is a bug, and raises `SuspendedError`.
    """
    try:
        coro.send(None)
    except StopIteration as stop:
        result: T = stop.value
        return result
    coro.close()
    raise SuspendedError("a coroutine run without an event loop waited for one")
