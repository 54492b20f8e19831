"""The tests' own reader of a PodResources socket (the kubelet's, or the stand-in's).

    with PodResourcesReader(node.fs("/var/lib/kubelet/pod-resources/kubelet.sock")) as reader:
        pod = reader.get("ns", "pod")              # a PodResources message
        devices_of(pod, "netattach.test/vf")       # its device IDs of that resource

Plain `grpc` unary-unary stubs and the messages of `podresources.proto`; a refused call raises
the channel's `grpc.RpcError` (a `grpc.Call`: `code()`, `details()`). Tests use it to check what
the kubelet reports, independently of the production client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from tests import protos
from tests.devices import podresources_server

CALL_TIMEOUT = 10.0


class PodResourcesReader:
    """List and Get on the PodResources socket `socket`."""

    def __init__(self, socket: Path, *, timeout: float = CALL_TIMEOUT) -> None:
        self._pb = podresources_server.messages()
        self._channel = grpc.insecure_channel(f"unix://{socket}")
        self.timeout = timeout

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> PodResourcesReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, method: str, request: Any, reply_type: Any) -> Any:
        stub = protos.unary_stub(
            self._channel, f"/{podresources_server.SERVICE}/{method}", reply_type
        )
        return stub(request, timeout=self.timeout)

    def list(self) -> list[Any]:
        """Every pod's PodResources."""
        pb = self._pb
        reply = self._call("List", pb.ListPodResourcesRequest(), pb.ListPodResourcesResponse)
        return list(reply.pod_resources)

    def get(self, namespace: str, name: str) -> Any:
        """One pod's PodResources."""
        pb = self._pb
        request = pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
        return self._call("Get", request, pb.GetPodResourcesResponse).pod_resources


def devices_of(pod_resources: Any, resource_name: str) -> list[str]:
    """The device IDs of `resource_name` in every container of the pod, in the order given."""
    return [
        device_id
        for container in pod_resources.containers
        for devices in container.devices
        if devices.resource_name == resource_name
        for device_id in devices.device_ids
    ]


def find_pod(pods: list[Any], namespace: str, name: str) -> Any | None:
    """The PodResources of `namespace/name` in a List reply, or None."""
    for pod in pods:
        if (pod.namespace, pod.name) == (namespace, name):
            return pod
    return None
