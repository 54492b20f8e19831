"""The policy controller (POL-CTRL): the cluster's pods, namespaces and MultiNetworkPolicies
watched in one place, each policy peer's pods published as PolicyPeerGroups for the node
daemons to read the groups they need (POL-SPAN).

    Lease      only the leader writes (`lease`); a follower waits, then starts from the API's
               state as it finds it
    watch      every pod (trimmed), Namespace and MultiNetworkPolicy, as the node daemon's feed
               does (`kube_watch.Reflectors`, which also reads the NADs)
    compute    `policy.groups.PeerGroups`, told what changed; the policies in force are the
               node daemons' (`PolicyBook`: an invalid edit keeps its last valid version)
    publish    every `BATCH` seconds at most, the shards that changed asked of the
               `publisher` (a queue: new groups first, a group's new shards before its old
               ones are deleted); at its start a leader deletes the groups no policy names
               any more (written by an earlier leader)

While no controller runs, nothing is written: the groups stay as the last leader left them and
the nodes keep enforcing them; a pod started meanwhile is no peer anywhere until a controller
publishes it (fail closed), and a new policy's groups do not exist yet, so its peers are
allowed nowhere (fail closed). Both are made right by the next leader's first publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Final

from netattach.cluster import kube_client, kube_objects, kube_watch, model, store
from netattach.cni import errors
from netattach.controller.lease import Lease
from netattach.controller.publisher import Publisher
from netattach.daemon.policy_book import PolicyBook
from netattach.policy import groups as groups_mod

log = logging.getLogger("netattach.controller")

BATCH: Final = 0.05  # changes within this long are published together
RETRY_DELAY: Final = 2.0


class Inputs:
    """What changed in the view since the groups were last told (the store's observer)."""

    def __init__(self, view: store.ClusterStore, peer_groups: groups_mod.PeerGroups) -> None:
        self._view = view
        self._groups = peer_groups
        self._book = PolicyBook(view=view, events=None)
        self._pods: set[tuple[str, str]] = set()
        self._namespaces: set[str] = set()
        self._policies = True
        self._resync = True
        self.changed = asyncio.Event()
        view.observers.append(self.observe)

    def observe(self, kind: str, namespace: str, name: str) -> None:
        if kind == model.POD:
            self._pods.add((namespace, name))
        elif kind == model.NAMESPACE:
            self._namespaces.add(name)
        elif kind == model.POLICY:
            self._policies = True
            self._book.changed(namespace, name)
        elif not kind:
            self._resync = self._policies = True
            self._book.read_all()
        else:
            return
        self.changed.set()

    def tell(self) -> None:
        """Tell the groups every change observed since the last call."""
        self.changed.clear()
        view, peer_groups = self._view, self._groups
        if self._resync:
            self._resync = False
            self._pods.clear()
            self._namespaces.clear()
            names = {model.name_of(ns) for ns in view.objects(model.NAMESPACE)}
            for each in view.objects(model.NAMESPACE):
                peer_groups.set_namespace(model.name_of(each), model.labels(each))
            for gone in peer_groups.namespace_names() - names:
                peer_groups.remove_namespace(gone)
            pods = view.objects(model.POD)
            keys = {f"{model.namespace_of(p)}/{model.name_of(p)}" for p in pods}
            for each in pods:
                peer_groups.set_pod(each)
            for gone in peer_groups.pod_keys() - keys:
                peer_groups.remove_pod(gone)
        for name in self._namespaces:
            ns = view.lookup_namespace(name)
            if ns is None:
                peer_groups.remove_namespace(name)
            else:
                peer_groups.set_namespace(name, model.labels(ns))
        self._namespaces.clear()
        for namespace, name in self._pods:
            pod = view.lookup_pod(namespace, name)
            if pod is None:
                peer_groups.remove_pod(f"{namespace}/{name}")
            else:
                peer_groups.set_pod(pod)
        self._pods.clear()
        if self._policies:
            self._policies = False
            peer_groups.set_policies(self._book.policies())


class PolicyController:
    """One replica: wait for the Lease, then watch, compute and publish until cancelled or the
    Lease is lost (`lease.LostLeaseError`)."""

    def __init__(
        self,
        *,
        kubeconfig: Path | None,
        identity: str,
        lease_namespace: str,
        lease_name: str = "netattach-policy-controller",
        timing: kube_client.KubeTiming | None = None,
    ) -> None:
        self.timing = timing or kube_client.KubeTiming()
        self._api = kube_client.ApiClients(kubeconfig, self.timing)
        self.lease = Lease(
            self._api.writes, namespace=lease_namespace, name=lease_name, identity=identity
        )
        self.view = store.ClusterStore()
        self.groups = groups_mod.PeerGroups()
        self.inputs = Inputs(self.view, self.groups)
        self.publisher = Publisher(self._api.writes)
        self.leading = asyncio.Event()
        self._releasing: asyncio.Future[None] | None = None

    async def run(self) -> None:
        try:
            await self.lease.acquire()
            self.leading.set()
            reflectors = kube_watch.Reflectors(
                self.view,
                self._api.http,
                node_name="",
                all_pods=True,
                shared=kube_objects.Shared(),
                timing=self.timing,
            )
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(reflectors.run(), name="watch")
                tasks.create_task(self.lease.hold(), name="lease")
                tasks.create_task(self._publish_loop(), name="publish")
        finally:
            # shielded: a cancelled run still gives the Lease up, and aclose waits for that
            self._releasing = asyncio.ensure_future(self.lease.release())
            with contextlib.suppress(Exception):
                await asyncio.shield(self._releasing)

    async def _publish_loop(self) -> None:
        await self.view.wait_synced(float("inf"))
        stray = await self._existing()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.publisher.run(), name="writes")
            while True:
                self.inputs.tell()
                writes = self.groups.take_writes()
                if stray:
                    written = {w.name for w in writes if w.body is not None}
                    writes += [groups_mod.Write(n, None) for n in sorted(stray - written)]
                    stray = set()
                self.publisher.ask(writes)
                await self.inputs.changed.wait()
                await asyncio.sleep(BATCH)

    async def _existing(self) -> set[str]:
        while True:
            try:
                return await self.publisher.existing()
            except errors.CNIError as exc:
                log.warning("listing the PolicyPeerGroups: %s; again soon", exc)
                await asyncio.sleep(RETRY_DELAY)

    async def aclose(self) -> None:
        if self._releasing is not None:
            with contextlib.suppress(Exception):
                await self._releasing
        await self._api.aclose()
