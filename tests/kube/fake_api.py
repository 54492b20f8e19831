"""An in-repo Kubernetes API server: a real HTTP server on 127.0.0.1 for the Kubernetes tests.

`FakeKubeApi` serves, with the real API server's URLs, verbs, status codes and `Status` bodies:

- core v1 `namespaces` (cluster-scoped; `/status`), `pods` (`/status`) and `events`;
- `k8s.cni.cncf.io/v1` `network-attachment-definitions` and `k8s.cni.cncf.io/v1beta1`
  `multi-networkpolicies`, namespaced, as served from the CRDs in deploy/crds (pass their schemas,
  `crds.load_crd_schemas()`, to prune, default and validate like the apiextensions server);
- `/api`, `/apis`, `/apis/k8s.cni.cncf.io`, the discovery documents `/api/v1`,
  `/apis/k8s.cni.cncf.io/v1` and `/v1beta1`, `/version`, `/healthz`, `/livez`, `/readyz`.

Behaviour (details and the simplifications against the real server: README.md here):
one global resourceVersion counter, bumped by every write, as etcd's revision; lists carry it;
no-op writes do not bump it; watches from a resourceVersion replay the retained history
(`history_limit` events; older, or dropped by `compact()`: an ERROR event with a 410 Expired
Status), `""`/`"0"` start with synthetic ADDED events; bookmarks every `bookmark_interval`
seconds with `allowWatchBookmarks=true`, carrying kube-apiserver's skeleton object (a Pod's has
`spec.containers: null`); `timeoutSeconds` ends the stream cleanly; label and field selectors on
lists and watches (an object leaving a watch's selector arrives as DELETED, as its last version
that matched); merge, strategic merge (not for custom resources: 415), JSON and (simplified)
apply patches; 409 AlreadyExists/Conflict, 404 NotFound (`404 page not found` in text/plain for
a path no API group/version serves), 422 Invalid (also a PATCH that changes `metadata.uid`), 401
Unauthorized, 403 for new content in a Terminating namespace; graceful pod deletion (MODIFIED
with deletionTimestamp, then DELETED once deleted with grace 0). Where this differs from
reference/real-world.md, the fake is what is wrong.

The test hooks (`create`, `get`, `list`, `update`, `patch`, `delete`, `events_for`, `compact`,
`restart`, `stop`, `start`, `set_token`, `set_crd_installed`, `set_namespace_controller`,
`set_bookmark_interval`, `requests`, `inject_error`, `active_watches`, `wait_for_watches`) are
the `api.KubeApi` interface. Hook writes act as the
control plane would (the scheduler, the kubelet): they may set a pod's status and spec freely,
while the same writes over HTTP follow the API's rules. Stdlib only.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import collections
import contextlib
import copy
import dataclasses
import datetime
import json
import queue
import random
import re
import select
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.kube.api import (
    PATCH_CONTENT_TYPES,
    ApiStatusError,
    Connection,
    Obj,
    PatchType,
    RequestRecord,
    WatchInfo,
)
from tests.kube.patches import PatchError, json_patch, merge_patch, strategic_merge_patch
from tests.kube.resources import (
    EVENTS,
    META_FIELDS,
    NAMESPACES,
    PODS,
    RESOURCES,
    Resource,
    bookmark_object,
    default_namespace,
    default_pod,
    field_value,
    metadata_type_problem,
    pod_qos,
    pod_update_problem,
    resource_for,
    resource_of,
    validate_event,
    validate_metadata,
    validate_pod,
)
from tests.kube.schema import Cause, prune_and_default, validate
from tests.kube.selectors import (
    FieldSelector,
    FieldTerm,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
GIT_VERSION = "v1.31.0"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# Metadata only the server sets: a client's value is dropped on create, the stored one kept on
# update.
_SERVER_SET = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)
_GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_MERGE = PATCH_CONTENT_TYPES["merge"]
_STRATEGIC = PATCH_CONTENT_TYPES["strategic"]
_JSON_PATCH = PATCH_CONTENT_TYPES["json"]
_APPLY = PATCH_CONTENT_TYPES["apply"]
_LIVENESS_POLL = 0.2
_MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
_NAMESPACE_MISMATCH = (
    "the namespace of the provided object does not match the namespace sent on the request"
)
_RV_ON_CREATE = (
    "Internal error occurred: resourceVersion should not be set on objects to be created"
)
_APPLY_NEEDS_MANAGER = (
    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
    "is required for apply patch"
)


# -- Status objects ----------------------------------------------------------------------------


def status_failure(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    status: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        status["details"] = details
    status["code"] = code
    return status


def _error(code: int, reason: str, message: str, details: Obj | None = None) -> ApiStatusError:
    return ApiStatusError(status_failure(code, reason, message, details))


def not_found(res: Resource, name: str) -> ApiStatusError:
    return _error(404, "NotFound", f'{res.qualified} "{name}" not found', res.details(name))


def already_exists(res: Resource, name: str) -> ApiStatusError:
    return _error(
        409, "AlreadyExists", f'{res.qualified} "{name}" already exists', res.details(name)
    )


def conflict(res: Resource, name: str, why: str | None = None) -> ApiStatusError:
    why = why or _MODIFIED
    message = f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}'
    return _error(409, "Conflict", message, res.details(name))


def uid_conflict(res: Resource, name: str, precondition: str, in_meta: str) -> ApiStatusError:
    """The 409 of a UID precondition that does not hold, worded as the API server words it."""
    why = f"Precondition failed: UID in precondition: {precondition}, UID in object meta: {in_meta}"
    return conflict(res, name, why)


def invalid(res: Resource, name: str, causes: list[Cause]) -> ApiStatusError:
    texts = [cause.text() for cause in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: Obj = {"name": name}
    if res.group:
        details["group"] = res.group
    details["kind"] = res.kind
    details["causes"] = [cause.as_json() for cause in causes]
    return _error(422, "Invalid", f'{res.qualified_kind} "{name}" is invalid: {joined}', details)


_FINISHED = ("Succeeded", "Failed")
PAGE_NOT_FOUND = "404 page not found\n"
"""Go's http.NotFound body: what a path no API group/version serves gets (text/plain)."""


class PageNotFoundError(Exception):
    """A path the server serves nothing at: 404 `404 page not found`, not a Status."""


def bad_request(message: str) -> ApiStatusError:
    return _error(400, "BadRequest", message)


def expired_status(message: str) -> Obj:
    return status_failure(410, "Expired", message)


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _selected(obj: Obj, labels: LabelSelector, fields: FieldSelector) -> bool:
    if not labels.matches(obj.get("metadata", {}).get("labels")):
        return False
    return fields.matches(lambda field: field_value(obj, field))


def _without_rv(obj: Obj) -> Obj:
    meta = {
        k: v
        for k, v in obj.get("metadata", {}).items()
        if k not in ("resourceVersion", "managedFields")
    }
    return {**obj, "metadata": meta}


# -- internal records --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Change:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    res: Resource
    obj: Obj
    old: Obj | None


@dataclasses.dataclass(eq=False)
class _Watcher:
    res: Resource
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    since: int
    info: WatchInfo
    queue: queue.Queue[_Change | None] = dataclasses.field(default_factory=queue.Queue)
    ends_cleanly: bool = False  # the None in `queue` ends the stream with its last chunk

    def matches(self, obj: Obj) -> bool:
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return _selected(obj, self.labels, self.fields)

    def event_for(self, change: _Change) -> tuple[str, Obj] | None:
        """The event this watcher sees for a change, if any (selector enter/leave included)."""
        if change.rv <= self.since:
            return None
        new_match = self.matches(change.obj)
        if change.type != "MODIFIED":
            return (change.type, change.obj) if new_match else None
        old_match = change.old is not None and self.matches(change.old)
        if new_match and old_match:
            return "MODIFIED", change.obj
        if new_match:
            return "ADDED", change.obj
        if old_match and change.old is not None:
            # As the real watch cache: the object's last version that matched, carrying the
            # resourceVersion of the change that took it out of the selection.
            last = copy.deepcopy(change.old)
            last["metadata"]["resourceVersion"] = change.obj["metadata"]["resourceVersion"]
            return "DELETED", last
        return None


@dataclasses.dataclass
class _Fault:
    code: int
    method: str | None
    path: re.Pattern[str] | None
    remaining: int
    reason: str
    message: str


@dataclasses.dataclass
class _Request:
    method: str
    path: str
    query: dict[str, str]
    headers: Mapping[str, str]
    content_type: str | None
    body: bytes


@dataclasses.dataclass
class _Response:
    code: int
    body: Any
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    text: bool = False


@dataclasses.dataclass
class _WatchStart:
    watcher: _Watcher | None
    initial: list[Obj]
    initial_end_bookmark: int | None = None
    error: Obj | None = None
    timeout: float | None = None
    bookmarks: bool = False


# -- the fake ----------------------------------------------------------------------------------


class FakeKubeApi:
    """A Kubernetes API server in a thread; `start()` it (or use it as a context manager)."""

    is_fake = True

    def __init__(
        self,
        *,
        token: str | None = None,
        history_limit: int = 1000,
        bookmark_interval: float = 1.0,
        crd_schemas: Mapping[str, Obj] | None = None,
        namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._lock = threading.RLock()
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {r.key: {} for r in RESOURCES}
        self._rv = 0
        self._history: collections.deque[_Change] = collections.deque()
        self._history_limit = history_limit
        self._compacted = 0
        self._watchers: set[_Watcher] = set()
        self._requests: list[RequestRecord] = []
        self._faults: list[_Fault] = []
        self._uninstalled: set[Resource] = set()  # custom resources whose CRD is "deleted"
        self._namespace_controller = True
        self._token = token
        self._bookmark_interval = bookmark_interval
        self._schemas: dict[str, Obj] = dict(crd_schemas or {})
        self._host = host
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        self._restart_timer: threading.Timer | None = None
        for name in namespaces:
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> FakeKubeApi:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self._port}"

    @property
    def serving(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        """Listen (again) on the same port, or on an ephemeral one the first time."""
        if self._restart_timer is not None:
            self._restart_timer.cancel()
            self._restart_timer = None
        self._start_serving()

    def stop(self) -> None:
        """Close the listening socket and every connection; the data is kept."""
        if self._restart_timer is not None:
            self._restart_timer.cancel()
            self._restart_timer = None
        self._stop_serving()

    def restart(self, downtime: float = 0.3, *, wait: bool = True, compact: bool = False) -> None:
        """An API server restart mid-watch: every connection is cut (watches end without their
        terminating chunk), connections are refused for `downtime` seconds, then the server
        listens again on the same port with the same data. `compact=True` also drops the event
        history, as a restarted server's cold watch cache: re-watching from an old
        resourceVersion then gets 410 Expired. With `wait=False` this returns at once and the
        server comes back in the background."""
        self._stop_serving()
        if compact:
            self.compact()
        if wait:
            time.sleep(downtime)
            self._start_serving()
        else:
            timer = threading.Timer(downtime, self._start_serving)
            timer.daemon = True
            self._restart_timer = timer
            timer.start()

    def _start_serving(self) -> None:
        if self._server is not None:
            return
        last_error: OSError | None = None
        for _ in range(100):
            try:
                server = _Server((self._host, self._port), self)
                break
            except OSError as error:  # the port may linger for a moment after a restart
                last_error = error
                time.sleep(0.02)
        else:
            raise RuntimeError(f"cannot listen on {self._host}:{self._port}: {last_error}")
        self._port = server.server_address[1]
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"fake-kube-api:{self._port}",
            daemon=True,
        )
        self._server = server
        self._thread = thread
        thread.start()

    def _stop_serving(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        with self._lock:
            for watcher in list(self._watchers):
                watcher.queue.put(None)
        with self._conn_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._conn_lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    # -- configuration hooks --------------------------------------------------------------------

    def set_namespace_controller(self, running: bool) -> None:
        """Whether a deleted namespace is emptied and removed (True, the default, at once) or
        stays Terminating, refusing new content, as on a server without a namespace controller."""
        with self._lock:
            self._namespace_controller = running

    def set_crd_installed(self, kind: str, installed: bool) -> None:
        """Serve a custom resource (`kind`) or not, as if its CRD were created or deleted:
        its paths then get a real server's `404 page not found` (text/plain), discovery omits
        it, its open watches end; its objects are kept for when it is served again."""
        res = resource_for(kind)
        if not res.custom:
            raise ValueError(f"{kind} is not a custom resource")
        with self._lock:
            if installed:
                self._uninstalled.discard(res)
                return
            self._uninstalled.add(res)
            for watcher in self._watchers:
                if watcher.res is res:  # the server ends them: the resource has no storage now
                    watcher.ends_cleanly = True
                    watcher.queue.put(None)

    def _served(self) -> builtins.list[Resource]:
        with self._lock:
            return [r for r in RESOURCES if r not in self._uninstalled]

    def set_token(self, token: str | None) -> None:
        """Require `Authorization: Bearer <token>` (None: accept any request)."""
        self._token = token

    @property
    def token(self) -> str | None:
        return self._token

    def set_bookmark_interval(self, seconds: float) -> None:
        """How often a watch with allowWatchBookmarks=true gets a BOOKMARK (new watches)."""
        self._bookmark_interval = seconds

    def connection(self) -> Connection:
        return Connection(self.base_url, self._token, None)

    def kubeconfig_text(self, namespace: str = "default") -> str:
        user = f"    token: {json.dumps(self._token)}\n" if self._token else "    {}\n"
        return (
            "apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            "- name: netattach-fake\n"
            "  cluster:\n"
            f"    server: {json.dumps(self.base_url)}\n"
            "contexts:\n"
            "- name: netattach-fake\n"
            "  context:\n"
            "    cluster: netattach-fake\n"
            "    user: netattach-fake\n"
            f"    namespace: {json.dumps(namespace)}\n"
            "current-context: netattach-fake\n"
            "preferences: {}\n"
            "users:\n"
            "- name: netattach-fake\n"
            "  user:\n" + user
        )

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(self.kubeconfig_text(), encoding="utf-8")
        return path

    # -- history hooks --------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        """The current (latest) resourceVersion."""
        with self._lock:
            return str(self._rv)

    def compact(self) -> str:
        """Drop the event history (as an etcd compaction): a watch from any resourceVersion
        older than the current one now gets 410 Expired. Returns the current resourceVersion.
        Open watches are not affected."""
        with self._lock:
            self._history.clear()
            self._compacted = self._rv
            return str(self._rv)

    # -- request log and faults -----------------------------------------------------------------

    @property
    def requests(self) -> list[RequestRecord]:
        """Every HTTP request answered so far (hook calls are not requests), oldest first."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def inject_error(
        self,
        code: int,
        *,
        method: str | None = None,
        path: str | None = None,
        times: int = 1,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next `times` requests matching `method` and the regex `path` (searched in
        the URL path) with a `Status` of `code`, after authentication. A 410 on a watch request
        arrives as the real server sends it: HTTP 200 and an ERROR event. 429 carries
        Retry-After: 1."""
        with self._lock:
            self._faults.append(
                _Fault(
                    code=code,
                    method=method.upper() if method else None,
                    path=re.compile(path) if path else None,
                    remaining=times,
                    reason=reason or _REASONS.get(code, "Unknown"),
                    message=message or f"injected by the test: {code}",
                )
            )

    @property
    def active_watches(self) -> list[WatchInfo]:
        with self._lock:
            return [w.info for w in self._watchers]

    def wait_for_watches(
        self, count: int = 1, *, path_contains: str = "", timeout: float = 5.0
    ) -> None:
        """Wait until at least `count` watches whose path contains `path_contains` are open."""
        deadline = time.monotonic() + timeout
        while True:
            watches = [w for w in self.active_watches if path_contains in w.path]
            if len(watches) >= count:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"expected {count} watch(es) on paths containing {path_contains!r}, "
                    f"have {[w.path for w in self.active_watches]}"
                )
            time.sleep(0.01)

    # -- object hooks ---------------------------------------------------------------------------

    def create(self, obj: Obj) -> Obj:
        """Create an object as the control plane would (a pod keeps the status it is given)."""
        res = resource_of(obj)
        namespace = (
            ((obj.get("metadata") or {}).get("namespace") or "default") if res.namespaced else None
        )
        return self._create(res, obj, namespace, privileged=True)

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        res = resource_for(kind)
        with self._lock:
            obj = self._objects[res.key].get((self._ns(res, namespace), name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        res = resource_for(kind)
        labels, fields = self._selectors(res, label_selector, field_selector)
        with self._lock:
            return [copy.deepcopy(o) for o in self._select(res, namespace, labels, fields)]

    def update(self, obj: Obj) -> Obj:
        """Replace an object as the control plane would (spec and status may change); a set
        `metadata.resourceVersion` must be current (ApiStatusError 409 otherwise)."""
        res = resource_of(obj)
        meta = obj.get("metadata", {})
        namespace = (meta.get("namespace") or "default") if res.namespaced else None
        result, _ = self._update(res, obj, namespace, meta.get("name", ""), None, privileged=True)
        return result

    def patch(
        self,
        kind: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
    ) -> Obj:
        res = resource_for(kind)
        body = json.dumps(patch).encode()
        query = {"fieldManager": "netattach-tests"}
        result, _ = self._patch(
            res,
            self._ns(res, namespace),
            name,
            None,
            PATCH_CONTENT_TYPES[patch_type],
            body,
            query,
            privileged=True,
        )
        return result

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        res = resource_for(kind)
        self._delete(res, self._ns(res, namespace), name, None, control_plane=True)

    def events_for(self, namespace: str, pod: str) -> builtins.list[Obj]:
        """The core/v1 Events about pod `namespace/pod`, oldest first."""
        with self._lock:
            events = [
                copy.deepcopy(e)
                for (ns, _), e in self._objects[EVENTS.key].items()
                if ns == namespace
                and (e.get("involvedObject") or {}).get("kind") == "Pod"
                and (e.get("involvedObject") or {}).get("name") == pod
            ]
        return sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))

    @staticmethod
    def _ns(res: Resource, namespace: str | None) -> str:
        return (namespace or "default") if res.namespaced else ""

    # -- storage --------------------------------------------------------------------------------

    def _commit(self, kind: str, res: Resource, obj: Obj, old: Obj | None) -> None:
        """Record a write whose object already carries the new resourceVersion (lock held)."""
        change = _Change(self._rv, kind, res, copy.deepcopy(obj), copy.deepcopy(old))
        self._history.append(change)
        while len(self._history) > self._history_limit:
            self._compacted = self._history.popleft().rv
        for watcher in self._watchers:
            if watcher.res is res:
                watcher.queue.put(change)

    def _select(
        self,
        res: Resource,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        after: tuple[str, str] | None = None,
    ) -> builtins.list[Obj]:
        found = []
        for key in sorted(self._objects[res.key]):
            if namespace is not None and res.namespaced and key[0] != namespace:
                continue
            if after is not None and key <= after:
                continue
            obj = self._objects[res.key][key]
            if _selected(obj, labels, fields):
                found.append(obj)
        return found

    @staticmethod
    def _selectors(
        res: Resource, label_selector: str | None, field_selector: str | None
    ) -> tuple[LabelSelector, FieldSelector]:
        try:
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector)
        except SelectorError as error:
            raise bad_request(str(error)) from None
        for field in fields.fields():
            if field not in res.field_labels:
                raise bad_request(f"field label not supported: {field}")
        return labels, fields

    # -- the write paths (HTTP and hooks) -------------------------------------------------------

    def _decode(self, res: Resource, body: Any, namespace: str | None) -> Obj:
        """Checks every write shares: shape, apiVersion/kind, metadata, namespace."""
        if not isinstance(body, dict):
            raise bad_request(
                f"json: cannot unmarshal {type(body).__name__} into an object of kind {res.kind}"
            )
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if res.custom and (not api_version or not kind):
            raise bad_request(f"Object 'Kind' is missing in '{json.dumps(body)}'")
        if api_version and api_version != res.api_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({res.api_version})"
            )
        if kind and kind != res.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({res.kind})"
            )
        obj: Obj = {"apiVersion": res.api_version, "kind": res.kind}
        obj.update(
            {k: copy.deepcopy(v) for k, v in body.items() if k not in ("apiVersion", "kind")}
        )
        meta = obj.get("metadata") or {}
        problem = metadata_type_problem(meta)
        if problem is not None:
            raise bad_request(problem)
        meta = {k: v for k, v in meta.items() if k in META_FIELDS}
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(_NAMESPACE_MISMATCH)
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        obj["metadata"] = meta
        return obj

    def _prepare(self, res: Resource, obj: Obj) -> Obj:
        """Defaulting and validation shared by create and update (422 on failure)."""
        if res.custom and res.kind in self._schemas:
            obj = prune_and_default(obj, self._schemas[res.kind])
        if res is PODS:
            default_pod(obj)
        causes = validate_metadata(res, obj["metadata"])
        if res is PODS:
            causes += validate_pod(obj)
        elif res is EVENTS:
            causes += validate_event(obj)
        elif res.custom and res.kind in self._schemas:
            causes += validate(obj, self._schemas[res.kind])
        if causes:
            raise invalid(res, obj["metadata"].get("name", ""), causes)
        return obj

    def _require_namespace(
        self, res: Resource, namespace: str | None, name: str | None = None
    ) -> None:
        if not res.namespaced:
            return
        ns = self._objects[NAMESPACES.key].get(("", namespace or ""))
        if ns is None:
            raise not_found(NAMESPACES, namespace or "")
        if ns["metadata"].get("deletionTimestamp"):
            # kube-apiserver's NamespaceLifecycle admission (reference/real-world.md)
            why = (
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated"
            )
            who = f'{res.qualified} "{name}"' if name else res.qualified
            raise _error(
                403,
                "Forbidden",
                f"{who} is forbidden: {why}",
                {
                    **res.details(name or ""),
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": why,
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    def _create(self, res: Resource, body: Any, namespace: str | None, *, privileged: bool) -> Obj:
        obj = self._decode(res, body, namespace)
        meta = obj["metadata"]
        with self._lock:
            self._require_namespace(res, namespace, meta.get("name") or None)
            if meta.get("resourceVersion"):
                raise _error(
                    500,
                    "InternalError",
                    _RV_ON_CREATE,
                )
            for field in (*_SERVER_SET, "selfLink", "managedFields"):
                meta.pop(field, None)
            if not meta.get("name") and meta.get("generateName"):
                suffix = "".join(random.choice(_GENERATE_CHARS) for _ in range(5))
                meta["name"] = f"{meta['generateName']}{suffix}"
            if res is PODS:
                status = obj.get("status") if privileged else None
                obj["status"] = (
                    status if isinstance(status, dict) and status else {"phase": "Pending"}
                )
                spec = obj.get("spec")
                if isinstance(spec, dict):
                    obj["status"].setdefault("qosClass", pod_qos(spec))
            elif res is NAMESPACES:
                default_namespace(obj, reset_status=not privileged)
            obj = self._prepare(res, obj)
            meta = obj["metadata"]
            name = meta["name"]
            key = (namespace or "", name)
            if key in self._objects[res.key]:
                raise already_exists(res, name)
            self._rv += 1
            meta["uid"] = str(uuid.uuid4())
            meta["resourceVersion"] = str(self._rv)
            meta["creationTimestamp"] = _now()
            if res.custom:
                meta["generation"] = 1
            self._objects[res.key][key] = obj
            self._commit("ADDED", res, obj, None)
            return copy.deepcopy(obj)

    def _update(
        self,
        res: Resource,
        body: Any,
        namespace: str | None,
        name: str,
        subresource: str | None,
        *,
        privileged: bool,
    ) -> tuple[Obj, int]:
        """PUT semantics; answers the stored object and the HTTP code (201 when created)."""
        obj = self._decode(res, body, namespace)
        meta = obj["metadata"]
        if meta.get("name", "") != name:
            raise bad_request(
                f"the name of the object ({meta.get('name', '')}) does not match the name on "
                f"the URL ({name})"
            )
        with self._lock:
            key = (namespace or "", name)
            old = self._objects[res.key].get(key)
            if old is None:
                if res.create_on_update and subresource is None:
                    meta.pop("resourceVersion", None)
                    return self._create(res, obj, namespace, privileged=privileged), 201
                raise not_found(res, name)
            old_meta = old["metadata"]
            if (
                meta.get("resourceVersion")
                and meta["resourceVersion"] != old_meta["resourceVersion"]
            ):
                raise conflict(res, name)
            if meta.get("uid") and meta["uid"] != old_meta["uid"]:
                raise uid_conflict(res, name, old_meta["uid"], meta["uid"])
            for field in _SERVER_SET:
                if field in old_meta:
                    meta[field] = old_meta[field]
                else:
                    meta.pop(field, None)
            meta["resourceVersion"] = old_meta["resourceVersion"]
            if subresource == "status":
                status = obj.get("status")
                obj = copy.deepcopy(old)
                obj.pop("status", None)
                if status is not None:
                    obj["status"] = status
                obj["metadata"]["labels"] = meta.get("labels") or {}
                obj["metadata"]["annotations"] = meta.get("annotations") or {}
                for field in ("labels", "annotations"):
                    if not obj["metadata"][field]:
                        del obj["metadata"][field]
            elif res is PODS and privileged and "status" not in obj:
                obj["status"] = copy.deepcopy(old.get("status"))
            elif res in (PODS, NAMESPACES) and not privileged:
                obj["status"] = copy.deepcopy(old.get("status"))
                if res is NAMESPACES:
                    obj["spec"] = copy.deepcopy(old.get("spec"))
            if res is NAMESPACES:
                default_namespace(obj, reset_status=False)
            obj = self._prepare(res, obj)
            if res is PODS and not privileged and subresource is None:
                problem = pod_update_problem(old, obj)
                if problem is not None:
                    raise invalid(res, name, [problem])
            if res.custom:
                changed = {k: v for k, v in obj.items() if k != "metadata"} != {
                    k: v for k, v in old.items() if k != "metadata"
                }
                if changed:
                    obj["metadata"]["generation"] = int(old_meta.get("generation", 1)) + 1
            if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
                return self._remove(res, key, obj), 200
            if _without_rv(obj) == _without_rv(old):
                return copy.deepcopy(old), 200
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._objects[res.key][key] = obj
            self._commit("MODIFIED", res, obj, old)
            return copy.deepcopy(obj), 200

    def _patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        subresource: str | None,
        content_type: str | None,
        body: bytes,
        query: Mapping[str, str],
        *,
        privileged: bool,
    ) -> tuple[Obj, int]:
        accepted = [_JSON_PATCH, _MERGE, _APPLY] + ([] if res.custom else [_STRATEGIC])
        if content_type not in accepted:
            raise _error(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(accepted),
            )
        if content_type == _APPLY and not query.get("fieldManager"):
            raise _error(
                422,
                "Invalid",
                _APPLY_NEEDS_MANAGER,
            )
        try:
            patch = json.loads(body or b"null")
        except ValueError as error:
            if content_type == _APPLY:
                raise bad_request(f"the fake accepts apply bodies in JSON only: {error}") from None
            raise bad_request(f"error decoding patch: {error}") from None
        with self._lock:
            old = self._objects[res.key].get((namespace or "", name))
            if old is None:
                if content_type == _APPLY and subresource is None:
                    if not isinstance(patch, dict):
                        raise bad_request("an apply patch must be a JSON object")
                    meta = patch.setdefault("metadata", {})
                    if isinstance(meta, dict):
                        meta.setdefault("name", name)
                    return self._create(res, patch, namespace, privileged=privileged), 201
                raise not_found(res, name)
            try:
                if content_type == _JSON_PATCH:
                    patched = json_patch(old, patch)
                elif content_type == _STRATEGIC:
                    patched = strategic_merge_patch(old, patch)
                else:
                    if not isinstance(patch, dict):
                        raise PatchError("a merge patch must be a JSON object", bad_request=True)
                    patched = merge_patch(old, patch)
            except PatchError as error:
                if error.bad_request:
                    raise bad_request(str(error)) from None
                raise _error(422, "Invalid", str(error)) from None
            uid = (patched.get("metadata") or {}).get("uid") if isinstance(patched, dict) else None
            if uid is not None and uid != old["metadata"]["uid"]:
                # A real server applies the patch, then validates the update: a patch that
                # sets another uid (a guard against a recreated pod) is 422, not a 409.
                immutable = Cause(
                    "FieldValueInvalid",
                    "metadata.uid",
                    f'Invalid value: "{uid}": field is immutable',
                )
                raise invalid(res, name, [immutable])
            return self._update(res, patched, namespace, name, subresource, privileged=privileged)

    def _remove(self, res: Resource, key: tuple[str, str], last: Obj) -> Obj:
        """Delete for good and emit DELETED (lock held); answers the final state."""
        del self._objects[res.key][key]
        self._rv += 1
        final = copy.deepcopy(last)
        final["metadata"]["resourceVersion"] = str(self._rv)
        self._commit("DELETED", res, final, None)
        return final

    @staticmethod
    def _grace_period(old: Obj, options: Obj | None) -> int:
        """A pod's grace period, as the pod strategy decides it: the DeleteOptions', else the
        pod's own; none for a pod never scheduled or already finished."""
        spec = old.get("spec") or {}
        if not spec.get("nodeName") or (old.get("status") or {}).get("phase") in _FINISHED:
            return 0
        given = (options or {}).get("gracePeriodSeconds")
        if isinstance(given, int) and not isinstance(given, bool) and given >= 0:
            return given
        period = spec.get("terminationGracePeriodSeconds", 30)
        return period if isinstance(period, int) else 30

    def _mark_deleted(self, res: Resource, key: tuple[str, str], old: Obj, grace: int) -> Obj:
        """Set deletionTimestamp (MODIFIED) and keep the object (lock held)."""
        obj = copy.deepcopy(old)
        obj["metadata"]["deletionTimestamp"] = _now()
        obj["metadata"]["deletionGracePeriodSeconds"] = grace
        if res is NAMESPACES:
            obj.setdefault("status", {})["phase"] = "Terminating"
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._objects[res.key][key] = obj
        self._commit("MODIFIED", res, obj, old)
        return obj

    def _terminate_namespace(self, key: tuple[str, str], old: Obj) -> Obj:
        """Namespace deletion (lock held): Terminating first (new content refused with 403),
        then, as the namespace controller, its objects and itself are deleted, unless the fake
        runs without one (`set_namespace_controller(False)`: Terminating forever)."""
        if old["metadata"].get("deletionTimestamp"):
            # kube-apiserver 1.37 answers a namespace already Terminating as it is (200); 1.28
            # answered 409 "The system is ensuring all content is removed from this namespace".
            return old
        terminating = self._mark_deleted(NAMESPACES, key, old, 0)
        if not self._namespace_controller:
            return terminating
        self._purge_namespace(key[1])
        return terminating

    def _purge_namespace(self, name: str) -> None:
        for other in RESOURCES:
            if other.namespaced:
                for inner in [k for k in self._objects[other.key] if k[0] == name]:
                    self._remove(other, inner, self._objects[other.key][inner])
        key = ("", name)
        self._remove(NAMESPACES, key, self._objects[NAMESPACES.key][key])

    def _delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        options: Obj | None,
        *,
        control_plane: bool = False,
    ) -> tuple[Obj, int]:
        """DELETE; `control_plane`: a hook's deletion, complete at once (a namespace with its
        objects, a pod without its grace period), as `RealKubeApi.delete` forces it."""
        with self._lock:
            key = (namespace or "", name)
            old = self._objects[res.key].get(key)
            if old is None:
                raise not_found(res, name)
            meta = old["metadata"]
            pre = (options or {}).get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != meta["uid"]:
                raise uid_conflict(res, name, pre["uid"], meta["uid"])
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
                raise conflict(
                    res,
                    name,
                    "Precondition failed: ResourceVersion in precondition: "
                    f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                    f"{meta['resourceVersion']}",
                )
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return copy.deepcopy(old), 200
                obj = copy.deepcopy(old)
                obj["metadata"]["deletionTimestamp"] = _now()
                obj["metadata"]["deletionGracePeriodSeconds"] = 0
                self._rv += 1
                obj["metadata"]["resourceVersion"] = str(self._rv)
                self._objects[res.key][key] = obj
                self._commit("MODIFIED", res, obj, old)
                return copy.deepcopy(obj), 200
            if res is NAMESPACES and control_plane:
                for other in RESOURCES:
                    if other.namespaced:
                        for inner in [k for k in self._objects[other.key] if k[0] == name]:
                            self._remove(other, inner, self._objects[other.key][inner])
            elif res is NAMESPACES:
                return copy.deepcopy(self._terminate_namespace(key, old)), 200
            if res is PODS and not control_plane:
                grace = self._grace_period(old, options)
                if grace > 0:
                    # Graceful: the kubelet stops the containers, then deletes with grace 0.
                    # Watches see MODIFIED (deletionTimestamp) first (reference/real-world.md).
                    if meta.get("deletionTimestamp"):
                        return copy.deepcopy(old), 200
                    return copy.deepcopy(self._mark_deleted(res, key, old, grace)), 200
            final = self._remove(res, key, old)
            if res in (PODS, NAMESPACES):
                return final, 200
            success: Obj = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": res.details(name, meta["uid"]),
            }
            return success, 200

    # -- HTTP -----------------------------------------------------------------------------------

    def _handle(self, req: _Request) -> _Response | _WatchStart:
        if req.path in ("/healthz", "/livez", "/readyz"):
            return _Response(200, "ok", {}, text=True)
        auth = req.headers.get("authorization")
        anonymous_ok = auth is None and req.path == "/version"
        if self._token is not None and not anonymous_ok and auth != f"Bearer {self._token}":
            raise _error(401, "Unauthorized", "Unauthorized")
        fault = self._take_fault(req)
        watching = req.method == "GET" and req.query.get("watch") in ("true", "1")
        if fault is not None:
            if fault.code == 410 and watching:
                return _WatchStart(None, [], error=expired_status(fault.message))
            raise _error(fault.code, fault.reason, fault.message)
        discovery = self._discovery(req.path)
        if discovery is not None:
            if req.method != "GET":
                raise _error(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
            return _Response(200, discovery)
        return self._handle_resource(req)

    def _take_fault(self, req: _Request) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.method not in (None, req.method):
                    continue
                if fault.path is not None and not fault.path.search(req.path):
                    continue
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _discovery(self, path: str) -> Obj | None:
        path = path.rstrip("/") or "/"
        groups: dict[str, builtins.list[str]] = {}
        served = self._served()
        for res in served:
            if res.group and res.version not in groups.setdefault(res.group, []):
                groups[res.group].append(res.version)
        if path == "/version":
            return {
                "major": "1",
                "minor": GIT_VERSION.split(".")[1],
                "gitVersion": GIT_VERSION,
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean",
                "buildDate": "2024-08-13T07:28:49Z",
                "goVersion": "go1.22.5",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
        if path == "/api":
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self._host}:{self._port}"}
                ],
            }

        def group_doc(group: str) -> Obj:
            versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in groups[group]]
            return {"name": group, "versions": versions, "preferredVersion": versions[0]}

        if path == "/apis":
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [group_doc(g) for g in groups],
            }
        parts = path.strip("/").split("/")
        if parts[0] == "apis" and len(parts) == 2 and parts[1] in groups:
            return {"kind": "APIGroup", "apiVersion": "v1", **group_doc(parts[1])}
        if parts in (["api", "v1"],) or (
            len(parts) == 3 and parts[0] == "apis" and parts[2] in groups.get(parts[1], [])
        ):
            group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
            resources = [
                entry
                for res in served
                if (res.group, res.version) == (group, version)
                for entry in res.discovery()
            ]
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": resources,
            }
        return None

    def _route(self, path: str) -> tuple[Resource, str | None, str | None, str | None, bool]:
        """(resource, namespace, name, subresource, legacy /watch/ prefix) of a resource URL."""
        parts = [p for p in path.split("/") if p]
        missing = _error(404, "NotFound", "the server could not find the requested resource", {})
        if len(parts) >= 2 and parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise missing
        served = {r.plural: r for r in self._served() if (r.group, r.version) == (group, version)}
        legacy_watch = bool(rest) and rest[0] == "watch"
        if legacy_watch:
            rest = rest[1:]
        if group:
            # Custom resources: kube-apiserver hands a path of a group/version or resource no
            # CRD serves to its last handler, whose answer is not a Status (real-world.md).
            named = rest[2] if len(rest) >= 3 and rest[0] == "namespaces" else "".join(rest[:1])
            if named not in served:
                raise PageNotFoundError()
        if not served or not rest:
            raise missing
        namespace: str | None = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and rest[2] in served
            and served[rest[2]].namespaced
        ):
            res, namespace, tail = served[rest[2]], rest[1], rest[3:]
        elif rest[0] in served:
            res, tail = served[rest[0]], rest[1:]
            if res.namespaced and tail:
                raise missing
        else:
            raise missing
        if len(tail) > 2 or (len(tail) == 2 and tail[1] not in res.subresources):
            raise missing
        name = tail[0] if tail else None
        sub = tail[1] if len(tail) == 2 else None
        return res, namespace, name, sub, legacy_watch

    def _handle_resource(self, req: _Request) -> _Response | _WatchStart:
        res, namespace, name, sub, legacy_watch = self._route(req.path)
        not_allowed = _error(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        method = req.method
        if name is None:
            if method == "GET":
                if legacy_watch or req.query.get("watch") in ("true", "1"):
                    return self._open_watch(req, res, namespace, None)
                return _Response(200, self._list_doc(res, namespace, req.query))
            if method == "POST" and (namespace is not None or not res.namespaced):
                created = self._create(res, self._json_body(req), namespace, privileged=False)
                return _Response(201, created)
            raise not_allowed
        if method == "GET":
            if legacy_watch:
                return self._open_watch(req, res, namespace, name)
            with self._lock:
                obj = self._objects[res.key].get((namespace or "", name))
                if obj is None:
                    raise not_found(res, name)
                return _Response(200, copy.deepcopy(obj))
        if method == "PUT":
            obj, code = self._update(
                res, self._json_body(req), namespace, name, sub, privileged=False
            )
            return _Response(code, obj)
        if method == "PATCH":
            obj, code = self._patch(
                res, namespace, name, sub, req.content_type, req.body, req.query, privileged=False
            )
            return _Response(code, obj)
        if method == "DELETE" and sub is None:
            options = self._json_body(req) if req.body.strip() else None
            if options is not None and not isinstance(options, dict):
                raise bad_request("DeleteOptions must be a JSON object")
            if "gracePeriodSeconds" in req.query:
                try:
                    grace = int(req.query["gracePeriodSeconds"])
                except ValueError:
                    raise bad_request(
                        f"invalid gracePeriodSeconds: {req.query['gracePeriodSeconds']}"
                    ) from None
                options = {**(options or {}), "gracePeriodSeconds": grace}
            obj, code = self._delete(res, namespace, name, options)
            return _Response(code, obj)
        raise not_allowed

    @staticmethod
    def _json_body(req: _Request) -> Any:
        try:
            return json.loads(req.body)
        except ValueError as error:
            raise bad_request(f"couldn't get version/kind; json parse error: {error}") from None

    def _list_doc(self, res: Resource, namespace: str | None, query: Mapping[str, str]) -> Obj:
        labels, fields = self._selectors(
            res, query.get("labelSelector"), query.get("fieldSelector")
        )
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise bad_request(f"invalid limit: {query.get('limit')}") from None
        token = query.get("continue")
        with self._lock:
            list_rv = self._rv
            after: tuple[str, str] | None = None
            if token:
                try:
                    decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                    list_rv, after = int(decoded["rv"]), (decoded["start"][0], decoded["start"][1])
                except (ValueError, KeyError, TypeError, IndexError, binascii.Error):
                    raise bad_request("continue key is not valid: illegal base64 data") from None
                if list_rv < self._compacted:
                    raise ApiStatusError(
                        expired_status(
                            "The provided continue parameter is too old to display a consistent "
                            "list result. You can start a new list without the continue parameter."
                        )
                    )
            found = self._select(res, namespace, labels, fields, after)
            meta: Obj = {"resourceVersion": str(list_rv)}
            if limit > 0 and len(found) > limit:
                last = found[limit - 1]["metadata"]
                start = [last.get("namespace", ""), last["name"]]
                meta["continue"] = base64.urlsafe_b64encode(
                    json.dumps({"rv": list_rv, "start": start}).encode()
                ).decode()
                if not labels.requirements and not fields.terms:
                    meta["remainingItemCount"] = len(found) - limit
                found = found[:limit]
            items = [copy.deepcopy(o) for o in found]
        if not res.custom:  # built-in types are listed without their kind and apiVersion
            for item in items:
                item.pop("kind", None)
                item.pop("apiVersion", None)
        return {
            "kind": f"{res.kind}List",
            "apiVersion": res.api_version,
            "metadata": meta,
            "items": items,
        }

    def _open_watch(
        self, req: _Request, res: Resource, namespace: str | None, name: str | None
    ) -> _WatchStart:
        query = req.query
        labels, fields = self._selectors(
            res, query.get("labelSelector"), query.get("fieldSelector")
        )
        if name is not None:
            fields = FieldSelector((*fields.terms, FieldTerm("metadata.name", "=", name)))
        timeout: float | None = None
        if query.get("timeoutSeconds"):
            try:
                timeout = float(query["timeoutSeconds"])
            except ValueError:
                raise bad_request(f"invalid timeoutSeconds: {query['timeoutSeconds']}") from None
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        send_initial = query.get("sendInitialEvents") in ("true", "1")
        rv_text = query.get("resourceVersion", "")
        if send_initial and (query.get("resourceVersionMatch") != "NotOlderThan" or not bookmarks):
            raise _error(
                422,
                "Invalid",
                'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
                "sendInitialEvents requires resourceVersionMatch=NotOlderThan and "
                "allowWatchBookmarks=true",
            )
        since = 0
        if rv_text not in ("", "0"):
            try:
                since = int(rv_text)
            except ValueError:
                raise bad_request(
                    f'resourceVersion: Invalid value: "{rv_text}": invalid resource version'
                ) from None
        info = WatchInfo(req.path, dict(query), res.plural, namespace)
        with self._lock:
            start = _WatchStart(None, [], timeout=timeout, bookmarks=bookmarks)
            if since and since < self._compacted:
                start.error = expired_status(
                    f"too old resource version: {since} ({self._compacted})"
                )
                return start
            watcher = _Watcher(res, namespace, labels, fields, since, info)
            if rv_text in ("", "0") or send_initial:
                watcher.since = max(since, self._rv)
                start.initial = [
                    copy.deepcopy(o) for o in self._select(res, namespace, labels, fields)
                ]
                if send_initial:
                    start.initial_end_bookmark = watcher.since
            else:
                for change in self._history:
                    if change.res is res and change.rv > since:
                        watcher.queue.put(change)
            self._watchers.add(watcher)
            start.watcher = watcher
            return start

    def _bookmark_rv(self, watcher: _Watcher) -> int | None:
        """The resourceVersion a bookmark may carry now, or None if events are still queued."""
        with self._lock:
            if not watcher.queue.empty():
                return None
            return max(self._rv, watcher.since)

    def _stream(self, start: _WatchStart, write: _ChunkWriter) -> bool:
        """Write a watch stream; True when it ended cleanly (False: cut or client gone)."""
        watcher = start.watcher
        try:
            if start.error is not None:
                write.event("ERROR", start.error)
                return True
            assert watcher is not None
            for obj in start.initial:
                write.event("ADDED", obj)
            if start.initial_end_bookmark is not None:
                write.event(
                    "BOOKMARK",
                    bookmark_object(
                        watcher.res,
                        start.initial_end_bookmark,
                        {INITIAL_EVENTS_END: "true"},
                    ),
                )
            interval = max(self._bookmark_interval, 0.01)
            began = time.monotonic()
            deadline = began + start.timeout if start.timeout is not None else None
            next_bookmark = began + interval if start.bookmarks else None
            while True:
                now = time.monotonic()
                waits = [
                    t for t in (deadline, next_bookmark, now + _LIVENESS_POLL) if t is not None
                ]
                try:
                    change = watcher.queue.get(timeout=max(0.0, min(waits) - now))
                except queue.Empty:
                    if write.client_gone():
                        return False
                    now = time.monotonic()
                    if deadline is not None and now >= deadline:
                        return True
                    if next_bookmark is not None and now >= next_bookmark:
                        rv = self._bookmark_rv(watcher)
                        if rv is not None:
                            write.event("BOOKMARK", bookmark_object(watcher.res, rv))
                            next_bookmark = now + interval
                    continue
                if change is None:
                    return watcher.ends_cleanly  # else cut by stop()/restart()
                event = watcher.event_for(change)
                if event is not None:
                    write.event(*event)
                watcher.since = max(watcher.since, change.rv)
        except OSError:
            return False
        finally:
            if watcher is not None:
                with self._lock:
                    self._watchers.discard(watcher)

    def _log(self, req: _Request, code: int, watch: bool) -> None:
        body: Any = None
        if req.body:
            try:
                body = json.loads(req.body)
            except ValueError:
                body = req.body.decode("utf-8", "replace")
        record = RequestRecord(
            req.method, req.path, dict(req.query), req.content_type, body, code, watch
        )
        with self._lock:
            self._requests.append(record)

    def serve_request(self, handler: _Handler, method: str) -> None:
        split = urlsplit(handler.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        body = handler.read_body()
        ctype = handler.headers.get("Content-Type")
        req = _Request(
            method,
            split.path,
            query,
            {k.lower(): v for k, v in handler.headers.items()},
            ctype.split(";")[0].strip().lower() if ctype else None,
            body,
        )
        try:
            result = self._handle(req)
        except ApiStatusError as error:
            result = _Response(error.code, error.status)
        except PageNotFoundError:
            result = _Response(404, PAGE_NOT_FOUND, text=True)
        if isinstance(result, _Response):
            self._log(req, result.code, watch=False)
            if result.code == 429:
                result.headers.setdefault("Retry-After", "1")
            handler.send_json(result)
            return
        self._log(req, 200, watch=True)
        writer = _ChunkWriter(handler)
        writer.begin()
        if self._stream(result, writer):
            writer.end()
        else:
            handler.close_connection = True


class _ChunkWriter:
    def __init__(self, handler: _Handler) -> None:
        self._handler = handler

    def begin(self) -> None:
        handler = self._handler
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Cache-Control", "no-cache, private")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        handler.wfile.flush()

    def client_gone(self) -> bool:
        """True when the client has closed its end (a watch client never sends more)."""
        sock = self._handler.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def event(self, kind: str, obj: Obj) -> None:
        data = json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"
        self._handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self._handler.wfile.flush()

    def end(self) -> None:
        try:
            self._handler.wfile.write(b"0\r\n\r\n")
            self._handler.wfile.flush()
        except OSError:
            self._handler.close_connection = True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as Go's net/http sets on every connection: without it the body, written
    # after the headers, waits for the client's delayed ACK (~40 ms on a keep-alive connection).
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.api._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.api._track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: builtins.list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send_json(self, response: _Response) -> None:
        if response.text:
            data = str(response.body).encode()
            content_type = "text/plain; charset=utf-8"
        else:
            data = json.dumps(response.body, separators=(",", ":")).encode()
            content_type = "application/json"
        self.send_response(response.code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in response.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _serve(self, method: str) -> None:
        self.server.api.serve_request(self, method)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], api: FakeKubeApi) -> None:
        self.api = api
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that goes away mid-request is normal here
