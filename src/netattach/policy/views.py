"""Pods as policy compile reads them: namespace, labels, addresses per network, ports.

A `PodView` is built once per pod content (`ViewCache`) and holds only what compile reads. Equal
label maps are one shared object with a small integer id (`Interner`), so a selector is matched
once per distinct label map, not once per pod.
"""

from __future__ import annotations

import ipaddress
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from netattach.cluster.model import (
    STATUS_ANNOTATION,
    KubeObject,
    annotation,
    labels,
    name_of,
    namespace_of,
)
from netattach.policy.model import AddressRange

Labels = tuple[tuple[str, str], ...]  # sorted (key, value) pairs


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    labels: Mapping[str, str]
    label_id: int  # equal label maps, equal ids (one `Interner`)
    addresses: Mapping[str, tuple[AddressRange, ...]]  # network -> host addresses, sorted
    interfaces: tuple[tuple[str, str], ...]  # (ifname, network)
    ports: tuple[tuple[str, str, int], ...]  # (name, protocol, number)
    key: str = ""  # "namespace/name"

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", f"{self.namespace}/{self.name}")

    def same_content(self, other: PodView) -> bool:
        """Equal as compile reads them (label ids of different interners are not compared)."""
        return (
            self.namespace == other.namespace
            and self.name == other.name
            and self.labels == other.labels
            and self.addresses == other.addresses
            and self.interfaces == other.interfaces
            and self.ports == other.ports
        )


class Interner:
    """One shared, read-only label map (and id) per distinct content."""

    def __init__(self) -> None:
        self._labels: dict[Labels, tuple[int, Mapping[str, str]]] = {}

    def labels(self, raw: Mapping[str, str]) -> tuple[int, Mapping[str, str]]:
        key = tuple(sorted(raw.items()))
        found = self._labels.get(key)
        if found is None:
            shared = {sys.intern(k): sys.intern(v) for k, v in key}
            found = self._labels[key] = (len(self._labels), shared)
        return found

    def __len__(self) -> int:
        return len(self._labels)


def pod_key(pod: KubeObject) -> str:
    return f"{namespace_of(pod)}/{name_of(pod)}"


def network_status(pod: KubeObject) -> list[dict[str, Any]]:
    """The pod's network-status entries (malformed content is ignored)."""
    raw = annotation(pod, STATUS_ANNOTATION)
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(value, list):
        return []
    return [e for e in value if isinstance(e, dict) and isinstance(e.get("name"), str)]


def build_view(pod: KubeObject, interner: Interner) -> PodView:
    addresses: dict[str, list[AddressRange]] = {}
    interfaces: list[tuple[str, str]] = []
    for entry in network_status(pod):
        net = entry["name"]
        ifname = entry.get("interface")
        if isinstance(ifname, str) and ifname:
            interfaces.append((ifname, net))
        for ip in entry.get("ips") or []:
            if not isinstance(ip, str):
                continue
            try:
                addr = ipaddress.ip_interface(ip).ip
            except ValueError:
                continue
            value = int(addr)
            addresses.setdefault(net, []).append((addr.version, value, value))
    ports: list[tuple[str, str, int]] = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in (container or {}).get("ports") or []:
            name, number = port.get("name"), port.get("containerPort")
            if isinstance(name, str) and isinstance(number, int):
                ports.append((name, str(port.get("protocol", "TCP")), number))
    label_id, shared = interner.labels(labels(pod))
    return PodView(
        namespace=namespace_of(pod),
        name=name_of(pod),
        labels=shared,
        label_id=label_id,
        addresses={sys.intern(k): tuple(sorted(set(v))) for k, v in addresses.items()},
        interfaces=tuple(interfaces),
        ports=tuple(ports),
    )


def _view_key(pod: KubeObject) -> tuple[object, ...]:
    containers = (pod.get("spec") or {}).get("containers")
    return (
        namespace_of(pod),
        name_of(pod),
        tuple(sorted(labels(pod).items())),
        annotation(pod, STATUS_ANNOTATION),
        repr(containers) if containers else "",
    )


class ViewCache:
    """Pods as compile reads them, kept between compiles by what they hold.

    Reading a pod (its network-status JSON, its addresses) is most of a compile's cost for a
    large cluster, and from one pass to the next almost every pod is unchanged. Each `views`
    call keeps exactly the pods it was given, so the cache never outgrows the cluster.
    """

    def __init__(self, interner: Interner | None = None) -> None:
        self.interner = interner or Interner()
        self._views: dict[tuple[object, ...], PodView] = {}

    def views(self, pods: Iterable[KubeObject]) -> list[PodView]:
        fresh: dict[tuple[object, ...], PodView] = {}
        out = []
        for pod in pods:
            key = _view_key(pod)
            view = fresh.get(key) or self._views.get(key) or build_view(pod, self.interner)
            fresh[key] = view
            out.append(view)
        self._views = fresh
        return out
