"""Devices the kubelet allocated, handed to attachments (DEV-RESOURCE, DEV-INFO), with the real
plugins in real namespaces and the kubelet's PodResources API served by the test tree's
stand-in (tests/devices/podresources_server.py: a real gRPC server on a UNIX socket; the same
behaviour through the real kubelet is tests/node/test_device_plugin.py).

What each delegate was given is read from its own stdin: the reference `bridge` plugin runs
behind the recording tee of tests/e2e/test_runtime_requests.py.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.cli.harness import netattach
from tests.devices import podresources_server
from tests.devices.podresources_server import Claim, Container, PodResourcesStandIn
from tests.e2e.daemon_harness import DaemonNode, daemon, native_shim, wait_for
from tests.e2e.harness import NOTHING, Cluster, Pod, bridge_list, host_local
from tests.e2e.recorder_harness import pod_record, recorded, tee

pytestmark = pytest.mark.netns

__all__ = ["daemon", "native_shim"]  # the fixtures used here

RESOURCE = "netattach.test/vf"
RESOURCE_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"
DEVICES = ("0000:03:00.1", "0000:03:00.2", "0000:03:00.3")


@pytest.fixture
def kubelet(cluster: Cluster) -> Iterator[PodResourcesStandIn]:
    """The kubelet's PodResources API for the cluster's node: a stand-in on a short socket path
    (sun_path is 107 bytes), named in the settings with the device-info directory."""
    with podresources_server.serving() as api:
        cluster.settings["podResourcesSocket"] = str(api.socket)
        cluster.settings["deviceInfoDir"] = str(cluster.root / "devinfo")
        yield api


def add_device_nad(
    cluster: Cluster, ns: str, name: str, subnet: str, resource: str = RESOURCE, **extra: Any
) -> None:
    """A bridge NAD of its own subnet annotated with `resource`."""
    config = bridge_list(name, host_local(cluster.ipam, subnet), **extra)
    obj = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": ns, "annotations": {RESOURCE_ANNOTATION: resource}},
        "spec": {"config": json.dumps(config)},
    }
    cluster._write_manifest(f"nad-{ns}-{name}.yaml", obj)


def allocate(api: PodResourcesStandIn, pod: Pod, *devices: str, resource: str = RESOURCE) -> None:
    """What the kubelet's device manager gave the pod: `devices` of `resource`, on two
    containers (the kubelet pools them per pod, in container order)."""
    first, rest = devices[:1], devices[1:]
    api.set_pod(
        pod.ns,
        pod.name,
        [
            Container(name="app", devices={resource: list(first)} if first else {}),
            Container(name="sidecar", devices={resource: list(rest)} if rest else {}),
        ],
    )


def device_of(call: dict[str, Any]) -> tuple[str, str]:
    stdin = call["stdin"]
    return stdin.get("deviceID", ""), stdin.get("pciBusID", "")


def write_dp_info(cluster: Cluster, device: str, resource: str = RESOURCE) -> dict[str, Any]:
    """The device plugin's device-info file for `device` (NPWG device-info spec)."""
    info = {"type": "pci", "version": "1.1.0", "pci": {"pci-address": device}}
    path = cluster.root / "devinfo" / "dp" / f"{resource.replace('/', '-')}-{device}-device.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info))
    return info


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.req("DEV-INFO")
def test_each_attachment_of_a_resource_gets_its_own_allocated_device_for_add_and_del(
    cluster: Cluster, kubelet: PodResourcesStandIn, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    tee(cluster, "bridge", log)
    add_device_nad(cluster, "default", "vf-a", "10.81.1.0/24")
    add_device_nad(cluster, "default", "vf-b", "10.81.2.0/24")
    pod = cluster.pod("default", "dev", "vf-a, vf-b")
    allocate(kubelet, pod, DEVICES[0], DEVICES[1])
    info = write_dp_info(cluster, DEVICES[1])

    reply = cluster.add(pod)

    assert reply.rc == 0, reply.stderr
    adds = recorded(log, command="ADD")
    by_ifname = {c["env"]["CNI_IFNAME"]: device_of(c) for c in adds}
    # Selection order takes the kubelet's order; the default network gets none.
    assert by_ifname == {
        "eth0": ("", ""),
        "net1": (DEVICES[0], DEVICES[0]),
        "net2": (DEVICES[1], DEVICES[1]),
    }
    record = pod_record(cluster, pod)
    assert [(a["ifname"], a.get("resource"), a.get("device")) for a in record["attachments"]] == [
        ("eth0", None, None),
        ("net1", RESOURCE, DEVICES[0]),
        ("net2", RESOURCE, DEVICES[1]),
    ]
    status = cluster.status(pod.ns, pod.name)
    assert status is not None
    # DEV-INFO: the device plugin left a file for the second device only.
    assert [e.get("device-info") for e in status] == [None, None, info]
    assert kubelet.calls["Get"] == 1

    assert cluster.delete(pod).rc == 0
    dels = recorded(log, command="DEL")
    assert {c["env"]["CNI_IFNAME"]: device_of(c) for c in dels} == by_ifname
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("DEV-RESOURCE")
def test_check_and_a_second_del_use_the_recorded_device_without_asking_the_kubelet(
    cluster: Cluster, kubelet: PodResourcesStandIn, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    tee(cluster, "bridge", log)
    add_device_nad(cluster, "default", "vf-a", "10.81.3.0/24")
    pod = cluster.pod("default", "dev", "vf-a")
    allocate(kubelet, pod, DEVICES[2])
    assert cluster.add(pod).rc == 0
    kubelet.stop()  # the kubelet restarting: DEL and CHECK never need it

    assert cluster.check(pod).rc == 0
    assert cluster.delete(pod).rc == 0

    for command in ("CHECK", "DEL"):
        calls = recorded(log, command=command, ifname="net1")
        assert calls, command
        assert {device_of(c) for c in calls} == {(DEVICES[2], DEVICES[2])}
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("DEV-RESOURCE")
def test_the_daemon_restarted_deletes_with_the_device_its_record_holds(
    cluster: Cluster, kubelet: PodResourcesStandIn, daemon: DaemonNode, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    tee(cluster, "bridge", log)
    add_device_nad(cluster, "default", "vf-a", "10.81.13.0/24")
    add_device_nad(cluster, "default", "vf-b", "10.81.14.0/24")
    pod = cluster.pod("default", "dev", "vf-b, vf-a")
    allocate(kubelet, pod, DEVICES[2], DEVICES[0])
    daemon.settings["binDirs"] = cluster.settings["binDirs"]  # the tee first
    daemon.start()
    assert daemon.shim("ADD", pod).rc == 0
    added = {c["env"]["CNI_IFNAME"]: device_of(c) for c in recorded(log, command="ADD")}
    assert added == {
        "eth0": ("", ""),
        "net1": (DEVICES[2], DEVICES[2]),
        "net2": (DEVICES[0], DEVICES[0]),
    }
    # `netattach status` says which device each attachment holds.
    shown = netattach("status", "--socket", str(daemon.socket), "default/dev", "-o", "json")
    assert shown.rc == 0, shown.stderr
    (reported,) = json.loads(shown.stdout)["pods"]
    assert [a.get("device") for a in reported["attachments"]] == [None, DEVICES[2], DEVICES[0]]
    table = netattach("status", "--socket", str(daemon.socket), "default/dev")
    assert f"net1 ({DEVICES[2]})" in table.stdout

    assert daemon.stop() == 0
    kubelet.stop()  # and the kubelet gone too: the record alone says which device was given
    daemon.start()
    assert daemon.shim("DEL", pod).rc == 0

    deleted = {c["env"]["CNI_IFNAME"]: device_of(c) for c in recorded(log, command="DEL")}
    assert deleted == added
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.req("RT-HOTPLUG")
def test_a_resource_network_hotplugged_gets_a_device_the_pod_does_not_hold_yet(
    cluster: Cluster, kubelet: PodResourcesStandIn, daemon: DaemonNode, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    tee(cluster, "bridge", log)
    add_device_nad(cluster, "default", "vf-a", "10.81.15.0/24")
    add_device_nad(cluster, "default", "vf-b", "10.81.16.0/24")
    pod = cluster.pod("default", "dev", "vf-b")
    allocate(kubelet, pod, DEVICES[0], DEVICES[1])
    daemon.settings["binDirs"] = cluster.settings["binDirs"]
    daemon.start()
    assert daemon.shim("ADD", pod).rc == 0
    before = cluster.interfaces(pod.netns)["net1"].mac

    # vf-a now comes first: the kept attachment keeps its device, the new one gets the other.
    cluster.add_pod(pod.ns, pod.name, pod.uid, "vf-a@net2, vf-b@net1")

    def converged() -> dict[str, Any] | None:
        record = pod_record(cluster, pod)
        return record if record.get("selection") == "vf-a@net2, vf-b@net1" else None

    record = wait_for("the hot-plug of vf-a", converged, 30.0)
    assert {a["ifname"]: a.get("device") for a in record["attachments"]} == {
        "eth0": None,
        "net1": DEVICES[0],
        "net2": DEVICES[1],
    }
    assert cluster.interfaces(pod.netns)["net1"].mac == before  # not made again
    assert len(recorded(log, command="ADD", ifname="net1")) == 1
    (call,) = recorded(log, command="ADD", ifname="net2")
    assert device_of(call) == (DEVICES[1], DEVICES[1])

    assert daemon.shim("DEL", pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.req("RT-HOTPLUG")
def test_a_resource_network_swapped_for_another_takes_the_device_the_first_gives_back(
    cluster: Cluster, kubelet: PodResourcesStandIn, daemon: DaemonNode, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    tee(cluster, "bridge", log)
    add_device_nad(cluster, "default", "vf-a", "10.81.17.0/24")
    add_device_nad(cluster, "default", "vf-b", "10.81.18.0/24")
    pod = cluster.pod("default", "dev", "vf-a")
    allocate(kubelet, pod, DEVICES[1])  # one device only
    daemon.settings["binDirs"] = cluster.settings["binDirs"]
    daemon.start()
    assert daemon.shim("ADD", pod).rc == 0

    cluster.add_pod(pod.ns, pod.name, pod.uid, "vf-b")

    def converged() -> dict[str, Any] | None:
        record = pod_record(cluster, pod)
        return record if record.get("selection") == "vf-b" else None

    record = wait_for("vf-a swapped for vf-b", converged, 30.0)
    assert [(a["statusName"], a.get("device")) for a in record["attachments"][1:]] == [
        ("default/vf-b", DEVICES[1])
    ]
    (call,) = recorded(log, command="DEL", ifname="net1")
    assert device_of(call) == (DEVICES[1], DEVICES[1])  # vf-a's, given back first

    assert daemon.shim("DEL", pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("DEV-INFO")
def test_a_delegate_declaring_cni_device_info_file_gets_the_plugins_file_copied_and_it_goes_at_del(
    cluster: Cluster, kubelet: PodResourcesStandIn, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    tee(cluster, "bridge", log)
    add_device_nad(
        cluster, "default", "vf-a", "10.81.4.0/24", capabilities={"CNIDeviceInfoFile": True}
    )
    pod = cluster.pod("default", "dev", "vf-a")
    allocate(kubelet, pod, DEVICES[0])
    info = write_dp_info(cluster, DEVICES[0])

    assert cluster.add(pod).rc == 0

    (call,) = recorded(log, command="ADD", ifname="net1")
    handed = Path(call["stdin"]["runtimeConfig"]["CNIDeviceInfoFile"])
    assert handed.parent == cluster.root / "devinfo" / "cni"
    assert json.loads(handed.read_text()) == info
    status = cluster.status(pod.ns, pod.name)
    assert status is not None
    assert status[1]["device-info"] == info

    assert cluster.delete(pod).rc == 0
    assert not handed.exists()
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("DEV-RESOURCE")
def test_a_kubelet_without_get_is_asked_with_list(
    cluster: Cluster, kubelet: PodResourcesStandIn, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    tee(cluster, "bridge", log)
    add_device_nad(cluster, "default", "vf-a", "10.81.5.0/24")
    pod = cluster.pod("default", "dev", "vf-a")
    allocate(kubelet, pod, DEVICES[1])
    kubelet.fail("Get", grpc.StatusCode.UNIMPLEMENTED)

    assert cluster.add(pod).rc == 0

    assert (kubelet.calls["Get"], kubelet.calls["List"]) == (1, 1)
    (call,) = recorded(log, command="ADD", ifname="net1")
    assert device_of(call) == (DEVICES[1], DEVICES[1])
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("DEV-RESOURCE")
def test_a_dra_claim_gives_the_device_part_of_its_cdi_name(
    cluster: Cluster, kubelet: PodResourcesStandIn, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    tee(cluster, "bridge", log)
    add_device_nad(cluster, "default", "vf-a", "10.81.6.0/24", resource="dev-claim")
    pod = cluster.pod("default", "dev", "vf-a")
    claim = Claim(
        claim_name="dev-claim",
        claim_namespace="default",
        driver="vf.netattach.test",
        pool="node-1",
        device="vf-7",
        cdi_devices=["netattach.test/vf=vf-7"],
    )
    kubelet.set_pod(pod.ns, pod.name, [Container(name="app", claims=[claim])])

    assert cluster.add(pod).rc == 0

    (call,) = recorded(log, command="ADD", ifname="net1")
    assert device_of(call) == ("vf-7", "vf-7")
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


# -- refusals: a clear error and nothing attached ---------------------------------------------


@pytest.mark.req("DEV-RESOURCE")
def test_a_pod_without_the_resource_is_refused_naming_pod_nad_and_resource(
    cluster: Cluster, kubelet: PodResourcesStandIn
) -> None:
    add_device_nad(cluster, "default", "vf-a", "10.81.7.0/24")
    pod = cluster.pod("default", "dev", "vf-a")
    kubelet.set_pod(pod.ns, pod.name, [Container(name="app", devices={"other.io/gpu": ["g0"]})])

    reply = cluster.add(pod)

    assert reply.code == 102, reply.out
    for part in (
        "default/dev",
        "NetworkAttachmentDefinition default/vf-a",
        RESOURCE,
        "other.io/gpu",
    ):
        assert part in reply.text, (part, reply.text)
    cluster.nothing_ran()


@pytest.mark.req("DEV-RESOURCE")
def test_more_attachments_than_devices_is_refused_before_anything_runs(
    cluster: Cluster, kubelet: PodResourcesStandIn
) -> None:
    add_device_nad(cluster, "default", "vf-a", "10.81.8.0/24")
    add_device_nad(cluster, "default", "vf-b", "10.81.9.0/24")
    pod = cluster.pod("default", "dev", "vf-a, vf-b")
    allocate(kubelet, pod, DEVICES[0])

    reply = cluster.add(pod)

    assert reply.code == 102, reply.out
    assert "NetworkAttachmentDefinition default/vf-b" in reply.text
    assert "has 1 and each is taken" in reply.text
    cluster.nothing_ran()


@pytest.mark.req("DEV-RESOURCE")
def test_an_unreachable_kubelet_is_try_again_later_and_nothing_attached(
    cluster: Cluster, kubelet: PodResourcesStandIn
) -> None:
    add_device_nad(cluster, "default", "vf-a", "10.81.10.0/24")
    pod = cluster.pod("default", "dev", "vf-a")
    kubelet.stop()

    reply = cluster.add(pod)

    assert reply.code == 11, reply.out
    assert "default/dev" in reply.text
    assert str(kubelet.socket) in reply.text
    cluster.nothing_ran()


@pytest.mark.req("DEV-RESOURCE")
def test_a_resource_the_namespace_is_not_granted_is_refused_by_the_delegate_policy(
    cluster: Cluster, kubelet: PodResourcesStandIn
) -> None:
    cluster.settings["delegatePolicy"]["resourceName"] = ["netattach.test/*", f"!{RESOURCE}"]
    add_device_nad(cluster, "default", "vf-a", "10.81.11.0/24")
    pod = cluster.pod("default", "dev", "vf-a")
    allocate(kubelet, pod, DEVICES[0])

    reply = cluster.add(pod)

    assert reply.code == 7, reply.out
    assert "NetworkAttachmentDefinition default/vf-a" in reply.text
    assert "delegatePolicy.resourceName" in reply.text
    assert RESOURCE in reply.text
    assert kubelet.calls["Get"] == 0  # refused before the kubelet was asked
    cluster.nothing_ran()


@pytest.mark.req("DEV-RESOURCE")
def test_a_nad_naming_a_device_itself_stays_under_the_pci_bus_id_rule(
    cluster: Cluster, kubelet: PodResourcesStandIn
) -> None:
    add_device_nad(cluster, "default", "vf-a", "10.81.12.0/24", pciBusID="0000:00:1f.6")
    pod = cluster.pod("default", "dev", "vf-a")
    allocate(kubelet, pod, DEVICES[0])

    reply = cluster.add(pod)

    assert reply.code == 7, reply.out
    assert "pciBusID" in reply.text
    assert "0000:00:1f.6" in reply.text
    cluster.nothing_ran()


# -- host-device moving the allocated "VF" ------------------------------------------------------

VF_PCI = "0000:99:00.1"

# The reference host-device plugin, run where a PCI address names the test's veth: a private
# mount namespace whose /sys/bus/pci/devices is a tmpfs holding `<pci>/net/<ifname>` and a
# `driver` link (a kernel driver, not vfio-pci), all host-device reads of sysfs to find the
# device's netdev. The plugin itself is untouched.
FAKE_SYSFS = r"""
import os, sys
device = f"/sys/bus/pci/devices/{PCI}"
driver = "/sys/bus/pci/devices/na-drivers/na-vf"
made = f"mkdir -p {device}/net/{IFNAME} {driver} && ln -s {driver} {device}/driver"
script = f"mount -t tmpfs na-pci /sys/bus/pci/devices && {made} && exec {TARGET}"
os.execvp("unshare", ["unshare", "--mount", "--propagation", "private", "sh", "-c", script])
"""


@pytest.mark.req("DEV-RESOURCE")
def test_host_device_moves_the_allocated_vf_into_the_pod_and_back(
    cluster: Cluster, kubelet: PodResourcesStandIn
) -> None:
    from netattach.netns import links
    from tests.netns_fixtures import PLUGIN_DIR, unique

    vf, peer = unique("vf"), unique("vfp")
    links.add_veth_pair(cluster.node.path, vf, peer)
    mac = links.read_interfaces(cluster.node.path)[vf].mac
    wrapper = cluster.bin / "host-device"
    header = f"#!{sys.executable}\nPCI = {VF_PCI!r}\nIFNAME = {vf!r}\n"
    wrapper.write_text(header + f"TARGET = {str(PLUGIN_DIR / 'host-device')!r}\n" + FAKE_SYSFS)
    wrapper.chmod(0o755)
    cluster.settings["binDirs"] = [str(cluster.bin), str(PLUGIN_DIR)]
    # host-device is no default type; no pciBusID is granted: the kubelet's allocation is.
    cluster.settings["delegatePolicy"]["types"].append("host-device")
    config = {
        "cniVersion": "1.0.0",
        "name": "vf-net",
        "type": "host-device",
        "ipam": {"type": "static", "addresses": [{"address": "10.81.20.2/24"}]},
    }
    obj = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": "vf",
            "namespace": "default",
            "annotations": {RESOURCE_ANNOTATION: RESOURCE},
        },
        "spec": {"config": json.dumps(config)},
    }
    cluster._write_manifest("nad-default-vf.yaml", obj)
    pod = cluster.pod("default", "dev", "vf")
    allocate(kubelet, pod, VF_PCI)

    reply = cluster.add(pod)

    assert reply.rc == 0, (reply.out, reply.stderr)
    inside = cluster.interfaces(pod.netns)
    assert inside["net1"].mac == mac
    assert "10.81.20.2/24" in inside["net1"].addresses
    assert vf not in links.read_interfaces(cluster.node.path)

    assert cluster.delete(pod).rc == 0
    assert links.read_interfaces(cluster.node.path)[vf].mac == mac  # back, by its own name
    links.delete_link(cluster.node.path, vf)  # the test's own "VF" (its peer goes with it)
    assert cluster.leftovers() == NOTHING
