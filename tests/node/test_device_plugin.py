"""The device parts of tests/devices against the real kubelet of tests/node/real_node.py.

The fake device plugin serves and registers in the kubelet's device plugin directory (the node's
/var/lib/kubelet/device-plugins, reached through the node holder's /proc/PID/root: the kubelet
dials the plugin's socket by its path in the node, the same inode); the kubelet then reports its
devices in the Node's allocatable, gives pods that ask for them distinct ones through Allocate,
and reports what it gave on its PodResources socket, which the tests' own reader (the messages of
tests/devices/podresources.proto) reads. netattach is not deployed: the pods' one network is the
cluster's default bridge, which containerd runs itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from tests.devices import device_plugin
from tests.devices.device_plugin import FakeDevicePlugin
from tests.devices.podresources_client import PodResourcesReader, devices_of, find_pod
from tests.node import real_node
from tests.node.harness import require_real_node
from tests.node.real_node import Leftovers, RealNode, wait_until

pytestmark = [pytest.mark.netns, pytest.mark.timeout(900)]

NS = "na-dev"
RESOURCE = "netattach.test/vf"
VFS = ["0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2", "0000:3b:02.3"]
PODRESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEVICE_INFO_DIR = "/var/run/k8s.cni.cncf.io/devinfo/dp"  # NPWG device-info spec, a plugin's
# the kubelet updates the Node's status when it changes, checked every 10 s by default
ALLOCATABLE_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    require_real_node()
    with real_node.real_node(tmp_path_factory.mktemp("na-dev-node")) as made:
        made.create_namespace(NS)
        yield made


@pytest.fixture
def plugin(node: RealNode) -> Iterator[FakeDevicePlugin]:
    """The plugin registered with the node's kubelet; at teardown the test's pods are deleted
    (before the plugin stops) and nothing of them is left on the node."""
    with FakeDevicePlugin(
        node.fs(device_plugin.PLUGIN_DIR),
        RESOURCE,
        VFS,
        device_info_dir=node.fs(DEVICE_INFO_DIR),
    ) as made:
        try:
            yield made
        finally:
            for pod in node.api.list("Pod", NS):
                node.delete_pod(NS, pod["metadata"]["name"])
    assert node.wait_clean() == Leftovers()


def allocatable(node: RealNode) -> str | None:
    response = node.api.http.get(f"/api/v1/nodes/{node.name}")
    stored = response.json() if response.status == 200 else {}
    value = ((stored.get("status") or {}).get("allocatable") or {}).get(RESOURCE)
    return str(value) if value is not None else None


def wait_allocatable(node: RealNode) -> None:
    """Until the Node's status offers every device of the plugin."""
    wait_until(
        f"the Node's allocatable {RESOURCE}: {len(VFS)}",
        lambda: allocatable(node) == str(len(VFS)),
        ALLOCATABLE_TIMEOUT,
    )


def pod_asking(node: RealNode, name: str, count: int) -> dict[str, Any]:
    """A pod of no extra network whose container asks for `count` of the plugin's devices."""
    pod = node.pod_object(NS, name)
    # an extended resource is asked for by its limit (the request defaults to it)
    pod["spec"]["containers"][0]["resources"] = {"limits": {RESOURCE: str(count)}}
    return pod


# No requirement ID: this proves the test tree's parts against the kubelet, not netattach (that
# is tests/node/test_real_kubelet.py's device tests, DEV-RESOURCE).
def test_the_kubelet_gives_pods_distinct_devices_of_the_plugin_and_podresources_names_them(
    node: RealNode, plugin: FakeDevicePlugin
) -> None:
    wait_allocatable(node)
    assert plugin.calls["GetDevicePluginOptions"] == 1  # during Register
    assert all(path.is_file() for path in plugin.device_info_files())

    node.api.create(pod_asking(node, "two", 2))
    node.wait_running(NS, "two")
    with PodResourcesReader(node.fs(PODRESOURCES_SOCKET)) as reader:
        two = devices_of(reader.get(NS, "two"), RESOURCE)
        assert len(set(two)) == 2
        assert set(two) <= set(VFS)
        listed = find_pod(reader.list(), NS, "two")
        assert listed is not None
        assert sorted(devices_of(listed, RESOURCE)) == sorted(two)
        # what the kubelet reports is what it asked the plugin to prepare
        assert [sorted(ids) for ids in plugin.allocations] == [sorted(two)]

        node.api.create(pod_asking(node, "one", 1))
        node.wait_running(NS, "one")
        (one,) = devices_of(reader.get(NS, "one"), RESOURCE)
        assert one in VFS
        assert one not in two
        assert {(pod.namespace, pod.name) for pod in reader.list()} >= {
            (NS, "two"),
            (NS, "one"),
        }


def test_after_a_kubelet_restart_the_plugin_registers_again_and_a_pod_keeps_its_device(
    node: RealNode, plugin: FakeDevicePlugin
) -> None:
    wait_allocatable(node)
    node.api.create(pod_asking(node, "kept", 1))
    node.wait_running(NS, "kept")
    with PodResourcesReader(node.fs(PODRESOURCES_SOCKET)) as reader:
        (before,) = devices_of(reader.get(NS, "kept"), RESOURCE)

    def known(reader: PodResourcesReader) -> Any:
        try:
            return reader.get(NS, "kept")
        except grpc.RpcError as exc:
            if isinstance(exc, grpc.Call) and exc.code() is grpc.StatusCode.UNKNOWN:
                return None
            raise

    node.kubelet.restart()
    # a device manager that starts removes every socket of its directory, the plugin's too
    wait_until("the plugin's socket removed", lambda: not plugin.socket.exists(), 60.0)
    plugin.reregister()
    # the kubelet opens ListAndWatch after it answers Register
    wait_until("a second ListAndWatch", lambda: plugin.calls["ListAndWatch"] == 2, 30.0)
    wait_until(
        f"the Node's allocatable {RESOURCE}: {len(VFS)} again",
        lambda: allocatable(node) == str(len(VFS)),
        ALLOCATABLE_TIMEOUT,
    )
    with PodResourcesReader(node.fs(PODRESOURCES_SOCKET)) as reader:
        # a kubelet that starts serves PodResources before it has listed its pods from the API
        # server: Get answers "not found" (and List leaves the pod out) for about a second
        after = wait_until("kept known to PodResources again", lambda: known(reader), 30.0)
        # the kubelet's checkpoint keeps the running pod's device across the restart
        assert devices_of(after, RESOURCE) == [before]
        assert node.wait_running(NS, "kept")["status"]["phase"] == "Running"
        # and a pod admitted after it gets another one from the plugin registered again
        node.api.create(pod_asking(node, "new", 1))
        node.wait_running(NS, "new")
        (new,) = devices_of(reader.get(NS, "new"), RESOURCE)
    assert new != before
    assert (new,) in plugin.allocations
