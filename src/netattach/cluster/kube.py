"""The Kubernetes feed: the API server as the source of the cluster view, the status and Events.

`KubeFeed` is the façade of every conversation the node daemon has with the API server; each
verb lives in a module of its own:

    kube_client       one kubeconfig read and the connections made from it; the time bounds
    kube_watch        list + watch: pods with spec.nodeName=<this node>, all Namespaces, all
                      NetworkAttachmentDefinitions and MultiNetworkPolicies, into a
                      `ClusterStore`, trimmed to the fields netattach reads (`kube_objects`)
                      (KUBE-CACHE)
    kube_reads        fetch_pod: one bounded direct read of a pod the watch has not delivered
                      yet; fetch_nad: the same for a NAD (KUBE-NADREAD)
    kube_status       publish_status, remove_status: a JSON merge patch of
                      metadata.annotations[network-status] and nothing else, retried on
                      conflicts, 429, 5xx and transport errors (KUBE-STATUS)
    kube_events       record_event: core/v1 Events on the pod, sent in order by one background
                      worker, repeats folded into `count` as client-go's recorder does
                      (KUBE-EVENTS)
    kube_blocks       the IPBlocks of netattach's IPAM (`blocks`, for ipam/kube_source.py)

Errors raised (publish_status, remove_status, fetch_pod, fetch_nad, read_status); everything
else is logged and retried:
    errors.TryAgainLaterError     the API did not answer well within the budget (transient)
    errors.IOFailureError         the API refused the request for good (403, 422, ...)
    errors.InternalError          status entries that are not JSON
    errors.DecodingFailureError   (read_status) an annotation that is not a JSON list of objects
    errors.InvalidNetworkConfigError   (the constructor) no usable kubeconfig / in-cluster config
"""

import asyncio
from pathlib import Path

from netattach.cluster import (
    kube_blocks,
    kube_claims,
    kube_client,
    kube_events,
    kube_objects,
    kube_reads,
    kube_status,
    kube_watch,
    model,
)
from netattach.cluster import store as store_mod

GROUPS_POLL = 0.01  # how often `wait_groups` looks
SELECTIONS_KEPT = 8  # the recent group selections, each read back from its label selector


def group_selector(ids: set[str]) -> str:
    """The label selector of the PolicyPeerGroups of `ids` ("" for none)."""
    return f"{model.PEER_GROUP_LABEL} in ({','.join(sorted(ids))})" if ids else ""


class KubeFeed:
    """Feeds a store from the API server; publishes pod status and Events there (`feeds.Feed`).

    `run()` until cancelled, then `aclose()`. The status and event methods work without `run()`.
    """

    def __init__(
        self,
        store: store_mod.ClusterStore | None = None,
        *,
        node_name: str,
        kubeconfig: Path | None,
        timing: kube_client.KubeTiming | None = None,
        all_pods: bool = False,
        peer_groups: bool = False,
        idle: asyncio.Event | None = None,
    ) -> None:
        """`store`: the store to fill; None: the feed's own, which reads through the feed (a
        pod or NAD the watch has not delivered is read from the API: `fetch_pod`, `fetch_nad`).
        `all_pods`: watch every pod of the cluster, not only this node's (policy peers).
        `peer_groups`: watch the policy controller's PolicyPeerGroups `select_groups` names
        (policy peers, POL-SPAN).
        `idle`: set while no CNI call is under way (the daemon's server keeps it); Events wait
        for it a bounded time (`kube_events`). None: they never wait."""
        self.node_name = node_name
        self.timing = kube_client.KubeTiming() if timing is None else timing
        self._api = kube_client.ApiClients(kubeconfig, self.timing)
        self.store = store_mod.ClusterStore(read_through=self) if store is None else store
        shared = kube_objects.Shared()
        self._watch = kube_watch.Reflectors(
            self.store,
            self._api.http,
            node_name=node_name,
            all_pods=all_pods,
            shared=shared,
            timing=self.timing,
            peer_groups=peer_groups,
        )
        self._reads = kube_reads.DirectReads(
            self._api.client,
            self.store,
            node_name=node_name,
            shared=shared,
            timing=self.timing,
            keep=self._watch.keep_if_newer,
        )
        self._status = kube_status.StatusWriter(self._api, self.store, self.timing)
        self._events = kube_events.Recorder(
            self._api, self.store, node_name=node_name, timing=self.timing, idle=idle
        )
        self._selections: dict[str, frozenset[str]] = {"": frozenset()}  # selector -> ids
        # IPAM-UNIQUE: the IPBlocks of netattach's IPAM (ipam/kube_source.py).
        self.blocks = kube_blocks.BlockObjects(self._api.writes)
        # IPAM-CLAIM: the IPAMClaims pods name (ipam/claims.py).
        self.claims = kube_claims.ClaimObjects(self._api.writes)

    # -- list + watch (KUBE-CACHE) --------------------------------------------------------------

    async def start(self) -> None:
        """Nothing before the daemon serves: the first list is `run`'s."""

    async def run(self) -> None:
        """List and watch every kind until cancelled."""
        await self._watch.run()

    # -- the policy controller's peer groups (POL-SPAN) ------------------------------------------

    def select_groups(self, ids: set[str]) -> None:
        """Watch the PolicyPeerGroups of these groups (their shards), and no other."""
        selector = group_selector(ids)
        self._selections[selector] = frozenset(ids)
        while len(self._selections) > SELECTIONS_KEPT:
            del self._selections[next(iter(self._selections))]
        self._watch.select(model.PEER_GROUP, selector)

    def published_groups(self) -> set[str]:
        """The groups of which the cache holds a shard (the controller published them)."""
        return {
            model.labels(obj).get(model.PEER_GROUP_LABEL, "")
            for obj in self.store.objects(model.PEER_GROUP)
        }

    async def wait_groups(self, ids: set[str], timeout: float) -> bool:
        """Whether the groups `ids` were listed (by a selection holding them all) and each
        found published, within `timeout` seconds."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not (
            ids
            <= self._selections.get(self._watch.listed_with(model.PEER_GROUP) or "-", frozenset())
            and ids <= self.published_groups()
        ):
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(GROUPS_POLL)
        return True

    def watch_events(self) -> dict[str, int]:
        """Watch events received so far (bookmarks aside), by kind."""
        return dict(self._watch.events)

    def resource_version(self, kind: str) -> str | None:
        """The last resourceVersion the feed has seen of `kind` (a list, an event, a bookmark)."""
        return self._watch.resource_version(kind)

    # -- direct read (KUBE-CACHE, KUBE-NADREAD) -------------------------------------------------

    async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None:
        return await self._reads.fetch_pod(namespace, name)

    async def fetch_nad(self, namespace: str, name: str) -> model.KubeObject | None:
        return await self._reads.fetch_nad(namespace, name)

    # -- status (KUBE-STATUS) -------------------------------------------------------------------

    async def publish_status(
        self, namespace: str, pod: str, entries: list[dict[str, object]], *, uid: str = ""
    ) -> None:
        await self._status.publish_status(namespace, pod, entries, uid=uid)

    async def remove_status(self, namespace: str, pod: str, *, uid: str = "") -> None:
        await self._status.remove_status(namespace, pod, uid=uid)

    def read_status(self, namespace: str, pod: str) -> list[dict[str, object]] | None:
        return self._status.read_status(namespace, pod)

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
        await self._events.record_event(
            namespace, pod, reason=reason, message=message, type_=type_, uid=uid, kind=kind
        )

    async def flush_events(self, timeout: float) -> bool:
        return await self._events.flush_events(timeout)

    # -- shutdown -------------------------------------------------------------------------------

    async def aclose(self, *, flush: float = 2.0) -> None:
        """Send what Events are queued (within `flush` seconds), then close the connections."""
        await self._events.aclose(flush=flush)
        await self._api.aclose()
