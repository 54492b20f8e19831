"""KUBE-NODE through a real kubelet: deploy/'s DaemonSet on a node the kubelet registered with the
real API server (tests/node/real_node.py), pods driven through the API only.

The module's node: the control plane of tests/kube/cluster.py (with the DaemonSet controller,
garbage collection and ServiceAccount tokens), the kubelet (cgroupfs) and containerd
(`restrict_oom_score_adj = true`) in namespaces of their own, `make image`'s image loaded and
`kubectl apply -k` of an overlay of deploy/ setting it. The cluster's default network is a bridge
`na-cni0`; the NADs are a bridge `na-br-a`, a macvlan over the veth end `na-mv0` and a bridge
`na-br-c`, all with host-local. After every scenario, nothing of the pods is left on the node:
no link (veth), allocation, record, netns or netattach nft table.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests import heavy_plugin
from tests.node import real_node
from tests.node.harness import require_real_node
from tests.node.node_image import node_image_archive
from tests.node.real_node import Leftovers, RealNode, connect_outcome, wait_until

# the first test's set-up starts the node, building the image when the tree changed
pytestmark = [pytest.mark.netns, pytest.mark.req("KUBE-NODE"), pytest.mark.timeout(900)]

NS = "na-blue"
CLUSTER_NETWORK = "cluster-default"
CLEAN = Leftovers()
NADS_LATE_IPAM = {"type": "host-local", "subnet": "10.89.0.0/24"}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    require_real_node()
    with real_node.real_node(tmp_path_factory.mktemp("na-real-node")) as made:
        made.deploy(node_image_archive())
        made.create_namespace(NS)
        made.add_nads(NS)
        yield made


@pytest.fixture
def clean_node(node: RealNode) -> Iterator[RealNode]:
    """The node; at teardown, the test's pods deleted (if it failed) and nothing left of them."""
    yield node
    for pod in node.api.list("Pod", NS):
        with contextlib.suppress(real_node.NodeError):
            node.delete_pod(NS, pod["metadata"]["name"])
    assert node.wait_clean() == CLEAN


def assert_attached(node: RealNode, name: str, networks: list[str]) -> dict[str, Any]:
    """The pod Running, its network-status naming the default network then `networks`, each
    entry's interface, addresses and MAC those of its netns, and nothing more there."""
    pod = node.wait_running(NS, name)
    status = wait_until(f"{name}'s network-status", lambda: node.network_status(NS, name), 30.0)
    assert [entry["name"] for entry in status] == [
        CLUSTER_NETWORK,
        *(f"{NS}/{network}" for network in networks),
    ]
    assert [entry["interface"] for entry in status] == [
        "eth0",
        *(f"net{index}" for index in range(1, len(networks) + 1)),
    ]
    node.check_network_status(pod, status)
    assert status[0]["default"] is True
    assert pod["status"]["podIP"] == status[0]["ips"][0].split("/")[0]
    return pod


@pytest.mark.req("KUBE-DEPLOY")
def test_pods_with_0_1_and_3_networks_run_with_the_network_status_of_their_netns(
    clean_node: RealNode,
) -> None:
    node = clean_node
    wanted = {"zero": [], "one": ["net-a"], "three": ["net-a", "net-b", "net-c"]}
    for name, networks in wanted.items():
        node.api.create(node.pod_object(NS, name, ",".join(networks) or None))
    for name, networks in wanted.items():
        assert_attached(node, name, networks)
    for name in wanted:
        node.delete_pod(NS, name)
    assert node.wait_clean() == CLEAN


@pytest.mark.req("RT-STATIC")
def test_a_static_pod_from_the_manifest_directory_attaches(clean_node: RealNode) -> None:
    node = clean_node
    manifest = node.fs(real_node.STATIC_PODS) / "na-static.yaml"
    pod = node.pod_object(NS, "static", "net-a", node_name=None)
    manifest.write_text(yaml.safe_dump(pod))
    mirror = f"static-{node.name}"
    try:
        found = assert_attached(node, mirror, ["net-a"])
        annotations = found["metadata"]["annotations"]
        assert annotations["kubernetes.io/config.source"] == "file"
        assert annotations["kubernetes.io/config.mirror"] != found["metadata"]["uid"]
    finally:
        manifest.unlink(missing_ok=True)
    wait_until("the mirror pod gone", lambda: node.pod(NS, mirror) is None, 90.0)
    assert node.wait_clean() == CLEAN


def test_the_netattach_pod_deleted_and_recreated_while_pods_exist_and_one_is_created(
    clean_node: RealNode,
) -> None:
    node = clean_node
    node.api.create(node.pod_object(NS, "before", "net-a,net-b"))
    assert_attached(node, "before", ["net-a", "net-b"])
    node.api.create(node.pod_object(NS, "leaving", "net-c"))
    assert_attached(node, "leaving", ["net-c"])
    (old,) = [pod["metadata"] for pod in node.daemon_pods()]
    with node.control.scheduler_stopped():  # its replacement unscheduled: no daemon meanwhile
        node.delete_pod("kube-system", old["name"])
        node.api.create(node.pod_object(NS, "during", "net-c"))
        node.delete_pod(NS, "leaving", wait=False)

        def failed_sandbox() -> list[dict[str, Any]]:
            events = node.api.events_for(NS, "during")
            return [e for e in events if e.get("reason") == "FailedCreatePodSandBox"]

        # the shim waits NETATTACH_SHIM_DAEMON_WAIT (30 s here, the default) at the ADD, and
        # again at the DEL containerd runs after a failed ADD: a minute, and then the event
        (event, *_) = wait_until("the sandbox refused for want of a daemon", failed_sandbox, 150.0)
        assert "connect failed" in event["message"]
        during = node.pod(NS, "during")
        assert during is not None
        assert during["status"]["phase"] == "Pending"
        leaving = node.pod(NS, "leaving")  # its DEL waits for a daemon (kubelet retries it)
        assert leaving is not None
        assert leaving["metadata"].get("deletionTimestamp")
    node.wait_daemon_ready(not_uid=old["uid"])
    assert_attached(node, "during", ["net-c"])
    assert_attached(node, "before", ["net-a", "net-b"])
    wait_until("the pod deleted meanwhile gone", lambda: node.pod(NS, "leaving") is None, 90.0)
    node.api.create(node.pod_object(NS, "after", "net-a"))
    assert_attached(node, "after", ["net-a"])
    for name in ("before", "during", "after"):
        node.delete_pod(NS, name)
    assert node.wait_clean() == CLEAN


def test_the_kubelet_and_containerd_restart_under_running_pods(clean_node: RealNode) -> None:
    node = clean_node
    node.api.create(node.pod_object(NS, "kept", "net-a"))
    before = assert_attached(node, "kept", ["net-a"])
    status = node.network_status(NS, "kept")

    node.kubelet.restart()
    node.api.create(node.pod_object(NS, "after-kubelet", "net-b"))
    assert_attached(node, "after-kubelet", ["net-b"])

    node.containerd.restart()
    node.api.create(node.pod_object(NS, "after-containerd", "net-c"))
    assert_attached(node, "after-containerd", ["net-c"])
    node.wait_daemon_ready()

    kept = assert_attached(node, "kept", ["net-a"])
    assert kept["metadata"]["uid"] == before["metadata"]["uid"]
    assert node.network_status(NS, "kept") == status
    for name in ("kept", "after-kubelet", "after-containerd"):
        node.delete_pod(NS, name)
    assert node.wait_clean() == CLEAN


def test_a_node_drain_tears_every_pod_down(clean_node: RealNode) -> None:
    node = clean_node
    names = ["drained-0", "drained-1", "drained-2"]
    for name in names:
        node.api.create(node.pod_object(NS, name, "net-a,net-c"))
    for name in names:
        assert_attached(node, name, ["net-a", "net-c"])
    try:
        node.kubectl(
            "drain", node.name, "--ignore-daemonsets", "--force", "--grace-period=5",
            "--timeout=120s", timeout=180,
        )  # fmt: skip
        assert node.api.list("Pod", NS) == []
        assert node.wait_clean() == CLEAN
        # the daemon's pod stays (DaemonSet pods are not drained)
        node.wait_daemon_ready()
    finally:
        node.kubectl("uncordon", node.name)


def test_pods_created_at_once_each_get_their_own_addresses(clean_node: RealNode) -> None:
    node = clean_node
    names = [f"burst-{index}" for index in range(6)]
    threads = [
        threading.Thread(target=node.api.create, args=(node.pod_object(NS, name, "net-a,net-b"),))
        for name in names
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    addresses: list[str] = []
    for name in names:
        assert_attached(node, name, ["net-a", "net-b"])
        addresses += [ip for entry in node.network_status(NS, name) or [] for ip in entry["ips"]]
    assert len(addresses) == len(set(addresses)) == 3 * len(names)
    for name in names:
        node.delete_pod(NS, name, wait=False)
    wait_until("the pods gone", lambda: node.api.list("Pod", NS) == [], 90.0)
    assert node.wait_clean() == CLEAN


HEAVY_PODS = 50


@pytest.mark.req("REL-BURST")
def test_a_burst_of_pods_on_heavy_delegates_stays_inside_the_daemonsets_memory_limit(
    clean_node: RealNode,
) -> None:
    """50 pods created at once, each on the default network and two NADs, the default network's
    plugin the heavy stand-in (tests/heavy_plugin.c: 60 MiB resident for the real bridge's run;
    the cluster's own config, as a cilium-cni-sized default network is, which no NAD's
    delegatePolicy judges): by count alone deploy/'s 8 at once (480 MiB) would pass the
    DaemonSet's 256 MiB. The daemon admits them by memory: nothing in its container is killed for
    memory, it never restarts, every pod runs with its networks, nothing leaks."""
    node = clean_node
    heavy_plugin.build(node.fs("/opt/cni/bin") / "heavy-bridge")
    conflist = node.fs(f"/etc/cni/net.d/10-{CLUSTER_NETWORK}.conflist")
    plain = conflist.read_text()
    heavy = json.loads(plain)
    heavy["plugins"][0]["type"] = "heavy-bridge"
    (daemon,) = node.daemon_pods()
    (container,) = daemon["status"]["containerStatuses"]
    container_id = container["containerID"].split("://", 1)[1]
    assert node.container_memory(container_id)["limit"] == 256 * 1024 * 1024  # deploy/'s
    names = [f"heavy-{index}" for index in range(HEAVY_PODS)]
    conflist.write_text(json.dumps(heavy))
    try:
        threads = [
            threading.Thread(target=node.api.create,
                             args=(node.pod_object(NS, name, "net-a,net-c"),))
            for name in names
        ]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for name in names:
            node.wait_running(NS, name, timeout=240.0)
            assert_attached(node, name, ["net-a", "net-c"])
        memory = node.container_memory(container_id)
        assert memory["oom_kills"] == 0, memory
        (after,) = node.daemon_pods()
        assert after["metadata"]["uid"] == daemon["metadata"]["uid"]
        (status,) = after["status"]["containerStatuses"]
        assert (status["restartCount"], status.get("lastState") or {}) == (0, {}), status
        for name in names:
            node.delete_pod(NS, name, wait=False)
        wait_until("the pods gone", lambda: node.api.list("Pod", NS) == [], 240.0)
        assert node.wait_clean() == CLEAN
        assert node.container_memory(container_id)["oom_kills"] == 0
    finally:
        conflist.write_text(plain)


def test_a_reboot_of_the_node_restarts_its_pods_with_their_networks_and_frees_the_old(
    clean_node: RealNode,
) -> None:
    node = clean_node
    node.api.create(node.pod_object(NS, "rebooted", "net-a,net-b"))
    before = assert_attached(node, "rebooted", ["net-a", "net-b"])
    assert len(node.leftovers().allocations) == 3  # eth0, net1 (net-b's macvlan: net2 too)

    node.reboot()

    node.wait_daemon_ready()

    def restarted() -> dict[str, Any] | None:
        pod = node.pod(NS, "rebooted")
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
        return pod if statuses[0].get("restartCount", 0) >= 1 else None

    wait_until("the pod's container started again", restarted, 120.0)
    after = assert_attached(node, "rebooted", ["net-a", "net-b"])
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    # the sandbox before the reboot had its DEL (kubelet's KillPodSandbox of the dead sandbox):
    # its addresses are back in their pools, its record gone

    def freed() -> bool:
        found = node.leftovers()
        return (len(found.allocations), len(found.records)) == (3, 1)

    try:
        wait_until("the old sandbox's allocations and record freed", freed, 60.0)
    except real_node.NodeError as exc:
        pytest.fail(f"{exc}: {node.leftovers()}")
    node.delete_pod(NS, "rebooted")
    assert node.wait_clean() == CLEAN


@pytest.mark.req("POL-SELECT")
@pytest.mark.req("POL-UPDATE")
def test_a_multinetworkpolicy_applied_through_the_api_drops_and_frees_traffic(
    clean_node: RealNode,
) -> None:
    node = clean_node
    node.api.create(node.pod_object(NS, "server", "net-a", labels={"app": "server"}))
    node.api.create(node.pod_object(NS, "client", "net-a"))
    server = assert_attached(node, "server", ["net-a"])
    client = assert_attached(node, "client", ["net-a"])
    (address,) = [e["ips"][0].split("/")[0] for e in node.network_status(NS, "server") or []
                  if e["name"] == f"{NS}/net-a"]  # fmt: skip
    client_netns = node.pod_netns(client)
    server_netns = node.pod_netns(server)
    assert connect_outcome(client_netns, address) == "refused"

    policy = node.api.create(
        {
            "apiVersion": "k8s.cni.cncf.io/v1beta1",
            "kind": "MultiNetworkPolicy",
            "metadata": {
                "name": "deny-server",
                "namespace": NS,
                "annotations": {"k8s.v1.cni.cncf.io/policy-for": f"{NS}/net-a"},
            },
            "spec": {
                "podSelector": {"matchLabels": {"app": "server"}},
                "policyTypes": ["Ingress"],
                "ingress": [],
            },
        }
    )

    def table() -> str:
        done = subprocess.run(
            ["nsenter", f"--net={server_netns}", "--", "nft", "list", "table", "inet", "netattach"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return done.stdout if done.returncode == 0 else ""

    wait_until("the policy's table in the server's netns",
               lambda: policy["metadata"]["uid"] in table(), 60.0)  # fmt: skip
    assert connect_outcome(client_netns, address) == "dropped"

    path = f"/apis/k8s.cni.cncf.io/v1beta1/namespaces/{NS}/multi-networkpolicies/deny-server"
    assert node.api.http.request("DELETE", path).status == 200
    wait_until("the policy gone from the server's netns",
               lambda: policy["metadata"]["uid"] not in table(), 60.0)  # fmt: skip
    assert connect_outcome(client_netns, address) == "refused"
    for name in ("server", "client"):
        node.delete_pod(NS, name)
    assert node.wait_clean() == CLEAN


@pytest.mark.req("NAD-RESOLVE")
def test_a_pod_created_before_its_nad_waits_with_an_event_then_starts_with_it(
    clean_node: RealNode,
) -> None:
    node = clean_node
    node.api.create(node.pod_object(NS, "early", "net-a,net-late"))

    def refused() -> list[dict[str, Any]]:
        events = node.api.events_for(NS, "early")
        return [e for e in events if e.get("reason") == "NetworkAttachmentDefinitionNotFound"]

    (event, *_) = wait_until("a NetworkAttachmentDefinitionNotFound Event", refused, 60.0)
    assert event["type"] == "Warning"
    assert f"{NS}/net-late" in event["message"]
    pending = node.pod(NS, "early")
    assert pending is not None
    assert pending["status"]["phase"] == "Pending"
    late = {"type": "bridge", "bridge": "na-br-late", "ipam": NADS_LATE_IPAM}
    node.api.create(
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "net-late", "namespace": NS},
            "spec": {"config": json.dumps({"cniVersion": "1.0.0", "plugins": [late]})},
        }
    )
    node.bridges.add("na-br-late")
    # the kubelet's next sandbox, after its back-off
    assert_attached(node, "early", ["net-a", "net-late"])
    node.delete_pod(NS, "early")
    assert node.wait_clean() == CLEAN


@pytest.mark.req("RT-HOTPLUG")
def test_a_running_pods_selection_edited_through_the_api_adds_and_removes_attachments(
    clean_node: RealNode,
) -> None:
    node = clean_node
    node.api.create(node.pod_object(NS, "edited", "net-a"))
    pod = assert_attached(node, "edited", ["net-a"])

    def selected(networks: str) -> None:
        patch = {"metadata": {"annotations": {"k8s.v1.cni.cncf.io/networks": networks}}}
        node.api.patch("Pod", "edited", patch, NS)

    def shown() -> list[tuple[str, str]]:
        status = node.network_status(NS, "edited") or []
        return [(entry["name"], entry["interface"]) for entry in status]

    selected("net-a,net-c")
    added = [(CLUSTER_NETWORK, "eth0"), (f"{NS}/net-a", "net1"), (f"{NS}/net-c", "net2")]
    wait_until("net-c hot-plugged", lambda: shown() == added, 60.0)
    assert sorted(node.pod_interfaces(pod)) == ["eth0", "net1", "net2"]
    selected("net-c")
    left = [(CLUSTER_NETWORK, "eth0"), (f"{NS}/net-c", "net2")]
    wait_until("net-a unplugged", lambda: shown() == left, 60.0)
    assert sorted(node.pod_interfaces(pod)) == ["eth0", "net2"]
    # one allocation each for eth0 and net2: net-a's address is back in its pool
    assert len(node.leftovers().allocations) == 2
    node.delete_pod(NS, "edited")
    assert node.wait_clean() == CLEAN


# -- devices: a device plugin's VFs through the kubelet to the attachments (DEV-RESOURCE) ------

DEVICE_RESOURCE = "netattach.test/vf"
DEVICE_VFS = ["0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2"]
DEVICE_BRIDGE = "na-br-d"
DEVICE_NADS = {"vf-a": "10.90.1.0/24", "vf-b": "10.90.2.0/24"}


def device_nad(node: RealNode, name: str, subnet: str, resource: str) -> None:
    """A bridge NAD (host-local on `subnet`) annotated with `resource`, on the device tests'
    bridge (created once per node)."""
    node.bridges.add(DEVICE_BRIDGE)
    if node.api.get("NetworkAttachmentDefinition", name, NS) is not None:
        return
    plugin = {
        "type": "bridge",
        "bridge": DEVICE_BRIDGE,
        "ipam": {"type": "host-local", "subnet": subnet},
    }
    config = {"cniVersion": "1.0.0", "name": name, "plugins": [plugin]}
    node.api.create(
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {
                "name": name,
                "namespace": NS,
                "annotations": {"k8s.v1.cni.cncf.io/resourceName": resource},
            },
            "spec": {"config": json.dumps(config)},
        }
    )


def pod_record(node: RealNode, name: str) -> dict[str, Any]:
    """The daemon's record of the pod `NS/name` (its state dir is the node's /var/lib/netattach)."""
    for path in node.fs("/var/lib/netattach/pods").glob("*.json"):
        record = json.loads(path.read_text())
        if (record.get("namespace"), record.get("pod")) == (NS, name):
            return dict(record)
    raise AssertionError(f"no record of {NS}/{name}")


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.req("DEV-INFO")
def test_a_pods_allocated_vfs_reach_its_attachments_through_the_real_kubelet(
    clean_node: RealNode,
) -> None:
    from tests.devices import device_plugin
    from tests.devices.podresources_client import PodResourcesReader, devices_of

    node = clean_node
    for name, subnet in DEVICE_NADS.items():
        device_nad(node, name, subnet, DEVICE_RESOURCE)
    dp_dir = node.fs("/var/run/k8s.cni.cncf.io/devinfo/dp")
    with device_plugin.FakeDevicePlugin(
        node.fs(device_plugin.PLUGIN_DIR), DEVICE_RESOURCE, DEVICE_VFS, device_info_dir=dp_dir
    ) as plugin:

        def allocatable() -> bool:
            response = node.api.http.get(f"/api/v1/nodes/{node.name}")
            stored = response.json() if response.status == 200 else {}
            found = ((stored.get("status") or {}).get("allocatable") or {}).get(DEVICE_RESOURCE)
            return str(found) == str(len(DEVICE_VFS))

        wait_until(f"the Node's allocatable {DEVICE_RESOURCE}", allocatable, 60.0)
        for name, networks, count in (("two-vfs", "vf-a,vf-b", 2), ("one-vf", "vf-b", 1)):
            pod = node.pod_object(NS, name, networks)
            pod["spec"]["containers"][0]["resources"] = {"limits": {DEVICE_RESOURCE: str(count)}}
            node.api.create(pod)
        for name in ("two-vfs", "one-vf"):
            node.wait_running(NS, name)

        with PodResourcesReader(node.fs("/var/lib/kubelet/pod-resources/kubelet.sock")) as kubelet:
            # The kubelet answers a container's devices from a set (their order changes from
            # one answer to the next): netattach hands them out sorted.
            given = {
                name: sorted(devices_of(kubelet.get(NS, name), DEVICE_RESOURCE))
                for name in ("two-vfs", "one-vf")
            }
        # Each attachment got the kubelet's devices of its pod, in selection order, and the
        # delegates ran with them (the record holds each config as it ran).
        for name, ifnames in (("two-vfs", ["net1", "net2"]), ("one-vf", ["net1"])):
            attachments = pod_record(node, name)["attachments"][1:]
            assert [a["ifname"] for a in attachments] == ifnames
            assert [a["device"] for a in attachments] == given[name]
            for att in attachments:
                for plugin_config in att["config"]["plugins"]:
                    assert plugin_config["deviceID"] == plugin_config["pciBusID"] == att["device"]
            status = node.network_status(NS, name)
            assert status is not None
            # DEV-INFO: the device plugin's device-info of each attachment's VF
            assert [e.get("device-info", {}).get("pci", {}).get("pci-address") for e in status] == [
                None,
                *given[name],
            ]
        assert len({*given["two-vfs"], *given["one-vf"]}) == 3
        assert sorted(sorted(ids) for ids in plugin.allocations) == sorted(
            sorted(ids) for ids in given.values()
        )
        for name in ("two-vfs", "one-vf"):
            node.delete_pod(NS, name)
    assert node.wait_clean() == CLEAN


# -- devices: a DRA driver's device through the kubelet to the attachment (DEV-RESOURCE) -------

DRA_CLAIM = "vf-claim"
DRA_CLASS = "na-vf.netattach.test"
DRA_DEVICES = ["vf-0", "vf-1"]
DRA_NAD = "vf-dra"
DRA_SUBNET = "10.90.3.0/24"
RESOURCE_V1 = "/apis/resource.k8s.io/v1"


def dra_nad(node: RealNode) -> None:
    """A bridge NAD whose resourceName is the claim's name."""
    device_nad(node, DRA_NAD, DRA_SUBNET, DRA_CLAIM)


@pytest.fixture
def resource_objects(node: RealNode) -> Iterator[list[str]]:
    """Paths of the resource.k8s.io objects a test creates (appended by it), each deleted at
    teardown whatever happened; asked for before `clean_node`, so after its pods are gone (a
    claim outlives its pod)."""
    created: list[str] = []
    yield created
    for path in reversed(created):
        response = node.api.http.request("DELETE", path)
        assert response.status in (200, 202, 404), f"DELETE {path}: {response.status}"


@pytest.mark.req("DEV-RESOURCE")
def test_a_dra_claims_device_reaches_its_attachment_through_the_real_kubelet(
    resource_objects: list[str], clean_node: RealNode
) -> None:
    from tests.devices import dra_driver
    from tests.devices.podresources_client import PodResourcesReader

    node = clean_node
    http = node.api.http
    dra_nad(node)

    def fetch_claim(namespace: str, name: str) -> dict[str, Any] | None:
        response = http.get(f"{RESOURCE_V1}/namespaces/{namespace}/resourceclaims/{name}")
        return dict(response.json()) if response.status == 200 else None

    def created(path: str, obj: dict[str, Any]) -> dict[str, Any]:
        response = http.post(path, obj)
        assert response.status == 201, f"POST {path}: {response.status} {response.body!r}"
        stored: dict[str, Any] = response.json()
        resource_objects.append(f"{path}/{stored['metadata']['name']}")
        return stored

    driver = dra_driver.FakeDraDriver(node.fs, fetch_claim, devices=DRA_DEVICES)
    with driver:  # registered with the kubelet through its plugin watcher
        # what the driver's controller publishes, and the class a cluster admin makes
        created(f"{RESOURCE_V1}/resourceslices", driver.resource_slice(node.name))
        created(f"{RESOURCE_V1}/deviceclasses", driver.device_class(DRA_CLASS))
        request = {
            "name": "vf",
            "exactly": {"deviceClassName": DRA_CLASS, "allocationMode": "ExactCount", "count": 1},
        }
        claim = created(
            f"{RESOURCE_V1}/namespaces/{NS}/resourceclaims",
            {
                "apiVersion": dra_driver.RESOURCE_API,
                "kind": "ResourceClaim",
                "metadata": {"name": DRA_CLAIM, "namespace": NS},
                "spec": {"devices": {"requests": [request]}},
            },
        )
        pod_object = node.pod_object(NS, "dra", DRA_NAD, node_name=None)
        pod_object["spec"]["resourceClaims"] = [{"name": "net", "resourceClaimName": DRA_CLAIM}]
        pod_object["spec"]["containers"][0]["resources"] = {"claims": [{"name": "net"}]}
        pod = node.api.create(pod_object)

        # kube-scheduler placed the pod and allocated the claim on the node, reserved for it
        running = node.wait_running(NS, "dra")
        assert running["spec"]["nodeName"] == node.name
        allocated = fetch_claim(NS, DRA_CLAIM)
        assert allocated is not None
        status = allocated["status"]
        (result,) = status["allocation"]["devices"]["results"]
        assert (result["request"], result["driver"], result["pool"]) == (
            "vf",
            driver.driver_name,
            node.name,
        )
        device = result["device"]
        assert device in DRA_DEVICES
        assert [r["uid"] for r in status["reservedFor"]] == [pod["metadata"]["uid"]]
        assert list(driver.prepared.values()) == [[device]]

        with PodResourcesReader(node.fs("/var/lib/kubelet/pod-resources/kubelet.sock")) as kubelet:
            reported = kubelet.get(NS, "dra")
        (container,) = reported.containers
        (dynamic,) = container.dynamic_resources
        assert (dynamic.claim_name, dynamic.claim_namespace) == (DRA_CLAIM, NS)
        (resource,) = dynamic.claim_resources
        assert (resource.driver_name, resource.pool_name, resource.device_name) == (
            driver.driver_name,
            node.name,
            device,
        )
        assert [cdi.name for cdi in resource.cdi_devices] == [driver.cdi_name(device)]

        # the attachment got the claim's device (the CDI name's device part), and its delegate
        # ran with it (the record holds each config as it ran)
        (attachment,) = pod_record(node, "dra")["attachments"][1:]
        assert (attachment["ifname"], attachment["device"]) == ("net1", device)
        for plugin_config in attachment["config"]["plugins"]:
            assert plugin_config["deviceID"] == plugin_config["pciBusID"] == device
        status = node.network_status(NS, "dra")
        assert status is not None
        assert [entry["name"] for entry in status] == [CLUSTER_NETWORK, f"{NS}/{DRA_NAD}"]

        node.delete_pod(NS, "dra")
        wait_until("the claim unprepared", lambda: driver.unprepared, 60.0)
        assert driver.unprepared == [claim["metadata"]["uid"]]
        assert driver.prepared == {}
    assert node.wait_clean() == CLEAN


# -- last: netattach uninstalled (every test above needs its daemon) ------------------------


@pytest.mark.req("KUBE-DEPLOY")
def test_uninstalled_as_docs_deploy_says_pods_start_on_the_default_network_alone(
    clean_node: RealNode,
) -> None:
    """The module's last test: the node has no daemon afterwards."""
    node = clean_node
    node.kubectl(
        "-n", "kube-system", "delete", "daemonset/netattach", "configmap/netattach",
        "serviceaccount/netattach",
    )  # fmt: skip
    node.kubectl("delete", "clusterrole/netattach", "clusterrolebinding/netattach")
    # the DaemonSet's pod goes through the garbage collector (kubectl deletes in background)
    wait_until("the daemon's pod deleted", lambda: node.daemon_pods() == [], 90.0)
    conflist = node.fs("/etc/cni/net.d/00-netattach.conflist")
    assert conflist.exists()  # deploy/configmap.yaml's cleanupOnExit: false
    # what docs/deploy.md says to remove on each node
    conflist.unlink()
    node.fs("/opt/cni/bin/netattach").unlink()
    shutil.rmtree(node.fs("/var/lib/netattach"))

    node.api.create(node.pod_object(NS, "plain", "net-a"))
    pod = node.wait_running(NS, "plain")
    # the runtime's next config, the default network's own: no netattach, no status
    assert sorted(node.pod_interfaces(pod)) == ["eth0"]
    subnet = ipaddress.ip_network(real_node.CLUSTER_SUBNET)
    assert ipaddress.ip_address(pod["status"]["podIP"]) in subnet
    assert node.network_status(NS, "plain") is None
    node.delete_pod(NS, "plain")
    assert node.wait_clean() == CLEAN
