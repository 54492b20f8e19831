"""A stand-in for the kubelet's PodResources API v1 (`v1.PodResourcesLister`), for tests.

    with PodResourcesStandIn(socket, {("ns", "pod"): [Container(name="c", devices=...)]}) as api:
        api.fail("Get", grpc.StatusCode.UNIMPLEMENTED)   # an old kubelet: List only
        ...                                              # the client under test at api.socket
        assert api.calls["Get"] == 1 and api.calls["List"] == 1

A real gRPC server on a UNIX socket, answering List and Get from a description of the pods that
a test may change while it runs (`set_pod`, `remove_pod`). Its faults are the kubelet's: a method
refused with a status code (UNIMPLEMENTED as a kubelet without `KubeletPodResourcesGet` answers,
or a plain error), every answer late by `delay` seconds; `calls` counts each method's calls.
A pod Get does not know is refused as the kubelet refuses it: UNKNOWN, "pod NAME in namespace
NS not found" (pkg/kubelet/apis/podresources/server_v1.go).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from tests import protos
from tests.devices.serving import Served

PROTO = Path(__file__).with_name("podresources.proto")
SERVICE = "v1.PodResourcesLister"
METHODS = ("List", "Get")
# The kubelet's own socket, relative to its root directory (pkg/kubelet/apis/podresources)
KUBELET_SOCKET = "pod-resources/kubelet.sock"

PodKey = tuple[str, str]  # (namespace, name)


def messages() -> ModuleType:
    """The compiled messages of `podresources.proto` (built once per process)."""
    return protos.compile_proto(PROTO, "netattach_tests_podresources_pb2")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """One device of a container's DRA claim, as PodResources reports it."""

    claim_name: str
    claim_namespace: str
    driver: str
    pool: str
    device: str
    cdi_devices: Sequence[str] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Container:
    """A container of a pod: its device plugin devices by resource name, and its claims."""

    name: str
    devices: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    claims: Sequence[Claim] = ()


def build_pod_resources(pb: Any, key: PodKey, containers: Sequence[Container]) -> Any:
    """The PodResources message of one pod (a claim's devices grouped under its name, in order)."""
    namespace, name = key
    return pb.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            pb.ContainerResources(
                name=container.name,
                # As the kubelet answers them: an entry a device (each would carry its own
                # topology), in the order given, which for the kubelet is a map's order.
                devices=[
                    pb.ContainerDevices(resource_name=resource, device_ids=[device])
                    for resource, ids in container.devices.items()
                    for device in ids
                ],
                dynamic_resources=_dynamic_resources(pb, container.claims),
            )
            for container in containers
        ],
    )


def _dynamic_resources(pb: Any, claims: Sequence[Claim]) -> list[Any]:
    grouped: dict[tuple[str, str], list[Claim]] = {}
    for claim in claims:
        grouped.setdefault((claim.claim_namespace, claim.claim_name), []).append(claim)
    return [
        pb.DynamicResource(
            claim_name=name,
            claim_namespace=namespace,
            claim_resources=[
                pb.ClaimResource(
                    cdi_devices=[pb.CDIDevice(name=cdi) for cdi in claim.cdi_devices],
                    driver_name=claim.driver,
                    pool_name=claim.pool,
                    device_name=claim.device,
                )
                for claim in members
            ],
        )
        for (namespace, name), members in grouped.items()
    ]


@dataclasses.dataclass(frozen=True, slots=True)
class _Fault:
    code: grpc.StatusCode
    details: str


class PodResourcesStandIn(Served):
    """`v1.PodResourcesLister` List and Get on the UNIX socket `socket` (module docstring)."""

    def __init__(
        self,
        socket: Path,
        pods: Mapping[PodKey, Sequence[Container]] | None = None,
        *,
        delay: float = 0.0,
    ) -> None:
        self.socket = socket
        self.delay = delay
        self.calls: collections.Counter[str] = collections.Counter()
        self._pb = messages()
        self._pods: dict[PodKey, tuple[Container, ...]] = {
            key: tuple(containers) for key, containers in (pods or {}).items()
        }
        self._faults: dict[str, _Fault] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: grpc.Server | None = None

    @property
    def address(self) -> str:
        """The socket as a gRPC target."""
        return f"unix://{self.socket}"

    # -- what it answers ----------------------------------------------------------------------

    def set_pod(self, namespace: str, name: str, containers: Sequence[Container]) -> None:
        with self._lock:
            self._pods[(namespace, name)] = tuple(containers)

    def remove_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            self._pods.pop((namespace, name), None)

    def fail(
        self, method: str, code: grpc.StatusCode = grpc.StatusCode.UNKNOWN, details: str = ""
    ) -> None:
        """Refuse every call of `method` with `code` from now on (UNIMPLEMENTED: an old kubelet,
        with the message grpc-go gives for a method its server does not have)."""
        if method not in METHODS:
            raise ValueError(f"{method!r} is not one of {METHODS}")
        if not details:
            details = (
                f"unknown method {method} for service {SERVICE}"
                if code is grpc.StatusCode.UNIMPLEMENTED
                else f"stand-in: {method} failed"
            )
        with self._lock:
            self._faults[method] = _Fault(code, details)

    def heal(self, method: str) -> None:
        """Answer `method` again."""
        with self._lock:
            self._faults.pop(method, None)

    # -- the server ---------------------------------------------------------------------------

    def start(self) -> None:
        assert self._server is None, "the stand-in is serving"
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        pb = self._pb
        handlers = {
            "List": protos.unary_handler(self._list, pb.ListPodResourcesRequest),
            "Get": protos.unary_handler(self._get, pb.GetPodResourcesRequest),
        }
        self._stopping.clear()
        self._server = protos.serve_unix(self.socket, SERVICE, handlers)

    def stop(self) -> None:
        """Stop serving (calls in flight are cancelled) and remove the socket."""
        self._stopping.set()  # a delayed call stops waiting
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        self.socket.unlink(missing_ok=True)

    def _enter_call(self, method: str, context: grpc.ServicerContext) -> None:
        """Count the call, wait out the delay, raise its fault if it has one."""
        with self._lock:
            self.calls[method] += 1
            fault = self._faults.get(method)
        if self.delay > 0:
            self._stopping.wait(self.delay)
        if fault is not None:
            context.abort(fault.code, fault.details)

    def _list(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._enter_call("List", context)
        pb = self._pb
        with self._lock:
            pods = list(self._pods.items())
        return pb.ListPodResourcesResponse(
            pod_resources=[build_pod_resources(pb, key, containers) for key, containers in pods]
        )

    def _get(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._enter_call("Get", context)
        pb = self._pb
        key = (request.pod_namespace, request.pod_name)
        with self._lock:
            containers = self._pods.get(key)
        if containers is None:
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        return pb.GetPodResourcesResponse(pod_resources=build_pod_resources(pb, key, containers))


@contextlib.contextmanager
def serving(
    pods: Mapping[PodKey, Sequence[Container]] | None = None,
) -> Iterator[PodResourcesStandIn]:
    """A stand-in serving on a socket of a directory of its own under /tmp (pytest's tmp_path
    may be too long for sockaddr_un), removed with everything in it at exit."""
    directory = Path(tempfile.mkdtemp(prefix="na-pr-"))
    try:
        with PodResourcesStandIn(directory / "kubelet.sock", pods) as api:
            yield api
    finally:
        shutil.rmtree(directory, ignore_errors=True)
