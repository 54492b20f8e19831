"""The policy controller's tests' cluster (tests/kube/test_policy_controller*.py): namespaces,
pods on two nodes and a policy written to the real API server; the controller and a node's feed
run on an event loop of their own; the groups published compared with those computed afresh.

Every selector names labels of its own run, so pods other tests left in the shared cluster are
in none of its groups.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import secrets
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from netattach.cluster import kube, kube_client, model
from netattach.controller import lease, service
from netattach.daemon.policy_inputs import SpanMembers
from netattach.policy import groups, span
from netattach.policy.compile import compile_pods
from netattach.policy.model import Policy, parse_policy
from tests.e2e import polling
from tests.kube import objects
from tests.kube.real_api import RealKubeApi

T = TypeVar("T")
FAST = kube_client.KubeTiming(request_timeout=5.0, missing_crd_recheck=1.0)
PATH = f"/apis/{model.PEER_GROUP_API}/policypeergroups"
NET = "net"


class Loop:
    """An event loop in a thread of its own: the controllers and the feed run there while the
    test writes objects through the (blocking) API client."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(_wrap(coro), self.loop).result(timeout)

    def start(self, coro: Awaitable[Any]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(_wrap(coro), self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@pytest.fixture
def loop() -> Iterator[Loop]:
    made = Loop()
    yield made
    made.close()


async def _wrap(coro: Awaitable[T]) -> T:
    return await coro


def wait_for(what: str, ready: Callable[[], Any], timeout: float = 30.0) -> Any:
    return polling.poll(what, ready, timeout, 0.1, AssertionError)


class Scene:
    """The test's namespaces, pods (on nodes na-n1 and na-n2) and policies."""

    def __init__(self, api: RealKubeApi) -> None:
        self.api = api
        self.run = secrets.token_hex(3)
        self.port = f"p{self.run}"  # a port name no other test's pod declares
        self.ns = [f"na-pc-{self.run}-{i}" for i in range(2)]
        for index, name in enumerate(self.ns):
            api.create(objects.namespace(name, labels={"run": self.run, "side": str(index)}))
        self.pods: dict[str, Any] = {}
        self.policies: list[Any] = []

    def pod(self, ns: int, name: str, node: int, labels: dict[str, str], address: int,
            *, port: bool = False) -> None:  # fmt: skip
        status = [
            {"name": "default", "interface": "eth0", "ips": [f"10.244.0.{address}"],
             "default": True},
            {"name": f"{self.ns[0]}/{NET}", "interface": "net1",
             "ips": [f"10.9.0.{address}", f"fd09::{address}"]},
        ]  # fmt: skip
        obj = objects.pod(
            name, self.ns[ns], node_name=f"na-n{node}", labels=labels,
            annotations={model.STATUS_ANNOTATION: json.dumps(status)},
        )  # fmt: skip
        if port:
            obj["spec"]["containers"][0]["ports"] = [
                {"name": self.port, "containerPort": 8080, "protocol": "TCP"}
            ]
        self.pods[f"{self.ns[ns]}/{name}"] = self.api.create(obj)

    def relabel(self, key: str, labels: dict[str, str]) -> None:
        namespace, name = key.split("/")
        self.pods[key] = self.api.patch("Pod", name, {"metadata": {"labels": labels}}, namespace)

    def policy(self, name: str, spec: dict[str, Any]) -> None:
        made = self.api.create(objects.policy(name, self.ns[0], spec=spec, policy_for=NET))
        self.policies.append(made)

    def parsed(self) -> list[Policy]:
        return [parse_policy(p) for p in self.policies]

    def wanted(self) -> dict[str, set[str]]:
        """Each group the test's policies name, with its members, computed afresh from the
        API's objects."""
        afresh = groups.PeerGroups()
        for each in self.api.list("Namespace"):
            afresh.set_namespace(each["metadata"]["name"], each["metadata"].get("labels") or {})
        for name in self.ns:
            for pod in self.api.list("Pod", name):
                afresh.set_pod(cast(model.KubeObject, pod))
        afresh.set_policies(self.parsed())
        return {key.id(): members for key, members in afresh.groups().items()}

    def published(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for item in self.api.http.get(PATH).json().get("items") or []:
            group_id = item["metadata"]["labels"][model.PEER_GROUP_LABEL]
            members = {m["pod"] for m in item["spec"]["members"]}
            out.setdefault(group_id, set()).update(members)
        return out

    def converged(self) -> bool:
        wanted = self.wanted()
        published = self.published()
        return all(published.get(k) == v for k, v in wanted.items())

    def local(self, node: int) -> list[Any]:
        return [p for p in self.pods.values() if p["spec"]["nodeName"] == f"na-n{node}"]


def build_scene(api: RealKubeApi) -> Scene:
    scene = Scene(api)
    scene.pod(0, "db", 1, {"app": "db"}, 1)
    scene.pod(0, "web", 2, {"app": "web"}, 2, port=True)
    scene.pod(1, "batch", 2, {"app": "batch"}, 3, port=True)
    scene.pod(1, "api", 1, {"app": "web"}, 4)
    scene.policy("db-from-web", {
        "podSelector": {"matchLabels": {"app": "db"}},
        "ingress": [{"from": [
            {"podSelector": {"matchLabels": {"app": "web"}}},
            {"namespaceSelector": {"matchLabels": {"run": scene.run, "side": "1"}},
             "podSelector": {"matchLabels": {"app": "web"}}},
        ]}],
        "egress": [{"ports": [{"port": scene.port}]}],
        "policyTypes": ["Ingress", "Egress"],
    })  # fmt: skip
    return scene


def controller(kubeconfig: Path, scene: Scene, identity: str) -> service.PolicyController:
    made = service.PolicyController(
        kubeconfig=kubeconfig, identity=identity, lease_namespace=scene.ns[0], timing=FAST
    )
    made.lease.retry_every = 0.2
    made.lease.renew_every = 1.0
    return made


async def replica(kubeconfig: Path, scene: Scene, identity: str) -> None:
    """One replica of the controller's Deployment: a controller that lost its Lease exits and
    its pod starts it again, a follower that may lead again."""
    while True:
        made = controller(kubeconfig, scene, identity)
        try:
            await made.run()
        except* lease.LostLeaseError:
            pass
        finally:
            await made.aclose()


class NodeSpan:
    """A node's Kubernetes feed reading the groups its pods' policies name, as the daemon's does."""

    def __init__(self, kubeconfig: Path, scene: Scene, node: int) -> None:
        self.scene, self.node = scene, node
        self.feed = kube.KubeFeed(node_name=f"na-n{node}", kubeconfig=kubeconfig, timing=FAST,
                                  peer_groups=True)  # fmt: skip
        self._running: asyncio.Future[Any] | None = None

    async def start(self) -> NodeSpan:
        self._running = asyncio.ensure_future(self.feed.run())
        return self

    async def rules(self) -> tuple[Any, Any]:
        """The rules of the node's pods compiled from every pod, and from the groups read."""
        scene, feed = self.scene, self.feed
        local = scene.local(self.node)
        needed = span.needed(
            scene.parsed(), [(model.namespace_of(p), model.labels(p)) for p in local]
        )
        ids = {key.id() for key in needed}
        feed.select_groups(ids)
        assert await feed.wait_groups(ids, 20.0), "the groups were not listed"
        assert {
            model.labels(o)[model.PEER_GROUP_LABEL] for o in feed.store.objects(model.PEER_GROUP)
        } <= ids
        members = SpanMembers(feed.store)
        members.refresh()
        peers = {**members.members()}
        for pod in local:
            peers.pop(f"{model.namespace_of(pod)}/{model.name_of(pod)}", None)
        namespaces: list[Any] = [{"metadata": n["metadata"]} for n in scene.api.list("Namespace")]
        everyone = list(scene.pods.values())
        full = compile_pods(local, namespaces, everyone, scene.parsed())
        spanned = compile_pods(local, namespaces, [*local, *peers.values()], scene.parsed())
        return full, spanned

    async def aclose(self) -> None:
        if self._running is not None:
            self._running.cancel()
            await asyncio.gather(self._running, return_exceptions=True)
        await self.feed.aclose()


async def node_rules(kubeconfig: Path, scene: Scene, node: int) -> tuple[Any, Any]:
    """The rules of `node`'s pods compiled from every pod, and from the groups a feed started
    afresh read."""
    made = await NodeSpan(kubeconfig, scene, node).start()
    try:
        return await made.rules()
    finally:
        await made.aclose()
