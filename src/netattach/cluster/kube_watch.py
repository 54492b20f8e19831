"""List + watch for the Kubernetes feed: the API's pods, Namespaces, NADs and
MultiNetworkPolicies kept in a `ClusterStore` (KUBE-CACHE).

Pods with spec.nodeName=<this node> (every pod, for the policy's peers), all Namespaces, all
NetworkAttachmentDefinitions and MultiNetworkPolicies, trimmed to the fields netattach reads
(`kube_objects`).

Lists and watches are read here, over an HTTP client authenticated by lightkube's own
kubeconfig handling (`kube_client.build_feed_http`), not by lightkube's list() and watch(), which
decode every object into the typed model at once: a real server's BOOKMARK skeleton
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

Nothing is raised: every failure is logged and retried.
"""

import asyncio
import collections
import contextlib
import ctypes
import dataclasses
import functools
import gc
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Final

import httpx2
import lightkube
from lightkube.resources import core_v1

from netattach.cluster import kube_client, kube_objects, model, store, watch_stream

log = logging.getLogger(kube_client.LOGGER)

# How many undecodable objects are remembered, so each is logged once (KUBE-BOOKMARK).
_UNDECODABLE_MEMORY: Final = 1024


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
        # The label selector of a kind read by label (the peer groups: `select`); None for a
        # kind read whole.
        self.labels: str | None = None
        self.reselected = asyncio.Event()  # the selector changed: list again
        self.listed_labels: str | None = None  # the selector of the last list
        self.resource_version: str | None = None
        self.listed = False
        self.failures = 0
        self.missing = False  # a CRD the API does not serve (yet)


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


class Reflectors:
    """Lists and watches every kind into `store`, one reflector each, until cancelled."""

    def __init__(
        self,
        store: store.ClusterStore,
        http: httpx2.AsyncClient,
        *,
        node_name: str,
        all_pods: bool,
        shared: kube_objects.Shared,
        timing: kube_client.KubeTiming,
        peer_groups: bool = False,
    ) -> None:
        """`all_pods`: watch every pod of the cluster, not only this node's (policy peers).
        `peer_groups`: watch the policy controller's PolicyPeerGroups `select` names (POL-SPAN).
        """
        self._store = store
        self._http = http
        self.node_name = node_name
        self.timing = timing
        # Watch events received (not bookmarks), by kind: what the API server sends this node.
        self.events: collections.Counter[str] = collections.Counter()
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
                functools.partial(kube_objects.trim_pod, shared=shared),
            ),
            _Kind(
                model.NAMESPACE,
                core_v1.Namespace,
                False,
                "namespaces",
                "/api/v1/namespaces",
                False,
                functools.partial(kube_objects.trim_namespace, shared=shared),
            ),
            _Kind(
                model.NAD,
                kube_client.NetworkAttachmentDefinition,
                True,
                "network-attachment-definitions",
                f"/apis/{model.API_VERSIONS[model.NAD]}/network-attachment-definitions",
                True,
                functools.partial(kube_objects.trim_nad, shared=shared),
            ),
            _Kind(
                model.POLICY,
                kube_client.MultiNetworkPolicy,
                True,
                "multi-networkpolicies",
                f"/apis/{model.API_VERSIONS[model.POLICY]}/multi-networkpolicies",
                True,
                functools.partial(kube_objects.trim_policy, shared=shared),
            ),
        )
        self._reflectors = {
            spec.kind: _Reflector(
                spec,
                {"spec.nodeName": node_name} if spec.kind == model.POD and not all_pods else None,
            )
            for spec in kinds
        }
        if peer_groups:
            groups = _Reflector(
                _Kind(
                    model.PEER_GROUP,
                    kube_client.PolicyPeerGroup,
                    False,
                    "policypeergroups",
                    f"/apis/{model.PEER_GROUP_API}/policypeergroups",
                    True,
                    functools.partial(kube_objects.trim_peer_group, shared=shared),
                ),
                None,
            )
            groups.labels = ""  # none selected yet
            self._reflectors[model.PEER_GROUP] = groups

    def select(self, kind: str, labels: str) -> None:
        """Read `kind` by the label selector `labels` from now on ("": none of them)."""
        reflector = self._reflectors[kind]
        if reflector.labels != labels:
            reflector.labels = labels
            reflector.reselected.set()

    def listed_with(self, kind: str) -> str | None:
        """The label selector `kind` was last listed with (None: not listed yet)."""
        return self._reflectors[kind].listed_labels

    def resource_version(self, kind: str) -> str | None:
        """The last resourceVersion the watch has seen of `kind` (a list, an event, a bookmark)."""
        return self._reflectors[kind].resource_version

    async def run(self) -> None:
        """List and watch every kind until cancelled."""
        async with asyncio.TaskGroup() as group:
            for reflector in self._reflectors.values():
                group.create_task(self._reflect(reflector), name=f"watch {reflector.spec.kind}")

    async def _reflect(self, reflector: _Reflector) -> None:
        kind = reflector.spec.kind
        while True:
            try:
                if reflector.reselected.is_set():
                    reflector.reselected.clear()
                    reflector.resource_version = None  # another selector: list again
                if reflector.labels == "":  # read by label, and no label selected
                    self._none_selected(reflector)
                    await reflector.reselected.wait()
                    continue
                if reflector.resource_version is None and not await self._list(reflector):
                    await asyncio.sleep(self.timing.missing_crd_recheck)
                    continue
                if reflector.labels is None:
                    await self._watch(reflector)
                else:
                    await self._watch_until_reselected(reflector)
            except TimeoutError:
                # Nothing, not even a bookmark, for watch_idle_timeout: presumed dead; resume.
                log.info("watch of %s idle too long; watching again", kind)
            except Exception as exc:
                code = kube_client.status_code(exc)
                if code == kube_client.GONE and reflector.resource_version is not None:
                    # The history before our resourceVersion is gone: only a list is complete.
                    log.info(
                        "watch of %s from resourceVersion %s expired; listing again",
                        kind,
                        reflector.resource_version,
                    )
                    reflector.resource_version = None
                    continue
                if code == kube_client.GONE:
                    reflector.resource_version = None
                if (
                    code == kube_client.NOT_FOUND
                    and reflector.spec.custom
                    and reflector.resource_version
                ):
                    # Its CRD was deleted: a list says so (and empties the kind), then the
                    # kind is looked for again every missing_crd_recheck.
                    log.debug("watch of %s: 404; listing again", kind)
                    reflector.resource_version = None
                    continue
                reflector.failures += 1
                delay = self.timing.backoff.delay(reflector.failures)
                hinted = kube_client.retry_after(exc)
                if hinted is not None:
                    # the server says when (a 429 while its storage comes back: 1 s)
                    delay = min(hinted, self.timing.backoff.cap)
                level = logging.WARNING if kube_client.is_transient(exc) else logging.ERROR
                log.log(
                    level,
                    "%s of %s failed (%s); again in %.1fs",
                    "watch" if reflector.resource_version else "list",
                    kind,
                    kube_client.describe(exc),
                    delay,
                    exc_info=not isinstance(exc, httpx2.HTTPError | lightkube.ConfigError),
                )
                await asyncio.sleep(delay)

    def _none_selected(self, reflector: _Reflector) -> None:
        self._replace_kind(reflector.spec.kind, [], keep=set())
        reflector.listed_labels = ""
        self._listed(reflector)

    async def _watch_until_reselected(self, reflector: _Reflector) -> None:
        """Watch until the watch ends or the selector changes (then the loop lists again)."""
        watch = asyncio.ensure_future(self._watch(reflector))
        changed = asyncio.ensure_future(reflector.reselected.wait())
        try:
            await asyncio.wait((watch, changed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (watch, changed):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await changed
        if watch.done() and not watch.cancelled():
            watch.result()  # its failure, for the loop to handle
        else:
            with contextlib.suppress(asyncio.CancelledError):
                await watch

    def _listed(self, reflector: _Reflector) -> None:
        if not reflector.listed:
            reflector.listed = True
            if all(r.listed for r in self._reflectors.values()):
                self._store.mark_synced()
                log.info("cluster view synced from the API (node %s)", self.node_name)

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
            if not (spec.custom and kube_client.status_code(exc) == kube_client.NOT_FOUND):
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
        reflector.listed_labels = reflector.labels
        self._listed(reflector)
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
        if reflector.labels:
            params["labelSelector"] = reflector.labels
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
        if reflector.labels:
            params["labelSelector"] = reflector.labels
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
            self.events[spec.kind] += 1
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

    def keep_if_newer(self, kind: str, trimmed: model.KubeObject) -> None:
        """Store an object read directly when it is newer than what the watch of `kind` has
        seen: an older one may be one whose deletion the watch delivered meanwhile."""
        version = model.meta(trimmed).get("resourceVersion", "")
        if _newer(version, self._reflectors[kind].resource_version):
            self._store.upsert(trimmed)
