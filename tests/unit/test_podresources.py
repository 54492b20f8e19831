"""The kubelet's PodResources client (cluster/podresources.py) against a real gRPC server: the
test tree's stand-in, whose messages protoc compiles from tests/devices/podresources.proto. The
client describes its messages itself; every exchange here checks the two descriptions agree."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from netattach.cluster import podresources
from netattach.cni import errors
from tests.devices import podresources_server
from tests.devices.podresources_server import Claim, Container, PodResourcesStandIn


@pytest.fixture
def kubelet() -> Iterator[PodResourcesStandIn]:
    with podresources_server.serving() as api:
        yield api


def claim(name: str, device: str, *cdi: str) -> Claim:
    return Claim(
        claim_name=name,
        claim_namespace="ns",
        driver="vf.netattach.test",
        pool="pool-1",
        device=device,
        cdi_devices=list(cdi),
    )


@pytest.mark.req("DEV-RESOURCE")
def test_get_gives_every_containers_devices_by_resource_and_claim_in_a_stable_order(
    kubelet: PodResourcesStandIn,
) -> None:
    kubelet.set_pod(
        "ns",
        "pod",
        [
            Container(name="app", devices={"a.io/vf": ["vf1", "vf0"], "b.io/gpu": ["g0"]}),
            Container(
                name="side",
                devices={"a.io/vf": ["vf3"]},
                claims=[claim("net", "d0", "vendor.io/net=dev-0"), claim("net", "d1")],
            ),
        ],
    )
    kubelet.set_pod("ns", "other", [Container(name="app", devices={"a.io/vf": ["vf9"]})])

    found = podresources.read_pod_devices(kubelet.socket, "ns", "pod")

    assert found.method == "Get"
    assert dict(found.by_name) == {
        # A container's device-plugin devices sorted: the kubelet's own order changes.
        "a.io/vf": ("vf0", "vf1", "vf3"),
        "b.io/gpu": ("g0",),
        # The CDI name's device part; a device without a CDI name gives its device name.
        "net": ("dev-0", "d1"),
    }
    assert (kubelet.calls["Get"], kubelet.calls["List"]) == (1, 0)


@pytest.mark.req("DEV-RESOURCE")
def test_a_claim_two_containers_share_is_one_device(kubelet: PodResourcesStandIn) -> None:
    shared = claim("net", "d0", "vendor.io/net=dev-0")
    kubelet.set_pod(
        "ns", "pod", [Container(name="a", claims=[shared]), Container(name="b", claims=[shared])]
    )

    assert podresources.read_pod_devices(kubelet.socket, "ns", "pod").get("net") == ("dev-0",)


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.parametrize(
    "code", [grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL]
)
def test_a_get_the_kubelet_refuses_is_asked_again_with_list(
    kubelet: PodResourcesStandIn, code: grpc.StatusCode
) -> None:
    kubelet.set_pod("ns", "pod", [Container(name="app", devices={"a.io/vf": ["vf0"]})])
    kubelet.set_pod("ns", "pod-2", [Container(name="app", devices={"a.io/vf": ["vf1"]})])
    kubelet.fail("Get", code)

    found = podresources.read_pod_devices(kubelet.socket, "ns", "pod")

    assert found.method == "List"
    assert dict(found.by_name) == {"a.io/vf": ("vf0",)}
    assert (kubelet.calls["Get"], kubelet.calls["List"]) == (1, 1)


@pytest.mark.req("DEV-RESOURCE")
def test_a_pod_the_kubelet_does_not_know_is_said_to_be_unknown(
    kubelet: PodResourcesStandIn,
) -> None:
    # Get answers "pod ... not found" (UNKNOWN) as the kubelet does, and List does not list it:
    # a kubelet that has just restarted answers so until it has loaded its pods.
    kubelet.set_pod("ns", "bare", [Container(name="app")])

    found = podresources.read_pod_devices(kubelet.socket, "ns", "gone")
    bare = podresources.read_pod_devices(kubelet.socket, "ns", "bare")

    assert (dict(found.by_name), found.method, found.known) == ({}, "List", False)
    assert (dict(bare.by_name), bare.method, bare.known) == ({}, "Get", True)


@pytest.mark.req("DEV-RESOURCE")
def test_a_missing_socket_is_try_again_later_naming_it(tmp_path: Path) -> None:
    socket = tmp_path / "kubelet.sock"

    with pytest.raises(podresources.PodResourcesUnavailableError) as caught:
        podresources.read_pod_devices(socket, "ns", "pod", timeout=2.0)

    assert caught.value.code == errors.TryAgainLaterError.code == 11
    assert str(socket) in caught.value.msg
    assert "UNAVAILABLE" in caught.value.details


@pytest.mark.req("DEV-RESOURCE")
def test_a_kubelet_that_does_not_answer_in_time_is_try_again_later(
    kubelet: PodResourcesStandIn,
) -> None:
    kubelet.delay = 2.0

    with pytest.raises(podresources.PodResourcesUnavailableError) as caught:
        podresources.read_pod_devices(kubelet.socket, "ns", "pod", timeout=0.3)

    assert "DEADLINE_EXCEEDED" in caught.value.details


@pytest.mark.req("DEV-RESOURCE")
def test_list_refused_too_is_an_io_failure_naming_the_method(kubelet: PodResourcesStandIn) -> None:
    kubelet.fail("Get", grpc.StatusCode.UNIMPLEMENTED)
    kubelet.fail("List", grpc.StatusCode.PERMISSION_DENIED, "no")

    with pytest.raises(errors.IOFailureError) as caught:
        podresources.read_pod_devices(kubelet.socket, "ns", "pod")

    assert "refused List" in caught.value.msg
    assert caught.value.details == "PERMISSION_DENIED: no"


@pytest.mark.req("DEV-RESOURCE")
def test_a_containers_devices_answered_one_entry_each_in_any_order_are_sorted(
    kubelet: PodResourcesStandIn,
) -> None:
    # The stand-in answers as the kubelet does: a ContainerDevices entry a device, here in the
    # order given (the kubelet's is a map's), so every ADD of the pod must sort them itself.
    kubelet.set_pod("ns", "pod", [Container(name="app", devices={"a.io/vf": ["vf2", "vf1"]})])
    second = Container(name="app", devices={"a.io/vf": ["vf1", "vf2"]})

    first = podresources.read_pod_devices(kubelet.socket, "ns", "pod").get("a.io/vf")
    kubelet.set_pod("ns", "pod", [second])
    again = podresources.read_pod_devices(kubelet.socket, "ns", "pod").get("a.io/vf")

    assert first == again == ("vf1", "vf2")
