"""A device plugin of the kubelet's device plugin API v1beta1, written with grpcio, for tests.

    plugins = node.fs(device_plugin.PLUGIN_DIR)     # the kubelet's <root>/device-plugins
    with FakeDevicePlugin(plugins, "netattach.test/vf", ["0000:00:01.0", "0000:00:01.1"]):
        ...                                         # the Node's allocatable shows 2 of them

What a plugin does (k8s.io/kubelet pkg/apis/deviceplugin/v1beta1, the kubelet's
pkg/kubelet/cm/devicemanager): it serves `v1beta1.DevicePlugin` on a UNIX socket of its own in
the kubelet's directory (`na-dp-<resource's name>.sock`), then calls `v1beta1.Registration`
Register on `kubelet.sock` there with the version, that socket's file name and its resource
name. The kubelet dials back at once (GetDevicePluginOptions, then ListAndWatch), so serving
comes first. ListAndWatch sends the devices (every one Healthy unless `set_devices` says
otherwise), then each change, and stays open until the plugin stops; Allocate answers one
ContainerAllocateResponse per container request, with the environment variable the SR-IOV
device plugin sets (`PCIDEVICE_<RESOURCE>`: the IDs, comma-separated) unless `envs=False`;
GetPreferredAllocation and PreStartContainer answer empty (the kubelet calls them only when the
options ask). With `device_info_dir`, the plugin's half of the NPWG device-info spec: one
`<resource with '/' as '-'>-<ID>-device.json` file per device while it runs (the SR-IOV device
plugin writes its devices' files when it starts and removes them when it stops).

A kubelet that starts removes every socket in its directory; the plugin then serves again and
registers again when told to (`reregister`), as a real plugin watching kubelet.sock would.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from tests import protos
from tests.devices.serving import Served

PROTO = Path(__file__).with_name("deviceplugin.proto")
VERSION = "v1beta1"  # constants.go's Version, the only one the kubelet supports
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
PLUGIN_DIR = "/var/lib/kubelet/device-plugins"  # constants.go's DevicePluginPath, on the node
KUBELET_SOCKET = "kubelet.sock"  # the kubelet's Registration server in that directory
PLUGIN_SERVICE = "v1beta1.DevicePlugin"
REGISTRATION_SERVICE = "v1beta1.Registration"
DEVICE_INFO_VERSION = "1.1.0"  # NPWG device-info spec
REGISTER_TIMEOUT = 30.0
WATCH_POLL = 0.5  # how often an idle ListAndWatch looks whether its caller went away


def messages() -> ModuleType:
    """The compiled messages of `deviceplugin.proto` (built once per process)."""
    return protos.compile_proto(PROTO, "netattach_tests_deviceplugin_pb2")


def device_info_name(resource_name: str, device_id: str) -> str:
    """The NPWG device-info file name a device plugin gives a device of its resource."""
    return f"{resource_name.replace('/', '-')}-{device_id}-device.json"


def env_name(resource_name: str) -> str:
    """The variable the SR-IOV device plugin sets for a resource: PCIDEVICE_INTEL_COM_SRIOV."""
    return "PCIDEVICE_" + resource_name.upper().replace(".", "_").replace("/", "_").replace(
        "-", "_"
    )


class RegistrationError(RuntimeError):
    """The kubelet (or what serves its socket) refused or never answered Register."""


class FakeDevicePlugin(Served):
    """The plugin of the module docstring, for `resource_name`'s devices `device_ids`, in the
    kubelet's device plugin directory `plugin_dir` (a host path: `RealNode.fs(PLUGIN_DIR)`)."""

    def __init__(
        self,
        plugin_dir: Path,
        resource_name: str,
        device_ids: Sequence[str],
        *,
        socket_name: str | None = None,
        device_info_dir: Path | None = None,
        envs: bool = True,
        pre_start_required: bool = False,
        preferred_allocation: bool = False,
        register_timeout: float = REGISTER_TIMEOUT,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.resource_name = resource_name
        self.endpoint = socket_name or f"na-dp-{resource_name.rsplit('/', 1)[-1]}.sock"
        self.device_info_dir = device_info_dir
        self.envs = envs
        self.pre_start_required = pre_start_required
        self.preferred_allocation = preferred_allocation
        self.register_timeout = register_timeout
        self.calls: collections.Counter[str] = collections.Counter()
        self.allocations: list[tuple[str, ...]] = []  # each container request's device IDs
        self._pb = messages()
        self._devices: dict[str, str] = dict.fromkeys(device_ids, HEALTHY)
        self._version = 0  # bumped by each change ListAndWatch must send
        self._changed = threading.Condition()
        self._stopping = False
        self._server: grpc.Server | None = None
        self._written: list[Path] = []  # the device-info files, removed at stop

    @property
    def socket(self) -> Path:
        return self.plugin_dir / self.endpoint

    @property
    def kubelet_socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET

    @property
    def device_ids(self) -> list[str]:
        with self._changed:
            return list(self._devices)

    def device_info_files(self) -> list[Path]:
        """Where the device-info files of the devices are (empty without `device_info_dir`)."""
        if self.device_info_dir is None:
            return []
        return [
            self.device_info_dir / device_info_name(self.resource_name, device_id)
            for device_id in self.device_ids
        ]

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, *, register: bool = True) -> None:
        """Write the device-info files, serve, then (unless `register=False`) register."""
        self._write_device_info()
        self._serve()
        if register:
            self.register()

    def stop(self) -> None:
        """End the ListAndWatch streams (the kubelet marks the devices unhealthy), stop
        serving, remove the socket and the device-info files."""
        self._stop_serving()
        while self._written:
            self._written.pop().unlink(missing_ok=True)

    def reregister(self) -> None:
        """Serve on a fresh socket (a kubelet that starts removes the old one) and register
        again; a kubelet that still holds the old connection refuses until it has seen it end,
        so Register is retried until `register_timeout`."""
        self._stop_serving()
        self._serve()
        self.register()

    def register(self) -> None:
        """Register on the kubelet's socket, retrying while it is not there or refuses."""
        pb = self._pb
        request = pb.RegisterRequest(
            version=VERSION,
            endpoint=self.endpoint,
            resource_name=self.resource_name,
            options=self._options(),
        )
        deadline = time.monotonic() + self.register_timeout
        last = ""
        while True:
            try:
                self._register_once(request)
            except grpc.RpcError as exc:
                last = (
                    f"{exc.code().name}: {exc.details()}"
                    if isinstance(exc, grpc.Call)
                    else str(exc)
                )
            else:
                return
            if time.monotonic() >= deadline:
                raise RegistrationError(
                    f"Register of {self.resource_name} on {self.kubelet_socket}: {last}"
                )
            time.sleep(0.5)

    def _register_once(self, request: Any) -> None:
        with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            stub = protos.unary_stub(channel, f"/{REGISTRATION_SERVICE}/Register", self._pb.Empty)
            # the kubelet dials back before it answers, with 10 s for the dial
            stub(request, timeout=15.0)

    def set_devices(self, healthy: Sequence[str], unhealthy: Sequence[str] = ()) -> None:
        """The plugin's devices from now on; open ListAndWatch streams send them."""
        with self._changed:
            self._devices = {
                **dict.fromkeys(healthy, HEALTHY),
                **dict.fromkeys(unhealthy, UNHEALTHY),
            }
            self._version += 1
            self._changed.notify_all()

    # -- serving ------------------------------------------------------------------------------

    def _serve(self) -> None:
        assert self._server is None, "the plugin is serving"
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        pb = self._pb
        handlers = {
            "GetDevicePluginOptions": protos.unary_handler(self._get_options, pb.Empty),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                self._list_and_watch,
                request_deserializer=pb.Empty.FromString,
                response_serializer=protos.serialize,
            ),
            "GetPreferredAllocation": protos.unary_handler(
                self._get_preferred_allocation, pb.PreferredAllocationRequest
            ),
            "Allocate": protos.unary_handler(self._allocate, pb.AllocateRequest),
            "PreStartContainer": protos.unary_handler(
                self._pre_start_container, pb.PreStartContainerRequest
            ),
        }
        with self._changed:
            self._stopping = False
        # each open ListAndWatch holds a worker for its life
        self._server = protos.serve_unix(self.socket, PLUGIN_SERVICE, handlers)

    def _stop_serving(self) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        if self._server is not None:
            self._server.stop(grace=1.0).wait()
            self._server = None
        self.socket.unlink(missing_ok=True)

    def _options(self) -> Any:
        return self._pb.DevicePluginOptions(
            pre_start_required=self.pre_start_required,
            get_preferred_allocation_available=self.preferred_allocation,
        )

    def _write_device_info(self) -> None:
        if self.device_info_dir is None:
            return
        self.device_info_dir.mkdir(parents=True, exist_ok=True)
        for device_id, path in zip(self.device_ids, self.device_info_files(), strict=True):
            info = {
                "type": "pci",
                "version": DEVICE_INFO_VERSION,
                "pci": {"pci-address": device_id},
            }
            path.write_text(json.dumps(info), encoding="utf-8")
            self._written.append(path)

    def _count(self, method: str) -> None:
        with self._changed:
            self.calls[method] += 1

    def _get_options(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count("GetDevicePluginOptions")
        return self._options()

    def _list_and_watch(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self._count("ListAndWatch")
        pb = self._pb
        sent = -1
        while True:
            with self._changed:
                while self._version == sent and not self._stopping and context.is_active():
                    self._changed.wait(WATCH_POLL)
                if self._stopping or not context.is_active():
                    return
                sent = self._version
                devices = [pb.Device(ID=i, health=h) for i, h in self._devices.items()]
            yield pb.ListAndWatchResponse(devices=devices)

    def _get_preferred_allocation(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count("GetPreferredAllocation")
        return self._pb.PreferredAllocationResponse()

    def _allocate(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count("Allocate")
        pb = self._pb
        responses = []
        for container in request.container_requests:
            ids = tuple(container.devices_ids)
            with self._changed:
                self.allocations.append(ids)
            envs = {env_name(self.resource_name): ",".join(ids)} if self.envs else {}
            responses.append(pb.ContainerAllocateResponse(envs=envs))
        return pb.AllocateResponse(container_responses=responses)

    def _pre_start_container(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count("PreStartContainer")
        return self._pb.PreStartContainerResponse()
