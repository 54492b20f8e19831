"""The device test parts against each other, without root: the PodResources stand-in read by the
tests' reader, and the fake device plugin registering with a small Registration server that
calls it back as the kubelet does (GetDevicePluginOptions, ListAndWatch, Allocate)."""

from __future__ import annotations

import json
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests import protos
from tests.devices import device_plugin
from tests.devices.device_plugin import FakeDevicePlugin
from tests.devices.podresources_client import PodResourcesReader, devices_of, find_pod
from tests.devices.podresources_server import Claim, Container, PodResourcesStandIn

RESOURCE = "netattach.test/vf"
VFS = ["0000:3b:02.0", "0000:3b:02.1", "0000:3b:02.2"]
CLAIM = Claim(
    claim_name="nic",
    claim_namespace="blue",
    driver="nic.netattach.test",
    pool="node-a",
    device="vf-0",
    cdi_devices=("netattach.test/nic=vf-0",),
)
PODS = {
    ("blue", "a"): [
        Container(name="app", devices={RESOURCE: VFS[:2]}, claims=[CLAIM]),
        Container(name="sidecar"),
    ],
    ("green", "b"): [Container(name="app", devices={RESOURCE: VFS[2:]})],
}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory for sockets whose paths fit sockaddr_un (pytest's tmp_path may not)."""
    path = Path(tempfile.mkdtemp(prefix="na-dev-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def stand_in(short_dir: Path) -> Iterator[PodResourcesStandIn]:
    with PodResourcesStandIn(short_dir / "pod-resources" / "kubelet.sock", PODS) as api:
        yield api


@pytest.fixture
def reader(stand_in: PodResourcesStandIn) -> Iterator[PodResourcesReader]:
    with PodResourcesReader(stand_in.socket, timeout=5.0) as made:
        yield made


def _code(call: pytest.ExceptionInfo[grpc.RpcError]) -> tuple[str, str]:
    error = call.value
    assert isinstance(error, grpc.Call)
    return error.code().name, error.details() or ""


# -- the PodResources stand-in ----------------------------------------------------------------


def test_get_answers_the_pods_containers_devices_and_claims(reader: PodResourcesReader) -> None:
    pod = reader.get("blue", "a")
    assert (pod.namespace, pod.name) == ("blue", "a")
    assert [container.name for container in pod.containers] == ["app", "sidecar"]
    app = pod.containers[0]
    # an entry a device, as the kubelet answers them
    assert [(d.resource_name, list(d.device_ids)) for d in app.devices] == [
        (RESOURCE, [VFS[0]]),
        (RESOURCE, [VFS[1]]),
    ]
    (claim,) = app.dynamic_resources
    assert (claim.claim_name, claim.claim_namespace) == ("nic", "blue")
    (resource,) = claim.claim_resources
    assert (resource.driver_name, resource.pool_name, resource.device_name) == (
        "nic.netattach.test",
        "node-a",
        "vf-0",
    )
    assert [cdi.name for cdi in resource.cdi_devices] == ["netattach.test/nic=vf-0"]
    assert not pod.containers[1].devices
    assert devices_of(pod, RESOURCE) == VFS[:2]


def test_list_answers_every_pod(reader: PodResourcesReader) -> None:
    pods = reader.list()
    assert sorted((pod.namespace, pod.name) for pod in pods) == [("blue", "a"), ("green", "b")]
    found = find_pod(pods, "green", "b")
    assert found is not None
    assert devices_of(found, RESOURCE) == VFS[2:]


def test_a_pod_added_or_removed_while_serving_is_answered_so(
    stand_in: PodResourcesStandIn, reader: PodResourcesReader
) -> None:
    stand_in.set_pod("blue", "late", [Container(name="app", devices={RESOURCE: ["vf-9"]})])
    assert devices_of(reader.get("blue", "late"), RESOURCE) == ["vf-9"]
    assert find_pod(reader.list(), "blue", "late") is not None
    stand_in.remove_pod("blue", "late")
    with pytest.raises(grpc.RpcError) as refused:
        reader.get("blue", "late")
    # the kubelet's own answer for a pod it does not have (server_v1.go)
    assert _code(refused) == ("UNKNOWN", "pod late in namespace blue not found")
    assert find_pod(reader.list(), "blue", "late") is None


def test_get_unimplemented_as_an_old_kubelet_answers_and_the_counters_say_what_was_called(
    stand_in: PodResourcesStandIn, reader: PodResourcesReader
) -> None:
    stand_in.fail("Get", grpc.StatusCode.UNIMPLEMENTED)
    with pytest.raises(grpc.RpcError) as refused:
        reader.get("blue", "a")
    assert _code(refused) == (
        "UNIMPLEMENTED",
        "unknown method Get for service v1.PodResourcesLister",
    )
    assert find_pod(reader.list(), "blue", "a") is not None
    assert stand_in.calls == {"Get": 1, "List": 1}


def test_get_failing_with_a_plain_error_then_healed(
    stand_in: PodResourcesStandIn, reader: PodResourcesReader
) -> None:
    stand_in.fail("Get", details="boom")
    with pytest.raises(grpc.RpcError) as refused:
        reader.get("blue", "a")
    assert _code(refused) == ("UNKNOWN", "boom")
    stand_in.heal("Get")
    assert reader.get("blue", "a").name == "a"
    assert stand_in.calls["Get"] == 2


def test_a_slow_stand_in_runs_out_a_callers_deadline_and_still_stops_at_once(
    stand_in: PodResourcesStandIn,
) -> None:
    stand_in.delay = 30.0
    with PodResourcesReader(stand_in.socket, timeout=0.3) as impatient:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as late:
            impatient.list()
    assert _code(late)[0] == "DEADLINE_EXCEEDED"
    assert time.monotonic() - started < 5.0
    started = time.monotonic()
    stand_in.stop()
    assert time.monotonic() - started < 5.0
    assert not stand_in.socket.exists()


def test_fail_names_only_the_two_methods(stand_in: PodResourcesStandIn) -> None:
    with pytest.raises(ValueError, match="GetAllocatableResources"):
        stand_in.fail("GetAllocatableResources")


# -- the device plugin ------------------------------------------------------------------------


class KubeletRegistration:
    """`v1beta1.Registration` on `<dir>/kubelet.sock`, calling each plugin that registers back
    as the kubelet's device manager does: GetDevicePluginOptions, then ListAndWatch, whose
    replies go to `updates`. `refuse` makes Register fail (as a kubelet given a bad request)."""

    def __init__(self, directory: Path) -> None:
        self.socket = directory / device_plugin.KUBELET_SOCKET
        self.requests: list[Any] = []
        self.options: list[Any] = []
        self.updates: queue.Queue[list[tuple[str, str]] | None] = queue.Queue()
        self.refuse = False
        self._pb = device_plugin.messages()
        self._channels: list[grpc.Channel] = []
        self._watches: list[threading.Thread] = []
        handler = protos.unary_handler(self._register, self._pb.RegisterRequest)
        self._server = protos.serve_unix(
            self.socket, device_plugin.REGISTRATION_SERVICE, {"Register": handler}, workers=4
        )

    def plugin(self, endpoint: str) -> PluginClient:
        channel = grpc.insecure_channel(f"unix://{self.socket.parent / endpoint}")
        self._channels.append(channel)
        return PluginClient(channel, self._pb)

    def _register(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        if self.refuse:
            context.abort(grpc.StatusCode.UNKNOWN, "Unsupported version")
        plugin = self.plugin(request.endpoint)
        self.options.append(plugin.options())  # the kubelet's PluginConnected
        watch = threading.Thread(target=self._watch, args=(plugin,), daemon=True)
        watch.start()
        self._watches.append(watch)
        return self._pb.Empty()

    def _watch(self, plugin: PluginClient) -> None:
        try:
            for reply in plugin.list_and_watch():
                self.updates.put([(device.ID, device.health) for device in reply.devices])
        except grpc.RpcError:
            pass
        self.updates.put(None)  # the stream ended

    def close(self) -> None:
        self._server.stop(grace=None).wait()
        for channel in self._channels:
            channel.close()
        for watch in self._watches:
            watch.join(timeout=10.0)


class PluginClient:
    """The kubelet's calls on a plugin's socket."""

    def __init__(self, channel: grpc.Channel, pb: Any) -> None:
        self._channel = channel
        self._pb = pb

    def call(self, method: str, request: Any, reply_type: Any) -> Any:
        stub = protos.unary_stub(self._channel, f"/v1beta1.DevicePlugin/{method}", reply_type)
        return stub(request, timeout=5.0)

    def options(self) -> Any:
        pb = self._pb
        return self.call("GetDevicePluginOptions", pb.Empty(), pb.DevicePluginOptions)

    def list_and_watch(self) -> Iterator[Any]:
        pb = self._pb
        stub: grpc.UnaryStreamMultiCallable[Any, Any] = self._channel.unary_stream(
            "/v1beta1.DevicePlugin/ListAndWatch",
            request_serializer=protos.serialize,
            response_deserializer=pb.ListAndWatchResponse.FromString,
        )
        yield from stub(pb.Empty())

    def allocate(self, *containers: list[str]) -> Any:
        pb = self._pb
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=ids) for ids in containers]
        )
        return self.call("Allocate", request, pb.AllocateResponse)


@pytest.fixture
def kubelet(short_dir: Path) -> Iterator[KubeletRegistration]:
    registration = KubeletRegistration(short_dir)
    try:
        yield registration
    finally:
        registration.close()


def _next(updates: queue.Queue[list[tuple[str, str]] | None]) -> list[tuple[str, str]] | None:
    return updates.get(timeout=10.0)


def test_the_plugin_serves_then_registers_and_lists_its_devices_healthy_until_stopped(
    kubelet: KubeletRegistration, short_dir: Path
) -> None:
    plugin = FakeDevicePlugin(short_dir, RESOURCE, VFS[:2])
    with plugin:
        (request,) = kubelet.requests
        assert (request.version, request.endpoint, request.resource_name) == (
            "v1beta1",
            "na-dp-vf.sock",
            RESOURCE,
        )
        assert plugin.socket == short_dir / "na-dp-vf.sock"
        assert plugin.socket.is_socket()
        (options,) = kubelet.options
        assert not options.pre_start_required
        assert not options.get_preferred_allocation_available
        assert _next(kubelet.updates) == [(VFS[0], "Healthy"), (VFS[1], "Healthy")]
        # the stream stays open: a change is the next reply
        plugin.set_devices([VFS[0]], unhealthy=[VFS[1]])
        assert _next(kubelet.updates) == [(VFS[0], "Healthy"), (VFS[1], "Unhealthy")]
    assert _next(kubelet.updates) is None  # stopping ends the stream
    assert not plugin.socket.exists()
    assert plugin.calls["ListAndWatch"] == 1


def test_allocate_answers_each_container_request_with_its_devices_in_the_env(
    kubelet: KubeletRegistration, short_dir: Path
) -> None:
    with FakeDevicePlugin(short_dir, RESOURCE, VFS) as plugin:
        reply = kubelet.plugin(plugin.endpoint).allocate(VFS[:2], VFS[2:])
        assert [dict(response.envs) for response in reply.container_responses] == [
            {"PCIDEVICE_NETATTACH_TEST_VF": f"{VFS[0]},{VFS[1]}"},
            {"PCIDEVICE_NETATTACH_TEST_VF": VFS[2]},
        ]
        assert plugin.allocations == [tuple(VFS[:2]), (VFS[2],)]
    with FakeDevicePlugin(short_dir, RESOURCE, VFS, envs=False) as quiet:
        reply = kubelet.plugin(quiet.endpoint).allocate([VFS[0]])
        assert [dict(response.envs) for response in reply.container_responses] == [{}]


def test_the_optional_calls_answer_empty_and_the_options_say_so(
    kubelet: KubeletRegistration, short_dir: Path
) -> None:
    with FakeDevicePlugin(
        short_dir, RESOURCE, VFS, pre_start_required=True, preferred_allocation=True
    ) as plugin:
        (options,) = kubelet.options
        assert options.pre_start_required
        assert options.get_preferred_allocation_available
        client = kubelet.plugin(plugin.endpoint)
        pb = device_plugin.messages()
        preferred = client.call(
            "GetPreferredAllocation",
            pb.PreferredAllocationRequest(
                container_requests=[
                    pb.ContainerPreferredAllocationRequest(
                        available_deviceIDs=VFS, allocation_size=1
                    )
                ]
            ),
            pb.PreferredAllocationResponse,
        )
        assert not preferred.container_responses
        started = client.call(
            "PreStartContainer",
            pb.PreStartContainerRequest(devices_ids=VFS[:1]),
            pb.PreStartContainerResponse,
        )
        assert started == pb.PreStartContainerResponse()
        assert plugin.calls["GetPreferredAllocation"] == plugin.calls["PreStartContainer"] == 1


def test_device_info_files_exist_while_the_plugin_runs(
    kubelet: KubeletRegistration, short_dir: Path
) -> None:
    info_dir = short_dir / "devinfo" / "dp"
    with FakeDevicePlugin(short_dir, RESOURCE, VFS[:2], device_info_dir=info_dir):
        assert sorted(path.name for path in info_dir.iterdir()) == [
            f"netattach.test-vf-{VFS[0]}-device.json",
            f"netattach.test-vf-{VFS[1]}-device.json",
        ]
        written = json.loads((info_dir / f"netattach.test-vf-{VFS[1]}-device.json").read_text())
        assert written == {"type": "pci", "version": "1.1.0", "pci": {"pci-address": VFS[1]}}
    assert list(info_dir.iterdir()) == []


def test_reregister_serves_a_fresh_socket_and_registers_again(
    kubelet: KubeletRegistration, short_dir: Path
) -> None:
    with FakeDevicePlugin(short_dir, RESOURCE, VFS[:1]) as plugin:
        assert _next(kubelet.updates) == [(VFS[0], "Healthy")]
        plugin.socket.unlink()  # what a kubelet that starts does to it
        plugin.reregister()
        assert _next(kubelet.updates) is None  # the old stream ended
        assert _next(kubelet.updates) == [(VFS[0], "Healthy")]
        assert [request.endpoint for request in kubelet.requests] == ["na-dp-vf.sock"] * 2
        assert plugin.socket.is_socket()


def test_a_refused_registration_is_an_error_and_leaves_nothing(
    kubelet: KubeletRegistration, short_dir: Path
) -> None:
    kubelet.refuse = True
    plugin = FakeDevicePlugin(short_dir, RESOURCE, VFS, register_timeout=1.0)
    with pytest.raises(device_plugin.RegistrationError, match="Unsupported version"), plugin:
        pass
    assert not plugin.socket.exists()


def test_the_stand_in_describes_a_fake_plugins_allocation_as_the_kubelet_would(
    kubelet: KubeletRegistration, short_dir: Path
) -> None:
    """The two parts together: the devices Allocate gave a container, reported by PodResources."""
    with FakeDevicePlugin(short_dir, RESOURCE, VFS) as plugin:
        kubelet.plugin(plugin.endpoint).allocate(VFS[1:])
        (given,) = plugin.allocations
    pods = {("blue", "p"): [Container(name="app", devices={RESOURCE: given})]}
    with (
        PodResourcesStandIn(short_dir / "pr.sock", pods) as stand_in,
        PodResourcesReader(stand_in.socket) as reader,
    ):
        assert devices_of(reader.get("blue", "p"), RESOURCE) == VFS[1:]
