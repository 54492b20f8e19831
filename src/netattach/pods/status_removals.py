"""The removal of a deleted pod's network-status, never waited on for long (KUBE-NADREAD, RT-NOAPI).

A DEL starts the removal while its delegates run (Multus too clears the status before its
delegates' DEL) and, once they are done, waits for it `STATUS_REMOVAL_WAIT` at most: a healthy
API answers well within it. Past it the removal goes on in the background, retried within the
sink's own budget, so no DEL waits on an API that is down; a new ADD of that pod cancels it (its
status is the one to keep), and shutdown ends the rest within a bound (`finish`).

Without an event loop (the thin plugin: a status file) a removal is a coroutine that runs where
the DEL settles it.
"""

from __future__ import annotations

from collections.abc import Awaitable

from netattach import loggers, offload
from netattach.cni import errors
from netattach.pods import refs as refs_mod

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio

    from netattach.pods import ports

# The orchestrator's lines: an operator filters on that name.
log = loggers.get("netattach.orchestrator")

STATUS_REMOVAL_WAIT = 0.2


class StatusRemovals:
    """The status removals DELs of one sink began, and those left running (under the daemon's
    loop only), by pod."""

    def __init__(self, sink: ports.StatusSink) -> None:
        self._sink = sink
        self._running: dict[tuple[str, str], asyncio.Future[None]] = {}

    async def _remove(self, ref: refs_mod.PodRef) -> None:
        try:
            await self._sink.remove_status(ref.namespace, ref.name, uid=ref.uid)
        except (OSError, errors.CNIError) as exc:
            log.warning("%s cannot remove the network status: %s", ref.prefix(), exc)

    def start(self, ref: refs_mod.PodRef) -> Awaitable[None]:
        """The removal of the pod's network-status, begun: under the daemon's loop a task,
        kept until it ends; without a loop (the thin plugin: a status file) a coroutine that
        runs where `settle` awaits it."""
        removal = offload.start(self._remove(ref))
        if offload.loop_running():
            import asyncio

            self.cancel(ref)
            key = (ref.namespace, ref.name)
            task = asyncio.ensure_future(removal)  # the task `offload.start` made
            self._running[key] = task
            task.add_done_callback(lambda done: self._ended(ref, done))
        return removal

    async def settle(self, removal: Awaitable[None]) -> None:
        """Wait for a removal `start` began; under the daemon's loop `STATUS_REMOVAL_WAIT` at
        most, the rest of it left to run in the background."""
        if not offload.loop_running():
            await removal
            return
        import asyncio

        task = asyncio.ensure_future(removal)
        await asyncio.wait({task}, timeout=STATUS_REMOVAL_WAIT)
        if task.done() and not task.cancelled():
            task.result()  # an unexpected failure fails the DEL, as it did when awaited

    def _ended(self, ref: refs_mod.PodRef, task: asyncio.Future[None]) -> None:
        key = (ref.namespace, ref.name)
        if self._running.get(key) is task:
            del self._running[key]

    def cancel(self, ref: refs_mod.PodRef) -> None:
        """Stop a removal a DEL of this pod left running: what is published next is current."""
        task = self._running.pop((ref.namespace, ref.name), None)
        if task is not None:
            task.cancel()

    async def finish(self, timeout: float) -> None:
        """At shutdown: let the removals DELs left running end, `timeout` at most, then stop
        them (the sink's connections close next)."""
        if not self._running:
            return
        import asyncio

        _, late = await asyncio.wait(set(self._running.values()), timeout=timeout)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
