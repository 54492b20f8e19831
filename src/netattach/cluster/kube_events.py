"""Events for the Kubernetes feed: core/v1 Events on a pod (or another object of its namespace),
sent in order by one background worker, repeats folded into `count` as client-go's recorder does
(KUBE-EVENTS).

Recording never raises and never waits for the API: an Event is queued, and a failure to send it
is logged.
"""

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import logging
import time
from typing import Final

import lightkube

from netattach import names
from netattach.cluster import kube_client, model, store

log = logging.getLogger(kube_client.LOGGER)

# Event names are DNS subdomains; client-go names them "<object>.<unix nanoseconds hex>".
_EVENT_NAME_MAX: Final = names.SUBDOMAIN_MAX
# events.k8s.io caps a note at 1 kB; core/v1 has no cap, but kubectl shows no more either.
EVENT_MESSAGE_MAX: Final = 1024
# client-go's EventCorrelator folds identical events within 10 minutes into one, counting them.
EVENT_FOLD_WINDOW: Final = 600.0
_EVENT_FOLD_MEMORY: Final = 512
_EVENT_QUEUE_MAX: Final = 1000
# How long the Event sender waits once woken: enough for the call that queued the Event to
# send its reply (a few event-loop turns), little beside an Event's own round trip.
EVENT_PAUSE = 0.005
# How long an Event waits at most while CNI calls are under way: a burst of 200 pods queues ~600
# (one per interface, as Multus records them), each ~0.5 ms of the loop, which the pods' ADDs
# would otherwise share the loop with.
EVENT_DEFER_MAX = 2.0


@dataclasses.dataclass(slots=True)
class _SentEvent:
    name: str
    count: int
    sent_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class _EventRequest:
    namespace: str
    pod: str  # the involved object's name: a pod, unless `kind` says otherwise
    reason: str
    message: str
    type_: str
    uid: str
    at: datetime.datetime
    kind: str = model.POD
    queued_at: float = 0.0  # time.monotonic() when queued


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


class Recorder:
    """Records Events through `api` as `node_name`'s netattach; `store` gives a pod's UID when
    the caller does not."""

    def __init__(
        self,
        api: kube_client.ApiClients,
        store: store.ClusterStore,
        *,
        node_name: str,
        timing: kube_client.KubeTiming,
        idle: asyncio.Event | None = None,
    ) -> None:
        """`idle`: set while no CNI call is under way (the daemon's server keeps it): Events wait
        for it, up to `EVENT_DEFER_MAX` seconds, so a burst of pods starts before its Events go
        out. None: they never wait."""
        self._api = api
        self._store = store
        self.node_name = node_name
        self.timing = timing
        self.idle = idle
        self._events: asyncio.Queue[_EventRequest] | None = None
        self._event_worker: asyncio.Task[None] | None = None
        self._sent_events: collections.OrderedDict[tuple[str, ...], _SentEvent] = (
            collections.OrderedDict()
        )

    async def record_event(
        self,
        namespace: str,
        pod: str,
        *,
        reason: str,
        message: str,
        type_: str = "Normal",
        uid: str = "",
        kind: str = model.POD,
    ) -> None:
        """Queue a core/v1 Event about the pod (or the `kind` object named `pod`, e.g. a
        MultiNetworkPolicy) and return at once; never raises.

        One worker sends them in order, each within `event_timeout`; a failure is logged. The
        pod's UID comes from the cache when not given, so the Event names that very pod.
        """
        if self._events is None:
            self._events = asyncio.Queue(_EVENT_QUEUE_MAX)
        if self._event_worker is None or self._event_worker.done():
            self._event_worker = asyncio.create_task(self._send_events(self._events))
        if not uid:
            cached = self._store.lookup(kind, namespace, pod)
            uid = model.uid_of(cached) if cached is not None else ""
        request = _EventRequest(
            namespace, pod, reason, message, type_, uid, _now(), kind, time.monotonic()
        )
        try:
            self._events.put_nowait(request)
        except asyncio.QueueFull:
            log.warning("event queue full; dropped %s %s on %s/%s", type_, reason, namespace, pod)

    async def flush_events(self, timeout: float) -> bool:
        """Wait until every queued Event has been sent (or has failed); False on timeout."""
        if self._events is None:
            return True
        try:
            async with asyncio.timeout(timeout):
                await self._events.join()
        except TimeoutError:
            return False
        return True

    async def _send_events(self, queue: asyncio.Queue[_EventRequest]) -> None:
        while True:
            if queue.empty():
                request = await queue.get()
                # Woken by an ADD or DEL still under way: its reply to the runtime goes first.
                # Building and sending an Event takes the loop ~0.7 ms, which the pod's start
                # would otherwise wait for; the queue drains at once after this pause.
                await asyncio.sleep(EVENT_PAUSE)
            else:
                request = queue.get_nowait()
            await self._while_busy(request.queued_at)
            try:
                async with asyncio.timeout(self.timing.event_timeout):
                    await self._send_event(request)
            except Exception as exc:
                log.warning(
                    "cannot record event %s on %s %s/%s: %s",
                    request.reason,
                    request.kind,
                    request.namespace,
                    request.pod,
                    kube_client.describe(exc),
                )
            finally:
                queue.task_done()

    async def _while_busy(self, queued_at: float) -> None:
        """Wait while CNI calls are under way, up to `EVENT_DEFER_MAX` after the Event was
        queued (under a steady load, Events still go out, late)."""
        left = EVENT_DEFER_MAX - (time.monotonic() - queued_at)
        if self.idle is None or self.idle.is_set() or left <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                await self.idle.wait()

    async def _send_event(self, request: _EventRequest) -> None:
        message = request.message[:EVENT_MESSAGE_MAX]
        key = (
            request.kind,
            request.namespace,
            request.pod,
            request.uid,
            request.type_,
            request.reason,
            message,
        )
        now = time.monotonic()
        earlier = self._sent_events.get(key)
        stamp = request.at.strftime("%Y-%m-%dT%H:%M:%SZ")
        if earlier is not None and now - earlier.sent_at < EVENT_FOLD_WINDOW:
            try:
                await self._api.send_json(
                    "PATCH",
                    f"/api/v1/namespaces/{request.namespace}/events/{earlier.name}",
                    {"count": earlier.count + 1, "lastTimestamp": stamp},
                    kube_client.MERGE_PATCH,
                )
            except lightkube.ApiError as exc:
                if kube_client.status_code(exc) != kube_client.NOT_FOUND:
                    raise
            else:
                earlier.count += 1
                earlier.sent_at = now
                self._sent_events.move_to_end(key)
                return
        name = f"{request.pod[: _EVENT_NAME_MAX - 17]}.{time.time_ns():x}"
        involved: dict[str, object] = {
            "apiVersion": model.API_VERSIONS.get(request.kind, "v1"),
            "kind": request.kind,
            "name": request.pod,
            "namespace": request.namespace,
        }
        if request.uid:
            involved["uid"] = request.uid
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": request.namespace},
            "involvedObject": involved,
            "reason": request.reason,
            "message": message,
            "type": request.type_,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": kube_client.COMPONENT, "host": self.node_name},
            "reportingComponent": kube_client.COMPONENT,
            "reportingInstance": self.node_name,
        }
        await self._api.send_json(
            "POST", f"/api/v1/namespaces/{request.namespace}/events", event, "application/json"
        )
        self._sent_events[key] = _SentEvent(name=name, count=1, sent_at=now)
        while len(self._sent_events) > _EVENT_FOLD_MEMORY:
            self._sent_events.popitem(last=False)

    async def aclose(self, *, flush: float = 2.0) -> None:
        """Send what Events are queued (within `flush` seconds), then stop the worker."""
        await self.flush_events(flush)
        if self._event_worker is not None:
            self._event_worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._event_worker
            self._event_worker = None
