"""Selections containerd's pods make that are not the plain case: a NAD that does not exist, a
static pod (kubelet's config hash as its UID, a mirror pod in the API), and a selection edited
while the sandbox runs (hot-plug). Each through containerd only, on the feeds where it applies.
"""

from __future__ import annotations

import secrets
import uuid

import pytest

from netattach.cluster import model
from tests.e2e.daemon_harness import wait_for
from tests.e2e.harness import DEFAULT_NETWORK, NOTHING, bridge_list, host_local
from tests.e2e.kube_harness import RemoteKubeApi
from tests.node.api_view import api_events, api_status, nad_object, pod_object, shown
from tests.node.cri.client import CriError
from tests.node.harness import Kubelet, NodeDaemon, refusal

# root, network namespaces, containerd: under NETATTACH_REQUIRE_NETNS=1 a skip is a failure
pytestmark = [pytest.mark.netns, pytest.mark.req("KUBE-NODE")]

NS = "blue"
NET_A = "10.91.0.0/24"
NET_B = "10.92.0.0/24"
CHANGE_TIMEOUT = 30.0


def assert_nothing_left(daemon: NodeDaemon, kubelet: Kubelet) -> None:
    assert kubelet.sandbox_ids() == []
    assert daemon.cluster.leftovers() == NOTHING
    assert kubelet.netns_left() == []


def remove_what_containerd_kept(kubelet: Kubelet) -> None:
    """kubelet's answer to a failed RunPodSandbox: stop and remove whatever is left of it."""
    for sandbox_id in kubelet.sandbox_ids():
        assert not kubelet.cri.status(sandbox_id).ready
        kubelet.teardown(sandbox_id)


# -- a missing NAD ---------------------------------------------------------------------------------


@pytest.mark.req("NAD-RESOLVE")
def test_a_pod_selecting_a_missing_nad_fails_to_start_and_leaves_nothing_directory_feed(
    daemon: NodeDaemon, kubelet: Kubelet
) -> None:
    cluster = daemon.cluster
    cluster.add_nad(NS, "net-a", bridge_list(None, host_local(cluster.ipam, NET_A)))
    uid = str(uuid.uuid4())
    cluster.add_pod(NS, "web", uid, "net-a,net-missing")
    daemon.start()

    with pytest.raises(CriError) as refused:
        kubelet.run(kubelet.spec(NS, "web", uid, "net-a,net-missing"))

    assert refused.value.call == "RunPodSandbox"
    assert f"{NS}/net-missing" in refusal(refused), (refusal(refused), daemon.log_text())
    remove_what_containerd_kept(kubelet)
    assert_nothing_left(daemon, kubelet)


@pytest.mark.req("NAD-RESOLVE")
def test_a_pod_selecting_a_missing_nad_fails_with_an_event_and_leaves_nothing_kubernetes_feed(
    kube_api: RemoteKubeApi, kube_daemon: NodeDaemon, kubelet: Kubelet
) -> None:
    cluster = kube_daemon.cluster
    kube_api.create(nad_object("net-a", NS, bridge_list(None, host_local(cluster.ipam, NET_A))))
    pod = kube_api.create(pod_object("web", NS, cluster.node.name, "net-a,net-missing"))
    uid = pod["metadata"]["uid"]
    kube_daemon.start()

    with pytest.raises(CriError) as refused:
        kubelet.run(kubelet.spec(NS, "web", uid, "net-a,net-missing"))

    assert f"{NS}/net-missing" in refusal(refused), (refusal(refused), kube_daemon.log_text())
    (event, *_) = wait_for(
        "a NetworkAttachmentDefinitionNotFound Event",
        lambda: api_events(kube_api, NS, "web", "NetworkAttachmentDefinitionNotFound"),
        CHANGE_TIMEOUT,
    )
    assert event["type"] == "Warning"
    assert "net-missing" in event["message"]
    assert api_status(kube_api, NS, "web") in (None, [])
    remove_what_containerd_kept(kubelet)
    assert_nothing_left(kube_daemon, kubelet)


# -- a static pod ----------------------------------------------------------------------------------


@pytest.mark.req("RT-STATIC")
def test_a_static_pod_sandbox_gets_its_networks_and_its_mirror_pod_the_status(
    kube_api: RemoteKubeApi, kube_daemon: NodeDaemon, kubelet: Kubelet
) -> None:
    """kubelet runs a static pod's sandbox with K8S_POD_UID = the config hash (32 hex digits);
    the API's mirror pod has a UID of its own and carries the hash (reference/real-world.md)."""
    cluster = kube_daemon.cluster
    kube_api.create(nad_object("net-a", NS, bridge_list(None, host_local(cluster.ipam, NET_A))))
    config_hash = secrets.token_hex(16)
    kubelet_annotations = {
        "kubernetes.io/config.hash": config_hash,
        "kubernetes.io/config.source": "file",
    }
    mirror = kube_api.create(
        pod_object(
            "static-web",
            NS,
            cluster.node.name,
            "net-a",
            annotations={"kubernetes.io/config.mirror": config_hash, **kubelet_annotations},
        )
    )
    assert mirror["metadata"]["uid"] != config_hash
    kube_daemon.start()

    sandbox = kubelet.run(
        kubelet.spec(NS, "static-web", config_hash, "net-a", annotations=kubelet_annotations)
    )

    assert sorted(kubelet.interfaces(sandbox)) == ["eth0", "net1"]
    status = wait_for(
        "the mirror pod's network-status",
        lambda: api_status(kube_api, NS, "static-web"),
        CHANGE_TIMEOUT,
    )
    assert shown(status) == [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-a", "net1")]
    events = wait_for(
        "the mirror pod's AddedInterface Events",
        lambda: (
            found
            if len(found := api_events(kube_api, NS, "static-web", "AddedInterface")) == 2
            else None
        ),
        CHANGE_TIMEOUT,
    )
    assert {event["involvedObject"]["uid"] for event in events} == {mirror["metadata"]["uid"]}

    kubelet.teardown(sandbox.id)

    assert_nothing_left(kube_daemon, kubelet)


@pytest.mark.req("RT-STATIC")
def test_a_static_pod_before_its_mirror_pod_is_try_again_and_the_next_sandbox_attaches(
    kube_api: RemoteKubeApi, kube_daemon: NodeDaemon, kubelet: Kubelet
) -> None:
    """kubelet creates the mirror pod asynchronously: the first sandbox may come first. It gets
    11, containerd keeps nothing attached, and kubelet's next sandbox attaches."""
    cluster = kube_daemon.cluster
    kube_api.create(nad_object("net-a", NS, bridge_list(None, host_local(cluster.ipam, NET_A))))
    config_hash = secrets.token_hex(16)
    kubelet_annotations = {
        "kubernetes.io/config.hash": config_hash,
        "kubernetes.io/config.source": "file",
    }
    kube_daemon.start()
    spec = kubelet.spec(NS, "static-late", config_hash, "net-a", annotations=kubelet_annotations)

    with pytest.raises(CriError) as refused:
        kubelet.run(spec)
    assert refused.value.call == "RunPodSandbox"
    assert "static pod: its mirror pod is not in the API yet" in refusal(refused)
    assert kube_daemon.requests("ADD", "11") == 1.0
    remove_what_containerd_kept(kubelet)

    kube_api.create(
        pod_object(
            "static-late",
            NS,
            cluster.node.name,
            "net-a",
            annotations={model.MIRROR_ANNOTATION: config_hash, **kubelet_annotations},
        )
    )
    sandbox = kubelet.run(spec)  # kubelet's next sandbox for the pod

    assert sorted(kubelet.interfaces(sandbox)) == ["eth0", "net1"]
    status = wait_for(
        "the mirror pod's network-status",
        lambda: api_status(kube_api, NS, "static-late"),
        CHANGE_TIMEOUT,
    )
    assert shown(status) == [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-a", "net1")]
    wait_for(
        "the MirrorPodNotFound Event",
        lambda: api_events(kube_api, NS, "static-late", "MirrorPodNotFound"),
        CHANGE_TIMEOUT,
    )
    kubelet.teardown(sandbox.id)

    assert_nothing_left(kube_daemon, kubelet)


# -- hot-plug --------------------------------------------------------------------------------------


@pytest.mark.req("RT-HOTPLUG")
def test_a_network_added_to_a_running_sandbox_appears_and_goes_with_it_directory_feed(
    daemon: NodeDaemon, kubelet: Kubelet
) -> None:
    cluster = daemon.cluster
    cluster.add_nad(NS, "net-a", bridge_list(None, host_local(cluster.ipam, NET_A)))
    cluster.add_nad(NS, "net-b", bridge_list(None, host_local(cluster.ipam, NET_B)))
    uid = str(uuid.uuid4())
    cluster.add_pod(NS, "web", uid, "net-a")
    daemon.start()
    sandbox = kubelet.run(kubelet.spec(NS, "web", uid, "net-a"))
    before = kubelet.interfaces(sandbox)
    assert sorted(before) == ["eth0", "net1"]

    cluster.add_pod(NS, "web", uid, "net-a,net-b")

    wanted = [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-a", "net1"), (f"{NS}/net-b", "net2")]
    wait_for(
        "net2 in the sandbox and in its network-status",
        lambda: (
            shown(cluster.status(NS, "web")) == wanted
            and sorted(kubelet.interfaces(sandbox)) == ["eth0", "net1", "net2"]
        ),
        CHANGE_TIMEOUT,
    )
    now = kubelet.interfaces(sandbox)
    assert {name: now[name].mac for name in before} == {n: s.mac for n, s in before.items()}
    assert len(cluster.allocations()) == 3

    # containerd's DEL on stop carries the ADD's cached result, which knows nothing of net2:
    # the daemon's record is what removes it.
    kubelet.teardown(sandbox.id)

    assert_nothing_left(daemon, kubelet)


@pytest.mark.req("RT-HOTPLUG")
def test_a_network_added_to_a_running_sandbox_appears_and_goes_with_it_kubernetes_feed(
    kube_api: RemoteKubeApi, kube_daemon: NodeDaemon, kubelet: Kubelet
) -> None:
    cluster = kube_daemon.cluster
    kube_api.create(nad_object("net-a", NS, bridge_list(None, host_local(cluster.ipam, NET_A))))
    kube_api.create(nad_object("net-b", NS, bridge_list(None, host_local(cluster.ipam, NET_B))))
    pod = kube_api.create(pod_object("web", NS, cluster.node.name, "net-a"))
    uid = pod["metadata"]["uid"]
    kube_daemon.start()
    sandbox = kubelet.run(kubelet.spec(NS, "web", uid, "net-a"))
    assert sorted(kubelet.interfaces(sandbox)) == ["eth0", "net1"]

    kube_api.patch(
        "Pod", "web", {"metadata": {"annotations": {model.NETWORKS_ANNOTATION: "net-a,net-b"}}}, NS
    )

    wanted = [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-a", "net1"), (f"{NS}/net-b", "net2")]
    wait_for(
        "net2 in the sandbox and in the API's network-status",
        lambda: (
            shown(api_status(kube_api, NS, "web")) == wanted
            and sorted(kubelet.interfaces(sandbox)) == ["eth0", "net1", "net2"]
        ),
        CHANGE_TIMEOUT,
    )

    kubelet.teardown(sandbox.id)

    assert_nothing_left(kube_daemon, kubelet)
