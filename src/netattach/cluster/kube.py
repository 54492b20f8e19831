"""The Kubernetes feed: the API server as the source of the cluster view, the status and Events.

This module owns every conversation the node daemon has with the API server:

    list + watch      pods with spec.nodeName=<this node>, all Namespaces, all
                      NetworkAttachmentDefinitions and MultiNetworkPolicies, into a `ClusterStore`,
                      trimmed to the fields netattach reads (`kube_objects`)   (KUBE-CACHE)
    fetch_pod         one bounded direct read of a pod the watch has not delivered yet
    publish_status    a JSON merge patch of metadata.annotations[network-status] and nothing
    remove_status     else, retried on conflicts, 429, 5xx and transport errors  (KUBE-STATUS)
    record_event      core/v1 Events on the pod, sent in order by one background worker, repeats
                      folded into `count` as client-go's recorder does       (KUBE-EVENTS)

Why lightkube: it is a maintained client (typed models, an asyncio client, generic resources for
CRDs) that owns what we must not hand-roll: kubeconfig parsing (contexts, CA files and data, client
certificates, exec plugins), TLS set-up and bearer-token auth. In-cluster it reads the projected
service-account token from its file and, when the API answers 401, reads the file again and
retries (`BearerTokenFileAuth`, client-go's tokenFileAuth), so a token the kubelet rotated is
picked up without a restart; a kubeconfig `tokenFile` gets the same treatment. Its transport is
httpx, whose transport seam lets us add what lightkube's watch does not ask for:
`allowWatchBookmarks=true`, and TCP keepalives that notice a dead watch connection.

The reflector (one per kind) is client-go's: list → replace that kind in the store → watch from
the list's resourceVersion; every event, bookmarks included, advances the resourceVersion; a
disconnect, timeout or 5xx backs off (exponential, capped, jittered) and resumes from the last
resourceVersion; `410 Gone`/Expired relists. The store is marked synced once every kind has
listed once. A CRD that is not installed (404 on its list) counts as an empty, listed kind and is
looked for again every `KubeTiming.missing_crd_recheck` seconds.

Errors raised (publish_status, remove_status, fetch_pod); everything else is logged and retried:
    errors.TryAgainLaterError     the API did not answer well within the budget (transient)
    errors.IOFailureError         the API refused the request for good (403, 422, ...)
    errors.InternalError          status entries that are not JSON
    errors.InvalidNetworkConfigError   (the constructor) no usable kubeconfig / in-cluster config
"""

import asyncio
import collections
import contextlib
import ctypes
import dataclasses
import datetime
import functools
import gc
import json
import logging
import random
import socket
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final, cast

import httpx2
import lightkube
from lightkube import generic_resource
from lightkube.config import client_adapter
from lightkube.models import core_v1 as core_models
from lightkube.models import meta_v1
from lightkube.resources import core_v1
from lightkube.types import PatchType

from netattach.cluster import kube_objects, model, store
from netattach.cni import errors

log = logging.getLogger(__name__)

NetworkAttachmentDefinition = generic_resource.create_namespaced_resource(
    model.NAD_GROUP, "v1", model.NAD, "network-attachment-definitions"
)
MultiNetworkPolicy = generic_resource.create_namespaced_resource(
    model.NAD_GROUP, "v1beta1", model.POLICY, "multi-networkpolicies"
)

COMPONENT: Final = "netattach"
# API codes worth another try: a conflict, too many requests, the server or a proxy in trouble.
RETRYABLE_CODES: Final = frozenset({409, 429, 500, 502, 503, 504})
_GONE: Final = 410
_NOT_FOUND: Final = 404
_CONFLICT: Final = 409
# Event names are DNS subdomains (253); client-go names them "<object>.<unix nanoseconds hex>".
_EVENT_NAME_MAX: Final = 253
# events.k8s.io caps a note at 1 kB; core/v1 has no cap, but kubectl shows no more either.
EVENT_MESSAGE_MAX: Final = 1024
# client-go's EventCorrelator folds identical events within 10 minutes into one, counting them.
EVENT_FOLD_WINDOW: Final = 600.0
_EVENT_FOLD_MEMORY: Final = 512
_EVENT_QUEUE_MAX: Final = 1000


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Exponential delays: `initial * factor**(n-1)`, at most `cap`, each ± `jitter` (a share)."""

    initial: float = 0.5
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.2

    def delay(self, failures: int) -> float:
        base = min(self.cap, self.initial * self.factor ** max(0, failures - 1))
        # Jitter spreads the nodes of a cluster apart when the API server comes back.
        return max(0.0, base * (1 + random.uniform(-self.jitter, self.jitter)))  # noqa: S311


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KubeTiming:
    """Every time bound of the feed, in seconds (tests shrink them)."""

    request_timeout: float = 10.0  # one list page, get, patch or create
    fetch_timeout: float = 5.0  # the direct read of a pod, on an ADD's path
    status_budget: float = 30.0  # publish_status, all attempts (the ADD waits for it)
    remove_budget: float = 5.0  # remove_status, all attempts (the DEL waits: RT-NOAPI)
    event_timeout: float = 5.0  # one Event
    watch_timeout: float = 300.0  # the server ends a watch after 1-2x this (client-go: 5-10 min)
    # No line at all (not even a bookmark) for this long: the connection is presumed dead.
    watch_idle_timeout: float = 660.0
    missing_crd_recheck: float = 60.0
    list_chunk: int = 500
    backoff: Backoff = Backoff()  # list and watch failures
    retry: Backoff = Backoff(initial=0.1, cap=2.0)  # status patches


@dataclasses.dataclass(frozen=True, slots=True)
class _Kind:
    kind: str
    resource: type[Any]
    namespaced: bool
    plural: str
    custom: bool  # a CRD: a 404 on its list means it is not installed
    trim: Callable[[Any], model.KubeObject]


class _Reflector:
    """One kind's list+watch state."""

    def __init__(self, spec: _Kind, fields: dict[str, str] | None) -> None:
        self.spec = spec
        self.fields = fields
        self.resource_version: str | None = None
        self.listed = False
        self.failures = 0
        self.missing = False  # a CRD the API does not serve (yet)


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


class _BookmarkTransport(httpx2.AsyncBaseTransport):
    """Asks every watch for BOOKMARK events, which lightkube's watch() has no parameter for."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET" and request.url.params.get("watch") in ("true", "1"):
            request.url = request.url.copy_set_param("allowWatchBookmarks", "true")
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _keepalive_options() -> list[tuple[int, int, int]]:
    # A watch on a connection whose peer vanished (a node partition, a NAT timeout) would wait
    # forever: TCP keepalives end it in about a minute.
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


def build_client(kubeconfig: Path | None, timing: KubeTiming) -> lightkube.AsyncClient:
    """A lightkube client for the current context of `kubeconfig`, or for the pod's service
    account when None; `errors.InvalidNetworkConfigError` when neither can be used."""
    where = str(kubeconfig) if kubeconfig is not None else "the in-cluster service account"
    try:
        if kubeconfig is None:
            config = lightkube.KubeConfig.from_service_account().get()
        else:
            config = lightkube.KubeConfig.from_file(kubeconfig).get()
        if config is None or config.user is None:
            raise errors.InvalidNetworkConfigError(
                f"cannot use {where}", "no current context with a user to authenticate as"
            )
        # TLS is lightkube's own set-up (CA file or data, client certificates); the transport
        # is ours only to add bookmarks and keepalives, so it is handed that context.
        verify = client_adapter.verify_cluster(config.cluster, config.user, config.abs_file)
    except KeyError as exc:  # from_service_account without KUBERNETES_SERVICE_HOST/PORT
        raise errors.InvalidNetworkConfigError(
            f"cannot use {where}", f"environment variable {exc} is not set (not in a pod?)"
        ) from exc
    except (lightkube.ConfigError, OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise errors.InvalidNetworkConfigError(f"cannot load {where}", str(exc)) from exc
    transport = _BookmarkTransport(
        httpx2.AsyncHTTPTransport(verify=verify, socket_options=_keepalive_options())
    )
    return lightkube.AsyncClient(
        config,
        timeout=httpx2.Timeout(timing.request_timeout),
        field_manager=COMPONENT,
        transport=transport,
    )


def _status_code(exc: BaseException) -> int | None:
    """The API's HTTP code of a failed request (an ERROR watch event's Status code included)."""
    if isinstance(exc, lightkube.ApiError):
        code = exc.status.code
        if code is not None:
            return int(code)
    # An ApiError built from a watch's ERROR event has no response.
    response = getattr(exc, "response", None)
    if isinstance(response, httpx2.Response):
        return response.status_code
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, lightkube.ApiError):
        return f"{exc.status.code} {exc.status.reason}: {exc.status.message}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    if isinstance(response, httpx2.Response):
        with contextlib.suppress(ValueError):
            value = response.headers.get("Retry-After")
            return None if value is None else float(value)
    return None


def _is_transient(exc: BaseException) -> bool:
    """A failure another attempt may get past: transport, timeout, or a retryable code."""
    if isinstance(exc, httpx2.TransportError | TimeoutError | lightkube.ConfigError):
        # ConfigError: the token file is missing for a moment while the kubelet swaps it.
        return True
    code = _status_code(exc)
    return code is not None and code in RETRYABLE_CODES


def _newer(candidate: str, seen: str | None) -> bool:
    """Whether `candidate` is after `seen`. resourceVersions are etcd revisions in practice
    (the API's watch cache compares them too); anything else counts as not newer."""
    if seen is None:
        return True
    try:
        return int(candidate) > int(seen)
    except ValueError:
        return False


def _bookmark_version(obj: object) -> str | None:
    if isinstance(obj, Mapping):
        meta = obj.get("metadata")
        version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    else:
        version = getattr(getattr(obj, "metadata", None), "resourceVersion", None)
    return version if isinstance(version, str) and version else None


def _release_free_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's `malloc_trim`; nothing where
    there is none): a relist parses thousands of objects, and freed memory fragmented between
    the few survivors would otherwise stay resident."""
    gc.collect()  # the pages' parsed models first, cycles included
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


class KubeFeed:
    """Feeds `store` from the API server; publishes pod status and Events there.

    `run()` until cancelled, then `aclose()`. The status and event methods work without `run()`.
    """

    def __init__(
        self,
        store: store.ClusterStore,
        *,
        node_name: str,
        kubeconfig: Path | None,
        timing: KubeTiming | None = None,
        all_pods: bool = False,
    ) -> None:
        """`all_pods`: watch every pod of the cluster, not only this node's (policy peers)."""
        self._store = store
        self.node_name = node_name
        self.timing = KubeTiming() if timing is None else timing
        self._client = build_client(kubeconfig, self.timing)
        self._shared = kube_objects.Shared()
        kinds = (
            _Kind(
                model.POD,
                core_v1.Pod,
                True,
                "pods",
                False,
                functools.partial(kube_objects.trim_pod, shared=self._shared),
            ),
            _Kind(
                model.NAMESPACE,
                core_v1.Namespace,
                False,
                "namespaces",
                False,
                functools.partial(kube_objects.trim_namespace, shared=self._shared),
            ),
            _Kind(
                model.NAD,
                NetworkAttachmentDefinition,
                True,
                "network-attachment-definitions",
                True,
                functools.partial(kube_objects.trim_nad, shared=self._shared),
            ),
            _Kind(
                model.POLICY,
                MultiNetworkPolicy,
                True,
                "multi-networkpolicies",
                True,
                functools.partial(kube_objects.trim_policy, shared=self._shared),
            ),
        )
        self._reflectors = {
            spec.kind: _Reflector(
                spec,
                {"spec.nodeName": node_name} if spec.kind == model.POD and not all_pods else None,
            )
            for spec in kinds
        }
        self._events: asyncio.Queue[_EventRequest] | None = None
        self._event_worker: asyncio.Task[None] | None = None
        self._sent_events: collections.OrderedDict[tuple[str, ...], _SentEvent] = (
            collections.OrderedDict()
        )

    # -- observability --------------------------------------------------------------------------

    def resource_version(self, kind: str) -> str | None:
        """The last resourceVersion the feed has seen of `kind` (a list, an event, a bookmark)."""
        return self._reflectors[kind].resource_version

    # -- list + watch (KUBE-CACHE) --------------------------------------------------------------

    async def run(self) -> None:
        """List and watch every kind until cancelled."""
        async with asyncio.TaskGroup() as group:
            for reflector in self._reflectors.values():
                group.create_task(self._reflect(reflector), name=f"watch {reflector.spec.kind}")

    async def _reflect(self, reflector: _Reflector) -> None:
        kind = reflector.spec.kind
        while True:
            try:
                if reflector.resource_version is None and not await self._list(reflector):
                    await asyncio.sleep(self.timing.missing_crd_recheck)
                    continue
                await self._watch(reflector)
            except TimeoutError:
                # Nothing, not even a bookmark, for watch_idle_timeout: presumed dead; resume.
                log.info("watch of %s idle too long; watching again", kind)
            except Exception as exc:
                code = _status_code(exc)
                if code == _GONE and reflector.resource_version is not None:
                    # The history before our resourceVersion is gone: only a list is complete.
                    log.info(
                        "watch of %s from resourceVersion %s expired; listing again",
                        kind,
                        reflector.resource_version,
                    )
                    reflector.resource_version = None
                    continue
                if code == _GONE:
                    reflector.resource_version = None
                reflector.failures += 1
                delay = self.timing.backoff.delay(reflector.failures)
                level = logging.WARNING if _is_transient(exc) else logging.ERROR
                log.log(
                    level,
                    "%s of %s failed (%s); again in %.1fs",
                    "watch" if reflector.resource_version else "list",
                    kind,
                    _describe(exc),
                    delay,
                    exc_info=not isinstance(exc, httpx2.HTTPError | lightkube.ConfigError),
                )
                await asyncio.sleep(delay)

    async def _list(self, reflector: _Reflector) -> bool:
        """List the kind into the store; False when its CRD is not installed."""
        spec = reflector.spec
        kwargs: dict[str, Any] = {"chunk_size": self.timing.list_chunk}
        if spec.namespaced:
            kwargs["namespace"] = lightkube.ALL_NS
        if reflector.fields:
            kwargs["fields"] = reflector.fields
        listing = self._client.list(spec.resource, **kwargs)
        objects: list[model.KubeObject] = []
        try:
            async for item in listing:
                objects.append(spec.trim(item))
            version: str | None = listing.resourceVersion
        except lightkube.ApiError as exc:
            if not (spec.custom and _status_code(exc) == _NOT_FOUND):
                raise
            if not reflector.missing:
                log.warning(
                    "the API does not serve %s (CRD not installed?): none of them until it does; "
                    "looked for every %gs",
                    spec.plural,
                    self.timing.missing_crd_recheck,
                )
            objects, version = [], None
        if reflector.missing and version is not None:
            log.info("the API serves %s now", spec.plural)
        reflector.missing = version is None
        self._replace_kind(spec.kind, objects)
        del objects
        _release_free_memory()  # what parsing the pages took, given back
        reflector.resource_version = version
        reflector.failures = 0
        if not reflector.listed:
            reflector.listed = True
            if all(r.listed for r in self._reflectors.values()):
                self._store.mark_synced()
                log.info("cluster view synced from the API (node %s)", self.node_name)
        return version is not None

    def _replace_kind(self, kind: str, objects: list[model.KubeObject]) -> None:
        # No await in here: readers on the event loop see the kind before or after, never half.
        fresh = {(model.namespace_of(obj), model.name_of(obj)) for obj in objects}
        for old in self._store.objects(kind):
            key = (model.namespace_of(old), model.name_of(old))
            if key not in fresh:
                self._store.remove(kind, *key)
        for obj in objects:
            self._store.upsert(obj)

    async def _watch(self, reflector: _Reflector) -> None:
        spec = reflector.spec
        kwargs: dict[str, Any] = {
            "resource_version": reflector.resource_version,
            # client-go spreads its watches' ends over [timeout, 2*timeout).
            "server_timeout": int(self.timing.watch_timeout * (1 + random.random())),  # noqa: S311
        }
        if spec.namespaced:
            kwargs["namespace"] = lightkube.ALL_NS
        if reflector.fields:
            kwargs["fields"] = reflector.fields
        stream = cast(
            AsyncGenerator[tuple[str, Any], None], self._client.watch(spec.resource, **kwargs)
        )
        async with contextlib.aclosing(stream):
            while True:
                try:
                    async with asyncio.timeout(self.timing.watch_idle_timeout):
                        event_type, obj = await anext(stream)
                except StopAsyncIteration:
                    return  # lightkube gave up on the stream: watch again from where we are
                self._apply(reflector, event_type, obj)

    def _apply(self, reflector: _Reflector, event_type: str, obj: object) -> None:
        spec = reflector.spec
        if event_type == "BOOKMARK":
            version = _bookmark_version(obj)
        else:
            trimmed = spec.trim(obj)
            if event_type in ("ADDED", "MODIFIED"):
                self._store.upsert(trimmed)
            elif event_type == "DELETED":
                self._store.remove(spec.kind, model.namespace_of(trimmed), model.name_of(trimmed))
            version = model.meta(trimmed).get("resourceVersion")
        if version:
            reflector.resource_version = version
        reflector.failures = 0

    # -- direct read (KUBE-CACHE) ---------------------------------------------------------------

    async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None:
        """Read the pod from the API (one request, `fetch_timeout`); None when there is none.

        Kept in the store when it is of this node and newer than what the watch has seen, so a
        later lookup finds it; an older one could be a pod whose deletion the watch delivered
        while this read was on its way.
        """
        try:
            async with asyncio.timeout(self.timing.fetch_timeout):
                pod = await self._client.get(core_v1.Pod, name, namespace=namespace)
        except Exception as exc:
            if _status_code(exc) == _NOT_FOUND:
                return None
            if not (_is_transient(exc) or isinstance(exc, httpx2.HTTPError)):
                raise
            raise errors.TryAgainLaterError(
                f"cannot read pod {namespace}/{name} from the API", _describe(exc)
            ) from exc
        trimmed = kube_objects.trim_pod(pod, shared=self._shared)
        version = model.meta(trimmed).get("resourceVersion", "")
        on_node = (trimmed.get("spec") or {}).get("nodeName") == self.node_name
        if (
            on_node
            and self._store.lookup_pod(namespace, name) is None
            and _newer(version, self._reflectors[model.POD].resource_version)
        ):
            self._store.upsert(trimmed)
        return trimmed

    # -- status (KUBE-STATUS) -------------------------------------------------------------------

    async def publish_status(
        self, namespace: str, pod: str, entries: list[dict[str, object]], *, uid: str = ""
    ) -> None:
        """Set the pod's network-status annotation to `entries` (a JSON list), nothing else.

        A pod that is gone (404, or another pod of that name when `uid` is given) is logged and
        tolerated, as Multus does: the ADD of a deleted pod has no one to tell.
        """
        try:
            # Indented as Multus writes it (json.MarshalIndent, four spaces): kubectl shows it.
            text = json.dumps(entries, indent=4, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise errors.InternalError(
                f"network-status of {namespace}/{pod} is not JSON", str(exc)
            ) from exc
        done = await self._patch_status(
            namespace, pod, text, uid=uid, budget=self.timing.status_budget, verb="publish"
        )
        if not done:
            log.warning("pod %s/%s is gone; its network-status was not published", namespace, pod)

    async def remove_status(self, namespace: str, pod: str, *, uid: str = "") -> None:
        """Remove the pod's network-status annotation (a merge patch setting it to null).

        No request when the synced cache knows the pod is gone (a DEL after the pod's deletion,
        the usual case, needs no API: RT-NOAPI), or that the name is another pod's now.
        """
        if self._store.synced:
            cached = self._store.lookup_pod(namespace, pod)
            if cached is None or (uid and model.uid_of(cached) not in ("", uid)):
                return
        await self._patch_status(
            namespace, pod, None, uid=uid, budget=self.timing.remove_budget, verb="remove"
        )

    async def _patch_status(
        self, namespace: str, pod: str, text: str | None, *, uid: str, budget: float, verb: str
    ) -> bool:
        """The merge patch, retried within `budget`; False when the pod is gone."""
        metadata: dict[str, object] = {"annotations": {model.STATUS_ANNOTATION: text}}
        if uid:
            # A precondition, not a change: a recreated pod of the same name gets 409.
            metadata["uid"] = uid
        patch = {"metadata": metadata}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        attempt = 0
        while True:
            attempt += 1
            try:
                async with asyncio.timeout(
                    max(0.0, min(self.timing.request_timeout, deadline - loop.time()))
                ):
                    await self._client.patch(
                        core_v1.Pod, pod, patch, namespace=namespace, patch_type=PatchType.MERGE
                    )
                return True
            except Exception as exc:
                failure = exc
            code = _status_code(failure)
            if code == _NOT_FOUND:
                return False
            if code == _CONFLICT and uid and await self._is_other_pod(namespace, pod, uid):
                return False
            if not _is_transient(failure):
                if not isinstance(failure, httpx2.HTTPError):
                    log.error("%s network-status of %s/%s", verb, namespace, pod, exc_info=failure)
                # Only CNI errors leave: a DEL logs them and goes on (RT-NOAPI).
                raise errors.IOFailureError(
                    f"the API refused to {verb} the network-status of {namespace}/{pod}",
                    _describe(failure),
                ) from failure
            delay = max(self.timing.retry.delay(attempt), _retry_after(failure) or 0.0)
            if loop.time() + delay >= deadline:
                raise errors.TryAgainLaterError(
                    f"cannot {verb} the network-status of {namespace}/{pod}",
                    f"{attempt} attempt(s) in {budget:g}s, the last: {_describe(failure)}",
                ) from failure
            log.info(
                "%s network-status of %s/%s: %s; again in %.2fs",
                verb,
                namespace,
                pod,
                _describe(failure),
                delay,
            )
            await asyncio.sleep(delay)

    async def _is_other_pod(self, namespace: str, pod: str, uid: str) -> bool:
        """After a 409 on a patch with a UID precondition: is the name another pod's now?"""
        try:
            async with asyncio.timeout(self.timing.request_timeout):
                current = await self._client.get(core_v1.Pod, pod, namespace=namespace)
        except Exception as exc:
            return _status_code(exc) == _NOT_FOUND
        return current.metadata is not None and current.metadata.uid not in (None, uid)

    # -- Events (KUBE-EVENTS) -------------------------------------------------------------------

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
        request = _EventRequest(namespace, pod, reason, message, type_, uid, _now(), kind)
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
            request = await queue.get()
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
                    _describe(exc),
                )
            finally:
                queue.task_done()

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
        if earlier is not None and now - earlier.sent_at < EVENT_FOLD_WINDOW:
            try:
                await self._client.patch(
                    core_v1.Event,
                    earlier.name,
                    {
                        "count": earlier.count + 1,
                        "lastTimestamp": request.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    },
                    namespace=request.namespace,
                    patch_type=PatchType.MERGE,
                )
            except lightkube.ApiError as exc:
                if _status_code(exc) != _NOT_FOUND:
                    raise
            else:
                earlier.count += 1
                earlier.sent_at = now
                self._sent_events.move_to_end(key)
                return
        name = f"{request.pod[: _EVENT_NAME_MAX - 17]}.{time.time_ns():x}"
        event = core_v1.Event(
            metadata=meta_v1.ObjectMeta(name=name, namespace=request.namespace),
            involvedObject=core_models.ObjectReference(
                apiVersion=model.API_VERSIONS.get(request.kind, "v1"),
                kind=request.kind,
                name=request.pod,
                namespace=request.namespace,
                uid=request.uid or None,
            ),
            reason=request.reason,
            message=message,
            type=request.type_,
            count=1,
            firstTimestamp=request.at,
            lastTimestamp=request.at,
            source=core_models.EventSource(component=COMPONENT, host=self.node_name),
            reportingComponent=COMPONENT,
            reportingInstance=self.node_name,
        )
        await self._client.create(event)
        self._sent_events[key] = _SentEvent(name=name, count=1, sent_at=now)
        while len(self._sent_events) > _EVENT_FOLD_MEMORY:
            self._sent_events.popitem(last=False)

    # -- shutdown -------------------------------------------------------------------------------

    async def aclose(self, *, flush: float = 2.0) -> None:
        """Send what Events are queued (within `flush` seconds), then close the connections."""
        await self.flush_events(flush)
        if self._event_worker is not None:
            self._event_worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._event_worker
            self._event_worker = None
        await self._client.aclose()


class KubeView(store.ClusterStore):
    """The store the Kubernetes feed fills, which can also read a pod the watch has not
    delivered yet (the orchestrator's `PodFetcher`: an ADD right after the pod's creation)."""

    def __init__(self) -> None:
        super().__init__()
        self.reader: Callable[[str, str], Awaitable[model.KubeObject | None]] | None = None

    async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None:
        if self.reader is None:
            return None
        return await self.reader(namespace, name)
