"""Static pods (RT-STATIC) and recreated pods (RT-UID) on the Kubernetes feed.

kubelet sends a static pod's config hash (32 hex digits) as K8S_POD_UID; the API's mirror pod has
another UID and carries the hash in `kubernetes.io/config.mirror` (reference/real-world.md). The
mirror pod is created by kubelet asynchronously, so the first ADD may come before it exists.
Mirror pods are ordinary API objects here, created by the test as kubelet would: the tests hold
for a real API server too.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import uuid
from pathlib import Path
from typing import Any

import pytest

from netattach.cluster import model
from netattach.cni import env, errors
from tests.kube import objects
from tests.kube.api import KubeApi
from tests.kube.feed_harness import node_name, run_bounded
from tests.kube.orchestrator_harness import feed_and_orchestrator

MIRROR = model.MIRROR_ANNOTATION


def call(command: str, namespace: str, name: str, uid: str) -> env.Environment:
    return env.Environment(
        command=command,
        container_id=secrets.token_hex(32),
        netns="/run/netns/na-static",
        ifname="eth0",
        args=(("K8S_POD_NAMESPACE", namespace), ("K8S_POD_NAME", name), ("K8S_POD_UID", uid)),
    )


def mirror_pod(name: str, namespace: str, node: str, config_hash: str) -> dict[str, object]:
    """A mirror pod as kubelet creates it for a static pod."""
    return objects.pod(
        name,
        namespace,
        node_name=node,
        annotations={
            MIRROR: config_hash,
            "kubernetes.io/config.hash": config_hash,
            "kubernetes.io/config.source": "file",
        },
    )


async def network_status(api: KubeApi, name: str, namespace: str) -> list[Any] | None:
    pod = await asyncio.to_thread(api.get, "Pod", name, namespace)
    assert pod is not None
    text = (pod["metadata"].get("annotations") or {}).get(model.STATUS_ANNOTATION)
    return None if text is None else list(json.loads(text))


@pytest.mark.req("RT-STATIC", "KUBE-STATUS", "KUBE-EVENTS")
def test_a_static_pod_attaches_through_its_mirror_pod_which_gets_status_and_events(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, tmp_path: Path
) -> None:
    ns, node = kube_namespace, node_name()
    name = f"etcd-{node}"
    config_hash = secrets.token_hex(16)  # what kubelet sends, e.g. c6ece545af030efda204074880a48939
    mirror = fake_api.create(mirror_pod(name, ns, node, config_hash))
    mirror_uid = mirror["metadata"]["uid"]
    assert mirror_uid != config_hash

    async def body() -> None:
        async with feed_and_orchestrator(tmp_path, kubeconfig, node) as (feed, orch, plugins):
            add = call("ADD", ns, name, config_hash)
            await orch.add(add, {"cniVersion": "1.0.0"})
            assert ("bridge", "ADD") in plugins.commands()
            # the UID-guarded status patch held: it was the mirror pod's UID
            published = await network_status(fake_api, name, ns)
            assert [e["name"] for e in published or []] == ["cluster-default"]
            assert await feed.flush_events(5.0)
            await orch.delete(add._replace(command="DEL"))
            assert ("bridge", "DEL") in plugins.commands()
            assert await network_status(fake_api, name, ns) is None

    run_bounded(body())
    events = fake_api.events_for(ns, name)
    assert [e["reason"] for e in events] == ["AddedInterface"]
    assert events[0]["involvedObject"]["uid"] == mirror_uid


@pytest.mark.req("RT-STATIC", "KUBE-EVENTS")
def test_no_mirror_pod_yet_is_try_again_and_the_retry_attaches(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, tmp_path: Path
) -> None:
    ns, node = kube_namespace, node_name()
    name = f"kube-proxy-{node}"
    config_hash = secrets.token_hex(16)

    async def body() -> None:
        async with feed_and_orchestrator(tmp_path, kubeconfig, node) as (feed, orch, plugins):
            with pytest.raises(errors.TryAgainLaterError) as raised:
                await orch.add(call("ADD", ns, name, config_hash), {"cniVersion": "1.0.0"})
            assert raised.value.code == 11
            assert raised.value.msg == (
                f"[{ns}/{name}/{config_hash}] static pod: its mirror pod is not in the API yet "
                "(kubelet creates it shortly); try again"
            )
            assert plugins.commands() == []
            assert await feed.flush_events(5.0)
            # kubelet creates the mirror pod and retries the sandbox: a new container
            fake_api.create(mirror_pod(name, ns, node, config_hash))
            await orch.add(call("ADD", ns, name, config_hash), {"cniVersion": "1.0.0"})
            assert ("bridge", "ADD") in plugins.commands()
            assert await feed.flush_events(5.0)

    run_bounded(body())
    reasons = [(e["reason"], e["type"]) for e in fake_api.events_for(ns, name)]
    assert reasons == [("MirrorPodNotFound", "Warning"), ("AddedInterface", "Normal")]


@pytest.mark.req("RT-STATIC")
def test_a_mirror_pod_of_another_config_hash_is_try_again(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, tmp_path: Path
) -> None:
    ns, node = kube_namespace, node_name()
    name = f"static-{node}"
    old_hash, new_hash = secrets.token_hex(16), secrets.token_hex(16)
    old = fake_api.create(mirror_pod(name, ns, node, old_hash))

    async def body() -> None:
        async with feed_and_orchestrator(tmp_path, kubeconfig, node) as (_, orch, plugins):
            with pytest.raises(errors.TryAgainLaterError) as raised:
                await orch.add(call("ADD", ns, name, new_hash), {"cniVersion": "1.0.0"})
            assert f"(UID {old['metadata']['uid']})" in raised.value.msg
            assert f"the mirror pod of config hash {old_hash}, not of {new_hash}" in (
                raised.value.msg
            )
            assert plugins.commands() == []

    run_bounded(body())


@pytest.mark.req("RT-UID", "KUBE-EVENTS")
def test_a_uid_mismatch_is_refused_with_a_reason_that_says_so(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, tmp_path: Path
) -> None:
    ns, node = kube_namespace, node_name()
    pod = fake_api.create(objects.pod("web", ns, node_name=node))
    stale_uid = str(uuid.uuid4())  # the deleted pod of that name, as the runtime still knows it

    async def body() -> None:
        async with feed_and_orchestrator(tmp_path, kubeconfig, node) as (feed, orch, plugins):
            with pytest.raises(errors.UnknownContainerError) as raised:
                await orch.add(call("ADD", ns, "web", stale_uid), {"cniVersion": "1.0.0"})
            assert raised.value.msg == (
                f"[{ns}/web/{stale_uid}] the runtime asks for pod UID {stale_uid}, "
                f"the pod has UID {pod['metadata']['uid']}"
            )
            assert plugins.commands() == []
            assert await feed.flush_events(5.0)

    run_bounded(body())
    (event,) = fake_api.events_for(ns, "web")
    assert (event["reason"], event["type"]) == ("PodUIDMismatch", "Warning")
