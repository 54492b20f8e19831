"""Devices handed to attachments (DEV-RESOURCE, DEV-INFO): the pure parts. The whole path, with
real plugins and a real gRPC PodResources server, is tests/e2e/test_devices.py; through the real
kubelet, tests/node/test_device_plugin.py."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netattach.attach import delegate, status
from netattach.cni import conf, errors
from netattach.guard import delegate_policy, globs
from netattach.pods import delegate_guard, devices, records
from netattach.pods import plan as plan_mod
from netattach.settings import network as network_settings
from netattach.settings import settings as settings_mod
from tests import builders
from tests.devices import podresources_server
from tests.devices.podresources_server import Claim, Container, PodResourcesStandIn

LIST = {
    "cniVersion": "1.0.0",
    "name": "sriov-net",
    "plugins": [
        {"type": "sriov", "ipam": {"type": "static"}, "capabilities": {"deviceID": True}},
        {"type": "tuning", "capabilities": {"CNIDeviceInfoFile": True}, "pciBusID": "stale"},
    ],
}


def network() -> conf.NetworkConfigList:
    return conf.parse_config_list(copy.deepcopy(LIST), source="test")


@pytest.mark.req("DEV-RESOURCE")
def test_with_device_sets_device_id_and_pci_bus_id_in_every_plugin_as_multus_does() -> None:
    given = network()
    before = copy.deepcopy(given.raw)

    ran, args = delegate.with_device(
        given, {"ips": ["10.0.0.2/24"]}, device="0000:03:00.2", device_info_file="/d/x.json"
    )

    for plugin, raw in zip(ran.plugins, ran.raw["plugins"], strict=True):
        assert plugin.raw is raw
        assert (raw["deviceID"], raw["pciBusID"]) == ("0000:03:00.2", "0000:03:00.2")
    # The declared capabilities carry them at run time too; the others pass untouched.
    assert args == {
        "ips": ["10.0.0.2/24"],
        "deviceID": "0000:03:00.2",
        "CNIDeviceInfoFile": "/d/x.json",
    }
    assert given.raw == before  # never mutated


@pytest.mark.req("DEV-RESOURCE")
def test_with_device_hands_no_capability_no_plugin_declares() -> None:
    plain = conf.parse_config_list(
        {"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "host-device"}]}, source="t"
    )

    ran, args = delegate.with_device(plain, {}, device="0000:03:00.4", device_info_file="/d/x")

    assert args == {}
    assert ran.raw["plugins"] == [
        {"type": "host-device", "deviceID": "0000:03:00.4", "pciBusID": "0000:03:00.4"}
    ]


@pytest.mark.req("DEV-INFO")
@pytest.mark.parametrize(
    ("resource", "device", "name"),
    [
        ("intel.com/sriov", "0000:03:00.1", "intel.com-sriov-0000:03:00.1-device.json"),
        ("../../etc", "x", "..-..-etc-x-device.json"),
        ("a", "../../../passwd", "a-..-..-..-passwd-device.json"),
    ],
)
def test_a_device_info_path_never_leaves_its_directory(
    resource: str, device: str, name: str
) -> None:
    base = Path("/run/devinfo")

    path = status.dp_device_info_path(base, resource, device)

    assert path == base / "dp" / name
    assert path.parent == base / "dp"


def test_the_resource_name_list_is_a_delegate_policy_list() -> None:
    problems: list[str] = []
    policy = delegate_policy.parse_policy(
        {
            "resourceName": ["intel.com/*"],
            "namespaces": [
                {"namespaceSelector": {"matchLabels": {"t": "1"}}, "resourceName": ["!*"]}
            ],
        },
        "delegatePolicy",
        problems,
    )
    assert problems == []
    assert policy is not None
    assert policy.rules.resource_name.allows("intel.com/sriov_netdevice")
    assert not policy.rules.resource_name.allows("nvidia.com/gpu")
    assert not policy.namespaces[0].rules.resource_name.allows("intel.com/sriov_netdevice")
    assert delegate_policy.DelegateRules().resource_name.allows("any.io/thing")

    delegate_policy.parse_policy({"resourceName": "intel.com/*"}, "delegatePolicy", problems)
    assert problems == [
        "delegatePolicy.resourceName: must be a list of names or globs ('*' any run, '?' one "
        "character, '!' in front excludes), got 'intel.com/*'"
    ]


def test_the_settings_name_the_kubelets_socket_and_the_device_info_directory() -> None:
    base = {"clusterNetwork": "cluster", "feed": {"directory": "/tmp/m"}}
    default = settings_mod.parse_settings(base, source="t").networks

    assert default.pod_resources_socket == Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    assert default.device_info_dir == Path("/var/run/k8s.cni.cncf.io/devinfo")
    # netattach writes the device-info files it hands to delegates: no dataDir may be there.
    assert default.delegate_policy.protected.holds("/var/run/k8s.cni.cncf.io/devinfo/cni")

    moved = settings_mod.parse_settings(
        {**base, "podResourcesSocket": "/k/pr.sock", "deviceInfoDir": "/d"}, source="t"
    ).networks
    assert (moved.pod_resources_socket, moved.device_info_dir) == (Path("/k/pr.sock"), Path("/d"))

    with pytest.raises(errors.InvalidNetworkConfigError) as caught:
        settings_mod.parse_settings({**base, "podResourcesSocket": "kubelet.sock"}, source="t")
    assert "podResourcesSocket" in caught.value.details


# -- assign: the plan's devices from a real PodResources server ---------------------------------


@pytest.fixture
def kubelet() -> Iterator[PodResourcesStandIn]:
    with podresources_server.serving() as api:
        yield api


def planned(name: str, ifname: str, resource: str = "") -> plan_mod.PlannedAttachment:
    return plan_mod.PlannedAttachment(
        status_name=f"ns/{name}",
        ifname=ifname,
        is_default=False,
        network=network()._replace(name=name),
        capability_args={},
        resource=resource,
    )


def pod(**status: Any) -> dict[str, Any]:
    return dict(builders.pod(name="pod", namespace="ns", status=status or None))


def assign(
    kubelet: PodResourcesStandIn,
    plan: list[plan_mod.PlannedAttachment],
    the_pod: dict[str, Any],
    held: tuple[str, ...] = (),
) -> list[plan_mod.PlannedAttachment]:
    cfg = network_settings.NetworkSettings(
        cluster_network=network_settings.ClusterNetworkRef(kind="name", name="cluster"),
        pod_resources_socket=kubelet.socket,
        device_info_dir=Path("/run/na-devinfo"),
    )
    return asyncio.run(
        devices.assign(plan, pod=the_pod, container_id="c1", cfg=cfg, held=held)  # type: ignore[arg-type]
    )


@pytest.mark.req("DEV-RESOURCE")
def test_a_plan_without_resources_never_asks_the_kubelet(kubelet: PodResourcesStandIn) -> None:
    plan = [planned("a", "net1")]

    assert assign(kubelet, plan, pod()) == plan
    assert sum(kubelet.calls.values()) == 0


@pytest.mark.req("DEV-RESOURCE")
def test_a_pods_claim_name_reaches_the_resource_claim_it_became(
    kubelet: PodResourcesStandIn,
) -> None:
    made = Claim(
        claim_name="pod-net-x7k2",
        claim_namespace="ns",
        driver="d",
        pool="p",
        device="vf-3",
        cdi_devices=["vendor.io/vf=vf-3"],
    )
    kubelet.set_pod("ns", "pod", [Container(name="app", claims=[made])])
    the_pod = pod(resourceClaimStatuses=[{"name": "net", "resourceClaimName": "pod-net-x7k2"}])

    (given,) = assign(kubelet, [planned("a", "net1", resource="net")], the_pod)

    assert given.device == "vf-3"
    assert given.capability_args == {
        "deviceID": "vf-3",
        "CNIDeviceInfoFile": "/run/na-devinfo/cni/a-c1-net1-device.json",
    }


@pytest.mark.req("DEV-RESOURCE")
def test_devices_already_held_are_not_given_again(kubelet: PodResourcesStandIn) -> None:
    kubelet.set_pod("ns", "pod", [Container(name="app", devices={"a.io/vf": ["v0", "v1", "v2"]})])
    plan = [planned("a", "net1", "a.io/vf"), planned("b", "net2"), planned("c", "net3", "a.io/vf")]

    given = assign(kubelet, plan, pod(), held=("v0",))

    assert [p.device for p in given] == ["v1", "", "v2"]
    assert given[1] == plan[1]


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.req("SEC-DELEGATE")
def test_a_resource_the_namespace_is_not_granted_is_a_delegate_policy_refusal() -> None:
    policy = delegate_policy.DelegatePolicy(
        rules=delegate_policy.DelegateRules(resource_name=globs.Patterns(("x/*",)))
    )

    bridge = conf.parse_config_list(
        {"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "bridge"}]}, source="t"
    )

    def nad(name: str, ifname: str, resource: str = "") -> plan_mod.PlannedAttachment:
        return planned(name, ifname, resource)._replace(network=bridge)

    with pytest.raises(delegate_guard.DelegateRefusedError) as caught:
        delegate_guard.check_plan([nad("a", "net1", "a.io/vf")], policy, object())
    delegate_guard.check_plan([nad("b", "net1", "x/vf"), nad("c", "net2")], policy, object())

    assert caught.value.msg == (
        "NetworkAttachmentDefinition ns/a refused by the delegate policy: resourceName 'a.io/vf' "
        "is not allowed by delegatePolicy.resourceName [x/*]"
    )


def pci_info(path: Path, address: str) -> dict[str, Any]:
    """A PCI device's info file written at `path` (its directory made), as the file says."""
    info = {"type": "pci", "version": "1.1.0", "pci": {"pci-address": address}}
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(info))
    return info


@pytest.mark.req("DEV-INFO")
def test_device_info_prefers_the_delegates_file_then_the_device_plugins(tmp_path: Path) -> None:
    att = records.AttachmentRecord(
        status_name="ns/a",
        ifname="net1",
        is_default=False,
        config={"name": "sriov-net"},
        capability_args={},
        resource="a.io/vf",
        device="0000:03:00.1",
    )
    dp = status.dp_device_info_path(tmp_path, "a.io/vf", "0000:03:00.1")
    from_device_plugin = pci_info(dp, "x")
    assert status.recorded_device_info(att, "c1", tmp_path) == from_device_plugin

    cni = status.cni_device_info_path(tmp_path, "sriov-net", "c1", "net1")
    from_delegate = pci_info(cni, "y")
    assert status.recorded_device_info(att, "c1", tmp_path) == from_delegate

    devices.discard_device_info(att, "c1", tmp_path)
    assert not cni.exists()
    assert dp.exists()  # the device plugin's file is the plugin's


@pytest.mark.req("DEV-RESOURCE")
def test_a_pod_the_kubelet_does_not_list_yet_is_try_again_later(
    kubelet: PodResourcesStandIn,
) -> None:
    with pytest.raises(errors.TryAgainLaterError) as caught:
        assign(kubelet, [planned("a", "net1", "a.io/vf")], pod())

    assert caught.value.code == 11
    assert "does not list pod ns/pod" in caught.value.msg


@pytest.mark.req("DEV-RESOURCE")
def test_netattach_status_lists_a_nad_whose_resource_the_policy_refuses(tmp_path: Path) -> None:
    from netattach.cluster import store

    def nad(name: str, resource: str) -> dict[str, Any]:
        config = {"cniVersion": "1.0.0", "name": name, "type": "bridge"}
        return {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "annotations": {"k8s.v1.cni.cncf.io/resourceName": resource},
            },
            "spec": {"config": json.dumps(config)},
        }

    view = store.ClusterStore()
    view.replace_all([nad("granted", " x/vf "), nad("other", "a.io/vf")])  # type: ignore[list-item]
    policy = delegate_policy.DelegatePolicy(
        rules=delegate_policy.DelegateRules(resource_name=globs.Patterns(("x/*",)))
    )

    assert delegate_guard.refused_nads(view, policy, tmp_path) == [
        "NetworkAttachmentDefinition ns/other: refused by the delegate policy: resourceName "
        "'a.io/vf' is not allowed by delegatePolicy.resourceName [x/*]"
    ]
