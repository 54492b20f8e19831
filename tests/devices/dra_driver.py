"""A DRA driver's kubelet plugin (k8s.io/kubelet pkg/apis/dra/v1), written with grpcio, for tests.

    driver = FakeDraDriver(node.fs, fetch_claim, devices=["vf-0", "vf-1"])
    with driver:                        # registered with the node's kubelet
        node.api.http.post(..., driver.resource_slice(node.name))
        ...                             # a pod's allocated claim prepared, its CDI names given

What a driver's node half does (the kubelet's pkg/kubelet/cm/dra/plugin, pluginmanager):

- it serves `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin` on `<kubelet root>/plugins/<driver>/
  dra.sock`, then `pluginregistration.Registration` on `<kubelet root>/plugins_registry/
  <driver>-reg.sock`. The kubelet's plugin watcher sees the second socket appear, calls GetInfo
  (type "DRAPlugin", the driver's name, the first socket's path as the kubelet reaches it, and
  the gRPC services served: "v1.DRAPlugin", drapbv1.DRAPluginService), then dials the endpoint and
  says how it went with NotifyRegistrationStatus. The socket removed, the kubelet deregisters
  the driver (and wipes its ResourceSlices of the node some time later).
- NodePrepareResources is called with the claims' namespace, name and UID only: the driver reads
  each claim from the API (`fetch_claim`, as the kubeletplugin helper does) and answers, per
  claim UID, its devices of the claim's allocation (`status.allocation.devices.results` of this
  driver), each with the CDI device ID `<cdi_kind>=<device>`. The kubelet hands those CDI names to
  the runtime (CRI ContainerConfig.CDIDevices) and reports them in PodResources
  (ClaimResource.cdi_devices). NodeUnprepareResources answers every claim with no error.
- Its CDI spec (`<cdi_dir>/na-<driver>.json` of the node, /var/run/cdi by default: where a
  runtime with CDI looks) names each device with one harmless edit, an environment variable
  (CDI refuses a device without edits). It is written at start and removed at stop.

The API objects a driver's controller publishes are built here (`resource_slice`, and the
`device_class` a cluster admin makes) and written by the test; kube-scheduler allocates claims
from them.
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from tests import protos
from tests.devices.serving import Served

DRA_PROTO = Path(__file__).with_name("draplugin.proto")
REGISTRATION_PROTO = Path(__file__).with_name("pluginregistration.proto")
DRIVER = "vf.netattach.test"
CDI_KIND = "netattach.test/vf"
CDI_VERSION = "0.6.0"
KUBELET_ROOT = "/var/lib/kubelet"
CDI_DIR = "/var/run/cdi"
DRA_SERVICE = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
REGISTRATION_SERVICE = "pluginregistration.Registration"
PLUGIN_TYPE = "DRAPlugin"  # pluginregistration/v1 constants.go
SUPPORTED_SERVICES = ("v1.DRAPlugin",)  # dra/v1 types.go's DRAPluginService
RESOURCE_API = "resource.k8s.io/v1"
REGISTER_TIMEOUT = 60.0

# An API object as the API server's JSON gives it
Obj = dict[str, Any]
ClaimFetcher = Callable[[str, str], Mapping[str, Any] | None]


def dra_messages() -> ModuleType:
    """The compiled messages of `draplugin.proto` (built once per process)."""
    return protos.compile_proto(DRA_PROTO, "netattach_tests_draplugin_pb2")


def registration_messages() -> ModuleType:
    """The compiled messages of `pluginregistration.proto` (built once per process)."""
    return protos.compile_proto(REGISTRATION_PROTO, "netattach_tests_pluginregistration_pb2")


class RegistrationError(RuntimeError):
    """The kubelet refused the driver, or never registered it."""


class FakeDraDriver(Served):
    """The driver of the module docstring: `devices` in pool `pool` (the node's name by
    default, as a node-local driver names it), on the node whose paths `node_fs` maps to host
    paths (`RealNode.fs`); `fetch_claim(namespace, name)` reads a ResourceClaim (None: gone)."""

    def __init__(
        self,
        node_fs: Callable[[str], Path],
        fetch_claim: ClaimFetcher,
        *,
        driver_name: str = DRIVER,
        devices: Sequence[str],
        pool: str = "",
        cdi_kind: str = CDI_KIND,
        kubelet_root: str = KUBELET_ROOT,
        cdi_dir: str = CDI_DIR,
    ) -> None:
        self.node_fs = node_fs
        self.fetch_claim = fetch_claim
        self.driver_name = driver_name
        self.devices = list(devices)
        self.pool = pool
        self.cdi_kind = cdi_kind
        # node paths: what the kubelet and the runtime see
        self.endpoint = f"{kubelet_root}/plugins/{driver_name}/dra.sock"
        self.registration_socket = f"{kubelet_root}/plugins_registry/{driver_name}-reg.sock"
        self.cdi_spec = f"{cdi_dir}/na-{driver_name}.json"
        self.calls: collections.Counter[str] = collections.Counter()
        self.prepared: dict[str, list[str]] = {}  # claim UID -> its devices, while prepared
        self.unprepared: list[str] = []  # claim UIDs, in the order the kubelet unprepared them
        self.registration: tuple[bool, str] | None = None  # NotifyRegistrationStatus's word
        self._dra = dra_messages()
        self._reg = registration_messages()
        self._lock = threading.Condition()
        self._servers: list[grpc.Server] = []

    def cdi_name(self, device: str) -> str:
        """The fully qualified CDI name of `device`: `netattach.test/vf=vf-0`."""
        return f"{self.cdi_kind}={device}"

    # -- the API objects of the driver --------------------------------------------------------

    def resource_slice(self, node_name: str, name: str | None = None) -> Obj:
        """The ResourceSlice of the driver's devices on `node_name` (one slice, one pool)."""
        return {
            "apiVersion": RESOURCE_API,
            "kind": "ResourceSlice",
            "metadata": {"name": name or f"na-{node_name}-{self.driver_name}"},
            "spec": {
                "driver": self.driver_name,
                "nodeName": node_name,
                "pool": {"name": self.pool or node_name, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": device} for device in self.devices],
            },
        }

    def device_class(self, name: str) -> Obj:
        """A DeviceClass selecting every device of the driver (a CEL selector)."""
        expression = f"device.driver == {json.dumps(self.driver_name)}"
        return {
            "apiVersion": RESOURCE_API,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Write the CDI spec, serve the DRA service, then the registration socket the kubelet
        watches for (its GetInfo is the kubelet's first call, its endpoint must answer then)."""
        self._write_cdi_spec()
        pb, reg = self._dra, self._reg
        self._serve(
            self.endpoint,
            DRA_SERVICE,
            {
                "NodePrepareResources": protos.unary_handler(
                    self._prepare, pb.NodePrepareResourcesRequest
                ),
                "NodeUnprepareResources": protos.unary_handler(
                    self._unprepare, pb.NodeUnprepareResourcesRequest
                ),
            },
        )
        self._serve(
            self.registration_socket,
            REGISTRATION_SERVICE,
            {
                "GetInfo": protos.unary_handler(self._get_info, reg.InfoRequest),
                "NotifyRegistrationStatus": protos.unary_handler(
                    self._notify, reg.RegistrationStatus
                ),
            },
        )

    def wait_registered(self, timeout: float = REGISTER_TIMEOUT) -> None:
        """Until the kubelet says it registered the driver; RegistrationError if it refused or
        said nothing within `timeout`."""
        with self._lock:
            self._lock.wait_for(lambda: self.registration is not None, timeout)
            word = self.registration
        if word is None:
            raise RegistrationError(
                f"the kubelet did not register {self.driver_name} within {timeout:g}s "
                f"(GetInfo calls: {self.calls['GetInfo']})"
            )
        if not word[0]:
            raise RegistrationError(f"the kubelet refused {self.driver_name}: {word[1]}")

    def stop(self) -> None:
        """Stop serving (the registration socket first: the kubelet deregisters the driver),
        remove both sockets and the CDI spec."""
        while self._servers:
            self._servers.pop().stop(grace=1.0).wait()
        for path in (self.registration_socket, self.endpoint, self.cdi_spec):
            self.node_fs(path).unlink(missing_ok=True)

    def wait_ready(self) -> None:
        """In a `with` block: kubelet has registered the driver."""
        self.wait_registered()

    def _serve(
        self, node_path: str, service: str, handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        socket = self.node_fs(node_path)
        socket.parent.mkdir(parents=True, exist_ok=True)
        socket.unlink(missing_ok=True)
        self._servers.append(protos.serve_unix(socket, service, handlers, workers=4))

    def _write_cdi_spec(self) -> None:
        spec = {
            "cdiVersion": CDI_VERSION,
            "kind": self.cdi_kind,
            "devices": [
                {
                    "name": device,
                    "containerEdits": {"env": [f"NETATTACH_TEST_DRA_DEVICE={device}"]},
                }
                for device in self.devices
            ],
        }
        path = self.node_fs(self.cdi_spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(spec, indent=1), encoding="utf-8")

    # -- the services -------------------------------------------------------------------------

    def _count(self, method: str) -> None:
        with self._lock:
            self.calls[method] += 1

    def _get_info(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count("GetInfo")
        return self._reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver_name,
            endpoint=self.endpoint,
            supported_versions=list(SUPPORTED_SERVICES),
        )

    def _notify(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count("NotifyRegistrationStatus")
        with self._lock:
            self.registration = (bool(request.plugin_registered), str(request.error))
            self._lock.notify_all()
        return self._reg.RegistrationStatusResponse()

    def _prepare(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count("NodePrepareResources")
        pb = self._dra
        answers = {}
        for claim in request.claims:
            try:
                devices = self._claim_devices(claim)
            except LookupError as exc:
                answers[claim.uid] = pb.NodePrepareResourceResponse(error=str(exc))
                continue
            with self._lock:
                self.prepared[claim.uid] = [device for _, _, device in devices]
            answers[claim.uid] = pb.NodePrepareResourceResponse(
                devices=[
                    pb.Device(
                        request_names=[request_name],
                        pool_name=pool,
                        device_name=device,
                        cdi_device_ids=[self.cdi_name(device)],
                    )
                    for request_name, pool, device in devices
                ]
            )
        return pb.NodePrepareResourcesResponse(claims=answers)

    def _claim_devices(self, claim: Any) -> list[tuple[str, str, str]]:
        """(request, pool, device) of each of this driver's results in the claim's allocation;
        LookupError naming what is wrong (the kubelet reports it and tries again)."""
        found = self.fetch_claim(claim.namespace, claim.name)
        where = f"ResourceClaim {claim.namespace}/{claim.name}"
        if found is None or found["metadata"]["uid"] != claim.uid:
            raise LookupError(f"{where} ({claim.uid}) not found")
        allocation = (found.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        devices = [
            (result["request"], result["pool"], result["device"])
            for result in results
            if result.get("driver") == self.driver_name
        ]
        unknown = [device for _, _, device in devices if device not in self.devices]
        if not devices or unknown:
            raise LookupError(f"{where} has no device of {self.driver_name} allocated: {results}")
        return devices

    def _unprepare(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count("NodeUnprepareResources")
        pb = self._dra
        with self._lock:
            for claim in request.claims:
                self.prepared.pop(claim.uid, None)
                self.unprepared.append(claim.uid)
        return pb.NodeUnprepareResourcesResponse(
            claims={claim.uid: pb.NodeUnprepareResourceResponse() for claim in request.claims}
        )
