"""The PolicyPeerGroup objects written as `PeerGroups` says (only the leader has a Publisher).

Writes are queued by object name and sent by WRITE_CONCURRENCY workers, so the computing never
waits for the API server and a name written again before its turn is sent once, newest body
only. The API server's write rate is what a churning cluster runs into (on 2 cores under 30 pod
changes a second, ~55 writes a second), so the order matters:

    first    a group's first object (a policy just named it: a node waits for it before it
             writes that policy's table), in the order asked
    then     the other writes, oldest first
    last     a delete, once every write asked before it is done: a resharded group's new
             shards are in place before its old ones go (a reader unions what it sees)

A failed write is asked again after RETRY_DELAY unless a newer one for that name came meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import heapq
import itertools
import logging
import time
from collections.abc import Sequence
from typing import Final

import httpx2

from netattach.cluster import kube_blocks, model
from netattach.cni import errors
from netattach.policy import groups as groups_mod

log = logging.getLogger("netattach.controller")

PATH: Final = f"/apis/{model.PEER_GROUP_API}/policypeergroups"
WRITE_CONCURRENCY: Final = 16
RETRY_DELAY: Final = 2.0


@dataclasses.dataclass(frozen=True, slots=True)
class _Queued:
    write: groups_mod.Write
    asked: int  # its batch: a write keeps the turn of the one it replaced, a delete takes its own
    serial: int  # tells a heap entry of this from one of what it replaced


class Publisher:
    """A queue of PolicyPeerGroup writes, and the workers that send them (`run`)."""

    def __init__(
        self,
        http: httpx2.AsyncClient,
        *,
        workers: int = WRITE_CONCURRENCY,
        retry_delay: float = RETRY_DELAY,
    ) -> None:
        self._http = http
        self._workers, self._retry_delay = workers, retry_delay
        self._latest: dict[str, int] = {}  # name -> the serial of the newest write asked
        self._retrying: set[str] = set()
        self._queued: dict[str, _Queued] = {}
        self._sending: dict[str, _Queued] = {}
        self._puts: list[tuple[int, int, int, str]] = []  # (rank, asked, serial, name)
        self._deletes: list[tuple[int, int, str]] = []  # (asked, serial, name)
        self._held: dict[str, _Queued] = {}  # taken off a heap while that name was being sent
        self._outstanding: collections.Counter[int] = collections.Counter()  # puts by batch
        self._known: set[str] = set()  # names the API holds (listed, or written by us)
        self._serials = itertools.count()
        self._batch = 0
        self._wake = asyncio.Event()
        self._busy_since: float | None = None
        self._sent = 0

    async def existing(self) -> set[str]:
        """The names of the PolicyPeerGroups in the API now."""
        found = await kube_blocks.send_json(self._http, "GET", PATH)
        names = {
            str((item.get("metadata") or {}).get("name"))
            for item in (found or {}).get("items") or []
        }
        self._known |= names
        return names

    def ask(self, writes: Sequence[groups_mod.Write]) -> None:
        """Queue one batch of writes (each replaces the one queued under its name)."""
        if not writes:
            return
        self._batch += 1
        for write in writes:
            before = self._queued.get(write.name)
            asked = self._batch if before is None or write.body is None else before.asked
            self._queue(_Queued(write, asked, next(self._serials)))
        if self._busy_since is None:
            self._busy_since = time.monotonic()
        self._wake.set()

    def idle(self) -> bool:
        """Nothing queued, on its way or to be tried again."""
        return not self._queued and not self._sending and not self._retrying

    def _queue(self, queued: _Queued) -> None:
        name = queued.write.name
        before = self._queued.get(name)
        if before is not None and before.write.body is not None:
            self._count(before.asked, -1)
        self._queued[name] = queued
        self._latest[name] = queued.serial
        self._held.pop(name, None)
        if queued.write.body is not None:
            self._count(queued.asked, 1)
        self._push(queued)

    def _count(self, asked: int, by: int) -> None:
        self._outstanding[asked] += by
        if self._outstanding[asked] <= 0:
            del self._outstanding[asked]

    async def run(self) -> None:
        """Send the queued writes until cancelled."""
        async with asyncio.TaskGroup() as workers:
            for index in range(self._workers):
                workers.create_task(self._work(), name=f"publish {index}")

    async def _work(self) -> None:
        while True:
            name = self._next()
            if name is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            queued = self._queued.pop(name)
            self._sending[name] = queued
            try:
                await self._send(queued.write)
            except errors.CNIError as exc:
                log.warning("PolicyPeerGroup %s: %s; again in %gs", name, exc, self._retry_delay)
                self._retrying.add(name)
                asyncio.get_running_loop().call_later(self._retry_delay, self._again, queued)
            else:
                self._sent += 1
                if self._latest.get(name) == queued.serial:
                    del self._latest[name]
                if queued.write.body is None:
                    self._known.discard(name)
                else:
                    self._known.add(name)
            finally:
                del self._sending[name]
                if queued.write.body is not None:
                    self._count(queued.asked, -1)
                held = self._held.pop(name, None)
                if held is not None:
                    self._push(held)
                self._wake.set()  # a delete may be free to go now
            self._maybe_done()

    def _push(self, queued: _Queued) -> None:
        name = queued.write.name
        if queued.write.body is None:
            heapq.heappush(self._deletes, (queued.asked, queued.serial, name))
        else:
            rank = 1 if name in self._known else 0
            heapq.heappush(self._puts, (rank, queued.asked, queued.serial, name))

    def _current(self, name: str, serial: int) -> _Queued | None:
        queued = self._queued.get(name)
        return queued if queued is not None and queued.serial == serial else None

    def _next(self) -> str | None:
        """The name to send next (None: nothing may go now)."""
        while self._puts:
            _, _, serial, name = heapq.heappop(self._puts)
            queued = self._current(name, serial)
            if queued is None:
                continue  # replaced since
            if name in self._sending:
                self._held[name] = queued  # one request per name at a time
                continue
            return name
        oldest_put = min(self._outstanding, default=None)
        while self._deletes:
            asked, serial, name = self._deletes[0]
            queued = self._current(name, serial)
            if queued is None:
                heapq.heappop(self._deletes)
                continue
            if oldest_put is not None and oldest_put <= asked:
                return None  # a write asked with it or before is not done yet
            heapq.heappop(self._deletes)
            if name in self._sending:
                self._held[name] = queued
                continue
            return name
        return None

    def _again(self, queued: _Queued) -> None:
        name = queued.write.name
        self._retrying.discard(name)
        if self._latest.get(name) == queued.serial:  # nothing newer asked since
            self._queue(dataclasses.replace(queued, serial=next(self._serials)))
            self._wake.set()
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.idle() and self._busy_since is not None:
            log.info(
                "published %d PolicyPeerGroup writes in %.3fs",
                self._sent,
                time.monotonic() - self._busy_since,
            )
            self._busy_since, self._sent = None, 0

    async def _send(self, write: groups_mod.Write) -> None:
        path = f"{PATH}/{write.name}"
        if write.body is None:
            await kube_blocks.send_json(self._http, "DELETE", path, missing_ok=True)
            return
        # a server-side apply: made or replaced in one request, no resourceVersion to carry
        await kube_blocks.send_json(
            self._http, "PATCH", path, write.body, content_type=kube_blocks.APPLY_PATCH, force=True
        )
