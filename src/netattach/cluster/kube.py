"""The Kubernetes feed: the API server as the source of the cluster view, the status and Events.

This module owns every conversation the node daemon has with the API server:

    list + watch      pods with spec.nodeName=<this node>, all Namespaces, all
                      NetworkAttachmentDefinitions and MultiNetworkPolicies, into a `ClusterStore`,
                      trimmed to the fields netattach reads (`kube_objects`)   (KUBE-CACHE)
    fetch_pod         one bounded direct read of a pod the watch has not delivered yet
    fetch_nad         the same for a NAD (KUBE-NADREAD)
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
httpx, whose transport seam lets us add TCP keepalives that notice a dead watch connection, and
turn the API's plain-text answers (`404 page not found` for an API group/version it does not
serve, a CRD not installed) into the `Status` lightkube expects of every error.

Lists and watches are read here, over an HTTP client authenticated by lightkube's own
kubeconfig handling (`build_feed_http`), not by lightkube's list() and watch(), which decode
every object into the typed model at once: a real server's BOOKMARK skeleton
(`spec.containers: null`) or one object the model cannot decode would end the watch, or fail the
whole list. `watch_stream` reads an event's type first and decodes each object on its own
(KUBE-BOOKMARK); an undecodable object is logged once and skipped.

The reflector (one per kind) is client-go's: list → replace that kind in the store → watch from
the list's resourceVersion (with `allowWatchBookmarks=true`); every event, bookmarks and skipped
objects included, advances the resourceVersion; a disconnect, timeout or 5xx backs off
(exponential, capped, jittered) and resumes from the last resourceVersion; `410 Gone`/Expired
relists. The store is marked synced once every kind has listed once. A CRD that is not installed
(404 on its list) counts as an empty, listed kind and is looked for again every
`KubeTiming.missing_crd_recheck` seconds.

Errors raised (publish_status, remove_status, fetch_pod, fetch_nad); everything else is logged
and retried:
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
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Literal

import httpx2
import lightkube
from lightkube import generic_resource
from lightkube.config import client_adapter
from lightkube.resources import core_v1

from netattach.cluster import api_writes, kube_objects, model, store, watch_stream
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
_INVALID: Final = 422
# What a write with a UID precondition gets when the name is another pod's now: 409 from a
# precondition, 422 ("metadata.uid: field is immutable") from a real server's PATCH.
_UID_REFUSALS: Final = frozenset({_CONFLICT, _INVALID})
# Event names are DNS subdomains (253); client-go names them "<object>.<unix nanoseconds hex>".
_EVENT_NAME_MAX: Final = 253
# events.k8s.io caps a note at 1 kB; core/v1 has no cap, but kubectl shows no more either.
EVENT_MESSAGE_MAX: Final = 1024
# client-go's EventCorrelator folds identical events within 10 minutes into one, counting them.
EVENT_FOLD_WINDOW: Final = 600.0
_EVENT_FOLD_MEMORY: Final = 512
_EVENT_QUEUE_MAX: Final = 1000
# A plain-text error answer is kept this long as the Status message.
_PLAIN_ERROR_MAX: Final = 512
_PLAIN_REASONS: Final = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound"}
_BODY_HEADERS: Final = frozenset(
    {"content-type", "content-length", "content-encoding", "transfer-encoding"}
)
# How many undecodable objects are remembered, so each is logged once (KUBE-BOOKMARK).
_UNDECODABLE_MEMORY: Final = 1024


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


# How long the Event sender waits once woken: enough for the call that queued the Event to
# send its reply (a few event-loop turns), little beside an Event's own round trip.
EVENT_PAUSE = 0.005
# How long an Event waits at most while CNI calls are under way: a burst of 200 pods queues ~600
# (one per interface, as Multus records them), each ~0.5 ms of the loop, which the pods' ADDs
# would otherwise share the loop with.
EVENT_DEFER_MAX = 2.0
# Connections of the writes' pool: requests beyond them wait for one to be free (a status patch
# takes ~1 ms of the API's time; a burst of pods makes a few at once).
WRITE_CONNECTIONS = 4


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KubeTiming:
    """Every time bound of the feed, in seconds (tests shrink them)."""

    request_timeout: float = 10.0  # one list page, get, patch or create
    fetch_timeout: float = 5.0  # the direct read of a pod or NAD, on an ADD's path
    status_budget: float = 30.0  # publish_status, all attempts (the ADD waits for it)
    remove_budget: float = 5.0  # remove_status, all attempts (beside the DEL, not on its path)
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
    path: str  # the collection of every namespace, which the watch reads
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
    queued_at: float = 0.0  # time.monotonic() when queued


class _ApiTransport(httpx2.AsyncBaseTransport):
    """Makes every error answer a JSON `Status`, as lightkube's ApiError expects.

    kube-apiserver answers a path under an API group/version it does not serve (a CRD not
    installed) with `404 page not found` in text/plain; lightkube would fail to decode it as JSON
    instead of reporting a 404.
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        content_type = response.headers.get("content-type", "")
        if response.status_code < 400 or content_type.startswith("application/json"):
            return response
        try:
            body = await response.aread()
        finally:
            await response.aclose()
        return _json_error(response.status_code, list(response.headers.items()), body, request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _json_error(
    status: int, headers: list[tuple[str, str]], body: bytes, request: httpx2.Request
) -> httpx2.Response:
    """An error reply as lightkube's `ApiError` reads it: a JSON `Status` as it came, or made
    from a plain-text answer (see `_ApiTransport`)."""
    kept = [(k, v) for k, v in headers if k.lower() not in _BODY_HEADERS]
    content_type = next((v for k, v in headers if k.lower() == "content-type"), "")
    if content_type.startswith("application/json"):
        return httpx2.Response(
            status, headers=[*kept, ("content-type", content_type)], content=body, request=request
        )
    text = body.decode(errors="replace").strip()[:_PLAIN_ERROR_MAX]
    doc = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": text or httpx2.codes.get_reason_phrase(status),
        "reason": _PLAIN_REASONS.get(status, ""),
        "code": status,
    }
    return httpx2.Response(
        status,
        headers=[*kept, ("content-type", "application/json")],
        content=json.dumps(doc).encode(),
        request=request,
    )


def _api_error(
    status: int, headers: list[tuple[str, str]], body: bytes, request: httpx2.Request
) -> lightkube.ApiError:
    return lightkube.ApiError(request=request, response=_json_error(status, headers, body, request))


def _keepalive_options() -> list[tuple[int, int, int]]:
    # A watch on a connection whose peer vanished (a node partition, a NAT timeout) would wait
    # forever: TCP keepalives end it in about a minute.
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


@dataclasses.dataclass(frozen=True, slots=True)
class _Connection:
    config: Any  # lightkube's SingleConfig: the cluster, the user, the kubeconfig's directory
    verify: Any  # the TLS context (or flag) lightkube set up for that cluster and user


def _load_connection(kubeconfig: Path | None) -> _Connection:
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
        # is ours only to add keepalives and JSON errors, so it is handed that context.
        verify = client_adapter.verify_cluster(config.cluster, config.user, config.abs_file)
    except KeyError as exc:  # from_service_account without KUBERNETES_SERVICE_HOST/PORT
        raise errors.InvalidNetworkConfigError(
            f"cannot use {where}", f"environment variable {exc} is not set (not in a pod?)"
        ) from exc
    except (lightkube.ConfigError, OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise errors.InvalidNetworkConfigError(f"cannot load {where}", str(exc)) from exc
    return _Connection(config, verify)


def _transport(connection: _Connection, limits: httpx2.Limits | None = None) -> _ApiTransport:
    return _ApiTransport(
        httpx2.AsyncHTTPTransport(
            verify=connection.verify,
            socket_options=_keepalive_options(),
            limits=httpx2.Limits() if limits is None else limits,
        )
    )


def build_client(
    kubeconfig: Path | None, timing: KubeTiming, *, connection: _Connection | None = None
) -> lightkube.AsyncClient:
    """A lightkube client for the current context of `kubeconfig`, or for the pod's service
    account when None; `errors.InvalidNetworkConfigError` when neither can be used.
    `connection`: that kubeconfig already loaded (`_load_connection`)."""
    if connection is None:
        connection = _load_connection(kubeconfig)
    return lightkube.AsyncClient(
        connection.config,
        timeout=httpx2.Timeout(timing.request_timeout),
        field_manager=COMPONENT,
        transport=_transport(connection),
    )


MERGE_PATCH: Final = "application/merge-patch+json"


def build_feed_http(
    kubeconfig: Path | None,
    timing: KubeTiming,
    *,
    connection: _Connection | None = None,
    limits: httpx2.Limits | None = None,
) -> httpx2.AsyncClient:
    """An HTTP client for the feed's lists and watch streams, authenticated as `build_client`'s
    (lightkube's own kubeconfig handling: token, token file, client certificate, exec plugin).
    `limits`: its connection pool's (httpx's defaults when None)."""
    if connection is None:
        connection = _load_connection(kubeconfig)
    return httpx2.AsyncClient(
        base_url=connection.config.cluster.server,
        auth=client_adapter.user_auth(connection.config.user),
        timeout=httpx2.Timeout(timing.request_timeout, read=None),
        transport=_transport(connection, limits),
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


def _object_key(kind: str, obj: model.KubeObject) -> tuple[str, str, str]:
    return (kind, model.namespace_of(obj), model.name_of(obj))


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
        # One kubeconfig read and one TLS context for both clients: a context holds the CA
        # bundle's certificates, ~1 MB each.
        connection = _load_connection(kubeconfig)
        self._client = build_client(kubeconfig, self.timing, connection=connection)
        self._shared = kube_objects.Shared()
        self._http = build_feed_http(kubeconfig, self.timing, connection=connection)
        # The writes of every pod start and end (status patches, Events) have a pool of their
        # own: on each request httpx checks every connection of its pool, and the feed's holds a
        # long-lived watch stream per kind; that check was the largest share of the daemon's
        # CPU per pod in a burst. The writes' few connections are reused.
        self._writes = build_feed_http(
            kubeconfig,
            self.timing,
            connection=connection,
            limits=httpx2.Limits(
                max_connections=WRITE_CONNECTIONS, max_keepalive_connections=WRITE_CONNECTIONS
            ),
        )
        # ... and the same writes made lean (`api_writes`), that client kept for what they hand
        # back to it (a 401: its auth flow refreshes the credentials, shared with them).
        verify = connection.verify
        self._writer = api_writes.ApiWriter(
            connection.config.cluster.server,
            ssl_context=verify if isinstance(verify, ssl.SSLContext) else None,
            auth=self._writes.auth,
            fallback=self._writes,
            error_reply=_api_error,
            max_connections=WRITE_CONNECTIONS,
        )
        # Objects already reported as undecodable, with the resourceVersion reported.
        self._undecodable: collections.OrderedDict[tuple[str, str, str], str] = (
            collections.OrderedDict()
        )
        kinds = (
            _Kind(
                model.POD,
                core_v1.Pod,
                True,
                "pods",
                "/api/v1/pods",
                False,
                functools.partial(kube_objects.trim_pod, shared=self._shared),
            ),
            _Kind(
                model.NAMESPACE,
                core_v1.Namespace,
                False,
                "namespaces",
                "/api/v1/namespaces",
                False,
                functools.partial(kube_objects.trim_namespace, shared=self._shared),
            ),
            _Kind(
                model.NAD,
                NetworkAttachmentDefinition,
                True,
                "network-attachment-definitions",
                f"/apis/{model.API_VERSIONS[model.NAD]}/network-attachment-definitions",
                True,
                functools.partial(kube_objects.trim_nad, shared=self._shared),
            ),
            _Kind(
                model.POLICY,
                MultiNetworkPolicy,
                True,
                "multi-networkpolicies",
                f"/apis/{model.API_VERSIONS[model.POLICY]}/multi-networkpolicies",
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
        # Set while no CNI call is under way (the daemon's server keeps it): Events wait for
        # it, up to `EVENT_DEFER_MAX` seconds, so a burst of pods starts before its Events go
        # out. None: they never wait.
        self.idle: asyncio.Event | None = None
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
                if code == _NOT_FOUND and reflector.spec.custom and reflector.resource_version:
                    # Its CRD was deleted: a list says so (and empties the kind), then the
                    # kind is looked for again every missing_crd_recheck.
                    log.debug("watch of %s: 404; listing again", kind)
                    reflector.resource_version = None
                    continue
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
        objects: list[model.KubeObject] = []
        packed: list[kube_objects.Packed] = []  # each page's trimmed objects, unpacked at the end
        skipped: set[tuple[str, str]] = set()
        try:
            version: str | None = None
            async for page_version, page in self._list_pages(reflector):
                version = page_version
                trimmed = []
                for event in page:
                    if isinstance(event, watch_stream.Undecodable):
                        self._skip_undecodable(event)
                        skipped.add((event.namespace, event.name))
                    elif isinstance(event, watch_stream.Change):
                        trimmed.append(spec.trim(event.obj))
                packed.append(kube_objects.pack(trimmed))
            _release_free_memory()
            objects = [obj for data in packed for obj in kube_objects.unpack(data)]
            del packed
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
        self._replace_kind(spec.kind, objects, keep=skipped)
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

    async def _list_pages(
        self, reflector: _Reflector
    ) -> AsyncIterator[tuple[str, Iterator[watch_stream.Event]]]:
        """The list's pages (`list_chunk` objects each), each item decoded on its own (as the
        page is iterated), so one the client cannot decode is skipped, not the whole list
        (KUBE-BOOKMARK)."""
        spec = reflector.spec
        params: dict[str, str] = {"limit": str(self.timing.list_chunk)}
        if reflector.fields:
            params["fieldSelector"] = ",".join(f"{k}={v}" for k, v in reflector.fields.items())
        while True:
            async with asyncio.timeout(self.timing.request_timeout):
                response = await self._http.get(spec.path, params=params)
            if response.is_error:
                raise lightkube.ApiError(request=response.request, response=response)
            version, cont, page = watch_stream.parse_list(
                response.content, spec.resource, spec.kind
            )
            yield version, page
            if not cont:
                return
            params["continue"] = cont

    def _replace_kind(
        self, kind: str, objects: list[model.KubeObject], *, keep: set[tuple[str, str]]
    ) -> None:
        """Make the store's `kind` the listed `objects`; those `keep` names stay as they are."""
        # No await in here: readers on the event loop see the kind before or after, never half.
        cached = self._store.objects(kind)
        # Nothing to drop on the first list: no set of its keys then, which would leave
        # thousands of holes in the heap between the objects kept.
        if cached:
            fresh = {(model.namespace_of(obj), model.name_of(obj)) for obj in objects} | keep
            for old in cached:
                key = (model.namespace_of(old), model.name_of(old))
                if key not in fresh:
                    self._store.remove(kind, *key)
        for obj in objects:
            self._store.upsert(obj)

    async def _watch(self, reflector: _Reflector) -> None:
        spec = reflector.spec
        params: dict[str, str] = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            # client-go spreads its watches' ends over [timeout, 2*timeout).
            "timeoutSeconds": str(int(self.timing.watch_timeout * (1 + random.random()))),  # noqa: S311
        }
        if reflector.resource_version:
            params["resourceVersion"] = reflector.resource_version
        if reflector.fields:
            params["fieldSelector"] = ",".join(f"{k}={v}" for k, v in reflector.fields.items())
        log.debug("watching %s from resourceVersion %s", spec.plural, reflector.resource_version)
        async with self._http.stream("GET", spec.path, params=params) as response:
            if response.is_error:
                await response.aread()
                raise lightkube.ApiError(request=response.request, response=response)
            lines = response.aiter_lines()
            while True:
                try:
                    async with asyncio.timeout(self.timing.watch_idle_timeout):
                        line = await anext(lines)
                except StopAsyncIteration:
                    return  # the server ended the watch (timeoutSeconds): watch again
                if line.strip():
                    # Whatever else is ready runs first: a status write's reply, on a pod
                    # start's path, often arrives with the watch event of that same write.
                    await asyncio.sleep(0)
                    self._apply(reflector, watch_stream.parse_line(line, spec.resource, spec.kind))

    def _apply(self, reflector: _Reflector, event: watch_stream.Event) -> None:
        spec = reflector.spec
        if isinstance(event, watch_stream.Bookmark):
            version = event.resource_version
        elif isinstance(event, watch_stream.Undecodable):
            self._skip_undecodable(event)
            if event.type == "DELETED" and event.name:
                # Gone is gone, whatever its last version looked like.
                self._store.remove(spec.kind, event.namespace, event.name)
            version = event.resource_version
        else:
            trimmed = spec.trim(event.obj)
            if event.type in ("ADDED", "MODIFIED"):
                self._store.upsert(trimmed)
                self._undecodable.pop(_object_key(spec.kind, trimmed), None)
            elif event.type == "DELETED":
                self._store.remove(spec.kind, model.namespace_of(trimmed), model.name_of(trimmed))
            version = model.meta(trimmed).get("resourceVersion", "")
        if version:
            reflector.resource_version = version
        reflector.failures = 0

    def _skip_undecodable(self, event: watch_stream.Undecodable) -> None:
        """Log an object the client cannot decode once (not on each of its events); skip it."""
        key = (event.kind, event.namespace, event.name)
        if key in self._undecodable:
            self._undecodable[key] = event.resource_version
            self._undecodable.move_to_end(key)
            log.debug("skipped %s %s again (undecodable)", event.type, event.describe())
            return
        self._undecodable[key] = event.resource_version
        while len(self._undecodable) > _UNDECODABLE_MEMORY:
            self._undecodable.popitem(last=False)
        log.warning(
            "skipped %s %s at resourceVersion %s: the client cannot decode it (%s); "
            "the cache keeps its last readable version",
            event.type,
            event.describe(),
            event.resource_version or "?",
            event.why,
        )

    # -- direct read (KUBE-CACHE) ---------------------------------------------------------------

    async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None:
        """Read the pod from the API (one request, `fetch_timeout`); None when there is none.

        Kept in the store when it is of this node and newer than what the watch has seen, so a
        later lookup finds it; an older one could be a pod whose deletion the watch delivered
        while this read was on its way.
        """
        pod = await self._fetch(core_v1.Pod, "pod", namespace, name)
        if pod is None:
            return None
        trimmed = kube_objects.trim_pod(pod, shared=self._shared)
        on_node = (trimmed.get("spec") or {}).get("nodeName") == self.node_name
        if on_node and self._store.lookup_pod(namespace, name) is None:
            self._keep_if_newer(model.POD, trimmed)
        return trimmed

    async def fetch_nad(self, namespace: str, name: str) -> model.KubeObject | None:
        """Read the NAD from the API (one request, `fetch_timeout`); None when there is none,
        or when its CRD is not installed (a 404 too).

        KUBE-NADREAD: the watch may not have delivered a NAD created a moment ago, nor any
        while it reconnects after an API restart; Multus reads NADs live. Kept in the store on
        the terms of `fetch_pod`.
        """
        nad = await self._fetch(NetworkAttachmentDefinition, "NAD", namespace, name)
        if nad is None:
            return None
        trimmed = kube_objects.trim_nad(nad, shared=self._shared)
        if self._store.lookup_nad(namespace, name) is None:
            self._keep_if_newer(model.NAD, trimmed)
        return trimmed

    async def _fetch(self, resource: type[Any], what: str, namespace: str, name: str) -> Any:
        """One GET of `resource` named `namespace/name`, within `fetch_timeout`; None on 404."""
        try:
            async with asyncio.timeout(self.timing.fetch_timeout):
                return await self._client.get(resource, name, namespace=namespace)
        except Exception as exc:
            if _status_code(exc) == _NOT_FOUND:
                return None
            if not (_is_transient(exc) or isinstance(exc, httpx2.HTTPError)):
                raise
            raise errors.TryAgainLaterError(
                f"cannot read {what} {namespace}/{name} from the API", _describe(exc)
            ) from exc

    def _keep_if_newer(self, kind: str, trimmed: model.KubeObject) -> None:
        """Store an object read directly when it is newer than what the watch of `kind` has
        seen: an older one may be one whose deletion the watch delivered meanwhile."""
        version = model.meta(trimmed).get("resourceVersion", "")
        if _newer(version, self._reflectors[kind].resource_version):
            self._store.upsert(trimmed)

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
        outcome = await self._patch_status(
            namespace, pod, text, uid=uid, budget=self.timing.status_budget, verb="publish"
        )
        if outcome == "gone":
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

    async def _send_json(
        self, method: str, path: str, body: Mapping[str, object], content_type: str
    ) -> None:
        """One write to the API with a JSON body (`api_writes`), its reply not decoded; a
        refusal raised as lightkube's `ApiError`. For the writes every pod start makes (its
        status, its Events): a typed object built from each reply costs more CPU than the rest
        of the call."""
        await self._writer.send(
            method,
            f"{path}?fieldManager={COMPONENT}",
            json.dumps(body, separators=(",", ":")).encode(),
            content_type,
        )

    async def _patch_status(
        self, namespace: str, pod: str, text: str | None, *, uid: str, budget: float, verb: str
    ) -> Literal["written", "gone", "another pod"]:
        """The merge patch, retried within `budget`: "written", "gone" (404), or "another pod"
        (the name is a recreated pod's now: nothing written, nothing to fail for)."""
        metadata: dict[str, object] = {"annotations": {model.STATUS_ANNOTATION: text}}
        if uid:
            # A precondition, not a change: a recreated pod of the same name refuses it (409,
            # or 422 from a real server's PATCH: metadata.uid is immutable).
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
                    # Raw JSON, the reply not decoded: lightkube's patch() would build a whole
                    # typed Pod from it, the largest share of the daemon's CPU per ADD here.
                    await self._send_json(
                        "PATCH", f"/api/v1/namespaces/{namespace}/pods/{pod}", patch, MERGE_PATCH
                    )
                return "written"
            except Exception as exc:
                failure = exc
            code = _status_code(failure)
            if code == _NOT_FOUND:
                return "gone"
            if code in _UID_REFUSALS and uid and await self._is_other_pod(namespace, pod, uid):
                log.debug(
                    "%s network-status of %s/%s: the name is another pod's now (%s, not UID %s); "
                    "nothing written",
                    verb,
                    namespace,
                    pod,
                    code,
                    uid,
                )
                return "another pod"
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
        """After a 409/422 on a patch with a UID precondition: is the name another pod's now?"""
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
                    _describe(exc),
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
                await self._send_json(
                    "PATCH",
                    f"/api/v1/namespaces/{request.namespace}/events/{earlier.name}",
                    {"count": earlier.count + 1, "lastTimestamp": stamp},
                    MERGE_PATCH,
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
            "source": {"component": COMPONENT, "host": self.node_name},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.node_name,
        }
        await self._send_json(
            "POST", f"/api/v1/namespaces/{request.namespace}/events", event, "application/json"
        )
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
        await self._http.aclose()
        await self._writer.aclose()
        await self._writes.aclose()
        await self._client.aclose()


class KubeView(store.ClusterStore):
    """The store the Kubernetes feed fills, which can also read a pod or NAD the watch has not
    delivered yet (the orchestrator's `PodFetcher` and `NADFetcher`: an ADD right after the
    pod's creation, or the NAD's, or an API restart)."""

    def __init__(self) -> None:
        super().__init__()
        self.reader: Callable[[str, str], Awaitable[model.KubeObject | None]] | None = None
        self.nad_reader: Callable[[str, str], Awaitable[model.KubeObject | None]] | None = None

    async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None:
        if self.reader is None:
            return None
        return await self.reader(namespace, name)

    async def fetch_nad(self, namespace: str, name: str) -> model.KubeObject | None:
        if self.nad_reader is None:
            return None
        return await self.nad_reader(namespace, name)
