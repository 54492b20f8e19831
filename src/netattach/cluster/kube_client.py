"""Client set-up for the Kubernetes feed: one kubeconfig read, the connections made from it, the
feed's time bounds, and what a failed request means.

Why lightkube: it is a maintained client (typed models, an asyncio client, generic resources for
CRDs) that owns what we must not hand-roll: kubeconfig parsing (contexts, CA files and data, client
certificates, exec plugins), TLS set-up and bearer-token auth. In-cluster it reads the projected
service-account token from its file and, when the API answers 401, reads the file again and
retries (`BearerTokenFileAuth`, client-go's tokenFileAuth), so a token the kubelet rotated is
picked up without a restart; a kubeconfig `tokenFile` gets the same treatment. Its transport is
httpx, whose transport seam lets us add TCP keepalives that notice a dead watch connection, and
turn the API's plain-text answers (`404 page not found` for an API group/version it does not
serve, a CRD not installed) into the `Status` lightkube expects of every error.

    ApiClients        the feed's connections: lightkube's client (direct reads), an HTTP client
                      for the lists and watch streams, and the pool of the writes (`api_writes`)
    KubeTiming        every time bound of the feed (tests shrink them)
    status_code, describe, retry_after, is_transient
                      what a failed request says, for the verbs' retry decisions

Errors raised: errors.InvalidNetworkConfigError (no usable kubeconfig / in-cluster config).
"""

import contextlib
import dataclasses
import json
import random
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import httpx2
import lightkube
from lightkube import generic_resource
from lightkube.config import client_adapter

from netattach.cluster import api_writes, model
from netattach.cni import errors

NetworkAttachmentDefinition = generic_resource.create_namespaced_resource(
    model.NAD_GROUP, "v1", model.NAD, "network-attachment-definitions"
)
MultiNetworkPolicy = generic_resource.create_namespaced_resource(
    model.NAD_GROUP, "v1beta1", model.POLICY, "multi-networkpolicies"
)
PolicyPeerGroup = generic_resource.create_global_resource(
    model.PEER_GROUP_API.split("/")[0], "v1alpha1", model.PEER_GROUP, "policypeergroups"
)

COMPONENT: Final = "netattach"
# The feed's one logger, whichever verb's module logs: operators name it in `logging.loggers`
# (docs/configuration.md), as they did before the feed was split by verb.
LOGGER: Final = "netattach.cluster.kube"
# API codes worth another try: a conflict, too many requests, the server or a proxy in trouble.
RETRYABLE_CODES: Final = frozenset({409, 429, 500, 502, 503, 504})
GONE: Final = 410
NOT_FOUND: Final = 404
CONFLICT: Final = 409
INVALID: Final = 422
# A plain-text error answer is kept this long as the Status message.
_PLAIN_ERROR_MAX: Final = 512
_PLAIN_REASONS: Final = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound"}
_BODY_HEADERS: Final = frozenset(
    {"content-type", "content-length", "content-encoding", "transfer-encoding"}
)
# Connections of the writes' pool: requests beyond them wait for one to be free (a status patch
# takes ~1 ms of the API's time; a burst of pods makes a few at once).
WRITE_CONNECTIONS = 4
MERGE_PATCH: Final = "application/merge-patch+json"


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


def api_error(
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


def status_code(exc: BaseException) -> int | None:
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


def describe(exc: BaseException) -> str:
    if isinstance(exc, lightkube.ApiError):
        return f"{exc.status.code} {exc.status.reason}: {exc.status.message}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    if isinstance(response, httpx2.Response):
        with contextlib.suppress(ValueError):
            value = response.headers.get("Retry-After")
            return None if value is None else float(value)
    return None


def is_transient(exc: BaseException) -> bool:
    """A failure another attempt may get past: transport, timeout, or a retryable code."""
    if isinstance(exc, httpx2.TransportError | TimeoutError | lightkube.ConfigError):
        # ConfigError: the token file is missing for a moment while the kubelet swaps it.
        return True
    code = status_code(exc)
    return code is not None and code in RETRYABLE_CODES


class ApiClients:
    """The feed's connections to the API server of `kubeconfig` (None: the pod's service
    account), all made from one kubeconfig read and one TLS context: a context holds the CA
    bundle's certificates, ~1 MB each.

        client    lightkube's, for the direct reads (a pod, a NAD)
        http      the lists and watch streams (`kube_watch`)
        writes    the pool of the writes every pod start and end makes (status patches,
                  Events), and `writer`, the same writes made lean (`api_writes`)
    """

    def __init__(self, kubeconfig: Path | None, timing: KubeTiming) -> None:
        connection = _load_connection(kubeconfig)
        self.client = build_client(kubeconfig, timing, connection=connection)
        self.http = build_feed_http(kubeconfig, timing, connection=connection)
        # The writes of every pod start and end (status patches, Events) have a pool of their
        # own: on each request httpx checks every connection of its pool, and the feed's holds a
        # long-lived watch stream per kind; that check was the largest share of the daemon's
        # CPU per pod in a burst. The writes' few connections are reused.
        self.writes = build_feed_http(
            kubeconfig,
            timing,
            connection=connection,
            limits=httpx2.Limits(
                max_connections=WRITE_CONNECTIONS, max_keepalive_connections=WRITE_CONNECTIONS
            ),
        )
        # ... and the same writes made lean (`api_writes`), that client kept for what they hand
        # back to it (a 401: its auth flow refreshes the credentials, shared with them).
        verify = connection.verify
        self.writer = api_writes.ApiWriter(
            connection.config.cluster.server,
            ssl_context=verify if isinstance(verify, ssl.SSLContext) else None,
            auth=self.writes.auth,
            fallback=self.writes,
            error_reply=api_error,
            max_connections=WRITE_CONNECTIONS,
        )

    async def send_json(
        self, method: str, path: str, body: Mapping[str, object], content_type: str
    ) -> None:
        """One write to the API with a JSON body (`api_writes`), its reply not decoded; a
        refusal raised as lightkube's `ApiError`. For the writes every pod start makes (its
        status, its Events): a typed object built from each reply costs more CPU than the rest
        of the call."""
        await self.writer.send(
            method,
            f"{path}?fieldManager={COMPONENT}",
            json.dumps(body, separators=(",", ":")).encode(),
            content_type,
        )

    async def aclose(self) -> None:
        await self.http.aclose()
        await self.writer.aclose()
        await self.writes.aclose()
        await self.client.aclose()
