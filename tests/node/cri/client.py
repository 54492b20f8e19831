"""The runtime's CRI v1 service as a kubelet calls it, for tests/node.

The messages come from the project's own `api.proto` (the subset of k8s.io/cri-api v1 the tier
uses), built by tests/protos.py the first time they are needed; the calls go through plain
`grpc` unary-unary stubs over containerd's UNIX socket. Callers see typed values only:
`SandboxSpec` in; `SandboxStatus`, `Sandbox`, runtime conditions and `CriError` (the gRPC status
code's name and its details) out. No protobuf type leaks.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from tests import protos

PROTO = Path(__file__).with_name("api.proto")
SERVICE = "/runtime.v1.RuntimeService/"
CALL_TIMEOUT = 180.0  # a RunPodSandbox waits for every CNI ADD of the sandbox


def messages() -> ModuleType:
    """The compiled messages of `api.proto` (compiled and built once per process)."""
    return protos.compile_proto(PROTO, "netattach_tests_cri_api_pb2")


class CriError(Exception):
    """A CRI call the runtime refused: the gRPC status code's name and its message."""

    def __init__(self, call: str, code: str, details: str) -> None:
        super().__init__(f"{call}: {code}: {details}")
        self.call = call
        self.code = code
        self.details = details


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SandboxSpec:
    """What a kubelet puts in PodSandboxConfig for a pod, as far as networking cares."""

    name: str
    namespace: str
    uid: str
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    host_network: bool = False
    privileged: bool = False
    attempt: int = 0
    # (host port, container port) over TCP: a container's `hostPort`s, which kubelet passes
    port_mappings: tuple[tuple[int, int], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Sandbox:
    """One item of ListPodSandbox."""

    id: str
    name: str
    namespace: str
    uid: str
    ready: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SandboxStatus:
    """PodSandboxStatus (verbose): the pod's IPs and the netns the runtime gave its plugins."""

    id: str
    name: str
    namespace: str
    uid: str
    ready: bool
    ip: str
    additional_ips: tuple[str, ...]
    netns: str | None  # None for a host-network sandbox


def _netns_path(info: Mapping[str, str]) -> str | None:
    """The network namespace path in containerd's verbose info (its runtime spec)."""
    raw = json.loads(info.get("info", "{}"))
    spec = raw.get("runtimeSpec") or {}
    for namespace in (spec.get("linux") or {}).get("namespaces") or []:
        if namespace.get("type") == "network":
            path = namespace.get("path")
            return str(path) if path else None
    return None


class RuntimeClient:
    """CRI v1 RuntimeService calls on the runtime's socket at `address`."""

    def __init__(self, address: Path, *, timeout: float = CALL_TIMEOUT) -> None:
        self._pb = messages()
        self._channel = grpc.insecure_channel(f"unix://{address}")
        self.timeout = timeout

    def close(self) -> None:
        self._channel.close()

    def _call(self, method: str, request: Any, reply_type: Any, timeout: float | None) -> Any:
        stub = protos.unary_stub(self._channel, SERVICE + method, reply_type)
        try:
            return stub(request, timeout=timeout or self.timeout)
        except grpc.RpcError as exc:
            # what the channel raises is also a grpc.Call: the status code and its message
            code = exc.code().name if isinstance(exc, grpc.Call) else "UNKNOWN"
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            raise CriError(method, code, details or "") from None

    def version(self, *, timeout: float | None = None) -> dict[str, str]:
        pb = self._pb
        reply = self._call("Version", pb.VersionRequest(version="v1"), pb.VersionResponse, timeout)
        return {
            "version": reply.version,
            "runtime_name": reply.runtime_name,
            "runtime_version": reply.runtime_version,
            "runtime_api_version": reply.runtime_api_version,
        }

    def run(self, spec: SandboxSpec, *, timeout: float | None = None) -> str:
        """RunPodSandbox; the sandbox's ID."""
        pb = self._pb
        network = pb.NODE if spec.host_network else pb.POD
        config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(
                name=spec.name, uid=spec.uid, namespace=spec.namespace, attempt=spec.attempt
            ),
            hostname="" if spec.host_network else spec.name[:63],
            labels=dict(spec.labels),
            annotations=dict(spec.annotations),
            port_mappings=[
                pb.PortMapping(protocol=pb.TCP, container_port=container, host_port=host)
                for host, container in spec.port_mappings
            ],
            linux=pb.LinuxPodSandboxConfig(
                security_context=pb.LinuxSandboxSecurityContext(
                    namespace_options=pb.NamespaceOption(
                        network=network, pid=pb.CONTAINER, ipc=pb.POD
                    ),
                    privileged=spec.privileged,
                )
            ),
        )
        request = pb.RunPodSandboxRequest(config=config)
        reply = self._call("RunPodSandbox", request, pb.RunPodSandboxResponse, timeout)
        return str(reply.pod_sandbox_id)

    def stop(self, sandbox_id: str, *, timeout: float | None = None) -> None:
        pb = self._pb
        request = pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id)
        self._call("StopPodSandbox", request, pb.StopPodSandboxResponse, timeout)

    def remove(self, sandbox_id: str, *, timeout: float | None = None) -> None:
        pb = self._pb
        request = pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id)
        self._call("RemovePodSandbox", request, pb.RemovePodSandboxResponse, timeout)

    def status(self, sandbox_id: str, *, timeout: float | None = None) -> SandboxStatus:
        pb = self._pb
        request = pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=True)
        reply = self._call("PodSandboxStatus", request, pb.PodSandboxStatusResponse, timeout)
        status = reply.status
        return SandboxStatus(
            id=status.id,
            name=status.metadata.name,
            namespace=status.metadata.namespace,
            uid=status.metadata.uid,
            ready=status.state == pb.SANDBOX_READY,
            ip=status.network.ip,
            additional_ips=tuple(item.ip for item in status.network.additional_ips),
            netns=_netns_path(reply.info),
        )

    def conditions(self, *, timeout: float | None = None) -> dict[str, tuple[bool, str]]:
        """Status: each runtime condition (RuntimeReady, NetworkReady) -> (status, message)."""
        pb = self._pb
        reply = self._call("Status", pb.StatusRequest(), pb.StatusResponse, timeout)
        return {
            condition.type: (condition.status, condition.message)
            for condition in reply.status.conditions
        }

    def list(self, *, timeout: float | None = None) -> list[Sandbox]:
        pb = self._pb
        reply = self._call(
            "ListPodSandbox", pb.ListPodSandboxRequest(), pb.ListPodSandboxResponse, timeout
        )
        return [
            Sandbox(
                id=item.id,
                name=item.metadata.name,
                namespace=item.metadata.namespace,
                uid=item.metadata.uid,
                ready=item.state == pb.SANDBOX_READY,
            )
            for item in reply.items
        ]
