"""The kubelet's PodResources API: which devices the kubelet allocated to a pod (DEV-RESOURCE).

The kubelet serves `v1.PodResourcesLister` (gRPC) on a UNIX socket, by default
`/var/lib/kubelet/pod-resources/kubelet.sock`. `read_pod_devices` asks it for one pod with
`Get` and, from a kubelet without `Get` (before 1.27, or with the feature gate off), with
`List`, and gives the pod's devices by name (and whether the kubelet knows the pod):

    device plugins   the resource name (`intel.com/sriov_netdevice`) -> its device IDs
    DRA              the ResourceClaim's name -> the device part of each CDI device name
                     (`vendor.com/class=dev0` gives `dev0`; a device without a CDI name gives
                     its `device_name`)

containers in pod order; a container's device-plugin devices sorted (the kubelet answers them
from a set, in an order that changes between answers), a claim's in allocation order. The
devices of every container of the pod are pooled, as Multus pools them.

The messages are described here, in a private descriptor pool, with only the fields netattach
reads (proto3 skips the others): no generated code and no protoc, and no clash with another
`v1` package a process may load. Package, message names and field numbers are the kubelet's
(k8s.io/kubelet/pkg/apis/podresources/v1/api.proto).

    PodResourcesUnavailableError (11)   the socket is missing or the kubelet does not answer
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

# Read by gRPC's core when it starts: netattach forks a delegate for every plugin it runs, and
# gRPC's fork handlers (for processes that go on using gRPC in the child, which a delegate never
# does) only log a line to stderr for each of them while a channel's threads live.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from netattach.cni import errors
from netattach.values import NamedTuple

DEFAULT_SOCKET: Final = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_TIMEOUT: Final = 10.0
SERVICE: Final = "/v1.PodResourcesLister/"
# A node's List answer grows with its pods; the kubelet's own client allows 16 MiB.
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024

_STRING = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_ONE = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_MANY = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED

# message -> (field, number, type, label, message type of the field or "")
_MESSAGES: Final[Mapping[str, tuple[tuple[str, int, int, int, str], ...]]] = {
    "GetPodResourcesRequest": (
        ("pod_name", 1, _STRING, _ONE, ""),
        ("pod_namespace", 2, _STRING, _ONE, ""),
    ),
    "GetPodResourcesResponse": (("pod_resources", 1, _MESSAGE, _ONE, "PodResources"),),
    "ListPodResourcesRequest": (),
    "ListPodResourcesResponse": (("pod_resources", 1, _MESSAGE, _MANY, "PodResources"),),
    "PodResources": (
        ("name", 1, _STRING, _ONE, ""),
        ("namespace", 2, _STRING, _ONE, ""),
        ("containers", 3, _MESSAGE, _MANY, "ContainerResources"),
    ),
    "ContainerResources": (
        ("name", 1, _STRING, _ONE, ""),
        ("devices", 2, _MESSAGE, _MANY, "ContainerDevices"),
        ("dynamic_resources", 5, _MESSAGE, _MANY, "DynamicResource"),
    ),
    "ContainerDevices": (
        ("resource_name", 1, _STRING, _ONE, ""),
        ("device_ids", 2, _STRING, _MANY, ""),
    ),
    "DynamicResource": (
        ("claim_name", 2, _STRING, _ONE, ""),
        ("claim_namespace", 3, _STRING, _ONE, ""),
        ("claim_resources", 4, _MESSAGE, _MANY, "ClaimResource"),
    ),
    "ClaimResource": (
        ("cdi_devices", 1, _MESSAGE, _MANY, "CDIDevice"),
        ("driver_name", 2, _STRING, _ONE, ""),
        ("pool_name", 3, _STRING, _ONE, ""),
        ("device_name", 4, _STRING, _ONE, ""),
    ),
    "CDIDevice": (("name", 1, _STRING, _ONE, ""),),
}

_lock = threading.Lock()
_classes: dict[str, Any] = {}


class PodResourcesUnavailableError(errors.TryAgainLaterError):
    """The kubelet's PodResources API cannot be reached (11: the kubelet retries the sandbox)."""


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class PodDevices(NamedTuple):
    """The devices the kubelet allocated to one pod, by resource name or claim name."""

    by_name: Mapping[str, tuple[str, ...]]
    method: str  # "Get" or "List": which call answered (for logs and tests)
    # Whether the kubelet knows the pod at all: for a second after it restarts it answers before
    # it has loaded its pods, and a pod it does not list is not yet a pod without devices.
    known: bool = True

    def get(self, name: str) -> tuple[str, ...]:
        return self.by_name.get(name, ())


def _message_classes() -> dict[str, Any]:
    with _lock:
        if not _classes:
            pool = descriptor_pool.DescriptorPool()
            pool.Add(_file_descriptor())
            for name in _MESSAGES:
                found = pool.FindMessageTypeByName(f"v1.{name}")
                _classes[name] = message_factory.GetMessageClass(found)
        return _classes


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    described = descriptor_pb2.FileDescriptorProto(
        name="netattach/podresources/v1/api.proto", package="v1", syntax="proto3"
    )
    for message, fields in _MESSAGES.items():
        entry = described.message_type.add(name=message)
        for field, number, kind, label, type_name in fields:
            added = entry.field.add(name=field, number=number, type=kind, label=label)
            if type_name:
                added.type_name = f".v1.{type_name}"
    return described


def read_pod_devices(
    socket: Path, namespace: str, name: str, *, timeout: float = DEFAULT_TIMEOUT
) -> PodDevices:
    """The devices the kubelet at `socket` allocated to the pod `namespace/name` (blocking:
    the daemon calls it in a worker thread). A pod the kubelet does not list has none."""
    classes = _message_classes()
    target = f"unix:{socket.absolute()}"
    options = [
        ("grpc.enable_http_proxy", 0),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]
    with grpc.insecure_channel(target, options=options) as channel:
        get = channel.unary_unary(
            SERVICE + "Get",
            request_serializer=_serialize,
            response_deserializer=classes["GetPodResourcesResponse"].FromString,
        )
        try:
            answer = get(
                classes["GetPodResourcesRequest"](pod_name=name, pod_namespace=namespace),
                timeout=timeout,
            )
        except grpc.RpcError as exc:
            _raise_unavailable(exc, socket)
            # Any other refusal of Get (UNIMPLEMENTED from a kubelet without it, or its error
            # for a pod it does not know): List answers for every kubelet.
            listed = channel.unary_unary(
                SERVICE + "List",
                request_serializer=_serialize,
                response_deserializer=classes["ListPodResourcesResponse"].FromString,
            )
            try:
                every = listed(classes["ListPodResourcesRequest"](), timeout=timeout)
            except grpc.RpcError as failed:
                _raise_unavailable(failed, socket)
                raise _refused(failed, socket, "List") from failed
            pods = [p for p in every.pod_resources if p.namespace == namespace and p.name == name]
            return PodDevices(by_name=_devices(pods), method="List", known=bool(pods))
        return PodDevices(by_name=_devices([answer.pod_resources]), method="Get")


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())


def _devices(pods: list[Any]) -> dict[str, tuple[str, ...]]:
    found: dict[str, list[str]] = {}
    for pod in pods:
        for container in pod.containers:
            # The kubelet keeps a container's devices as a set, and answers them one entry a
            # device (each with its topology), in an order that changes from one answer to the
            # next: they are sorted per resource, so every ADD of the pod sees one order.
            plugged: dict[str, list[str]] = {}
            for devices in container.devices:
                plugged.setdefault(devices.resource_name, []).extend(devices.device_ids)
            for resource, ids in plugged.items():
                _add(found, resource, sorted(ids))
            for claim in container.dynamic_resources:
                for resource in claim.claim_resources:
                    names = [cdi.name.partition("=")[2] or cdi.name for cdi in resource.cdi_devices]
                    if not names and resource.device_name:
                        names = [resource.device_name]
                    _add(found, claim.claim_name, names)
    return {name: tuple(ids) for name, ids in found.items()}


def _add(found: dict[str, list[str]], name: str, ids: Any) -> None:
    if not name:
        return
    held = found.setdefault(name, [])
    # A device shared by two containers of the pod (a DRA claim both reference) is one device.
    held.extend(device for device in ids if device and device not in held)


def _raise_unavailable(exc: grpc.RpcError, socket: Path) -> None:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        raise PodResourcesUnavailableError(
            f"the kubelet's PodResources API at {str(socket)!r} does not answer",
            f"{code.name}: {details}",
        ) from exc


def _refused(exc: grpc.RpcError, socket: Path, method: str) -> errors.CNIError:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    return errors.IOFailureError(
        f"the kubelet's PodResources API at {str(socket)!r} refused {method}",
        f"{code.name if code is not None else 'error'}: {details}",
    )
