"""The benchmark's cluster: networks, NADs and pods, the same for every contender.

Three kinds of secondary network, eight networks of each (a pod with N attachments selects the
first N of its kind, after the cluster default network every pod gets first):

    bridge    bridge + host-local, a bridge and a /16 of its own per network
    macvlan   macvlan (bridge mode) on a veth end of the node as master + static IPAM
    ptp       ptp + host-local, a /16 per network
    ipam      bridge + netattach's own IPAM, a bridge and a /16 of its own per network (only
              the daemons can run it: bench/ipam_node.py measures it beside `bridge`)

The cluster default network is bridge + host-local on disk (`networksDir`). All host-side links
(bridges, veths) live in the benchmark's node namespace; all host-local state in one dataDir of
the work directory, which the leak check reads at the end. Every pod exists in the fake
Kubernetes API (namespace `bench`, on the daemon's node) and, with the UID the API gave it, in
the directory feed's manifests.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

NAMESPACE = "bench"
DEFAULT_NETWORK = "bench-default"
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
KINDS = ("bridge", "macvlan", "ptp")
MAX_ATTACHMENTS = 8
CNI_VERSION = "1.0.0"


@dataclasses.dataclass(frozen=True, slots=True)
class Network:
    name: str
    config: dict[str, Any]  # a config list


@dataclasses.dataclass(frozen=True, slots=True)
class PodSpec:
    """A pod of the benchmark: its name, the networks it selects, its UID once created."""

    name: str
    networks: tuple[Network, ...]
    uid: str = ""

    @property
    def selection(self) -> str:
        return ",".join(net.name for net in self.networks)


class Topology:
    def __init__(self, work: Path, name: Callable[[str], str]) -> None:
        """`name(what)` gives the run's tagged link names (guard.Guard.name)."""
        self.work = work
        self.ipam = work / "ipam"
        self.networks_dir = work / "networks"
        self.manifests = work / "manifests"
        for directory in (self.ipam, self.networks_dir, self.manifests):
            directory.mkdir(parents=True, exist_ok=True)
        self.macvlan_master = name("vm")
        self.macvlan_peer = name("vp")
        self.default = Network(
            DEFAULT_NETWORK, self._bridge_list(DEFAULT_NETWORK, name("b0"), "10.100.0.0/16")
        )
        ipam = "netattach"
        self.networks: dict[str, list[Network]] = {
            "bridge": [
                Network(
                    f"bridge-{k}",
                    self._bridge_list(f"bridge-{k}", name(f"b{k}"), f"10.{100 + k}.0.0/16"),
                )
                for k in range(1, MAX_ATTACHMENTS + 1)
            ],
            "macvlan": [
                Network(f"macvlan-{k}", self._macvlan_list(f"macvlan-{k}", k))
                for k in range(1, MAX_ATTACHMENTS + 1)
            ],
            "ptp": [
                Network(f"ptp-{k}", self._ptp_list(f"ptp-{k}", f"10.{110 + k}.0.0/16"))
                for k in range(1, MAX_ATTACHMENTS + 1)
            ],
            # bench/ipam_node.py's: the bridge kind with netattach's IPAM instead of host-local
            "ipam": [
                Network(
                    f"ipam-{k}",
                    self._bridge_list(f"ipam-{k}", name(f"i{k}"), f"10.{130 + k}.0.0/16", ipam),
                )
                for k in range(1, MAX_ATTACHMENTS + 1)
            ],
        }
        (self.networks_dir / "00-default.conflist").write_text(json.dumps(self.default.config))

    # -- networks -------------------------------------------------------------------------------

    def _host_local(self, subnet: str) -> dict[str, Any]:
        return {"type": "host-local", "dataDir": str(self.ipam), "ranges": [[{"subnet": subnet}]]}

    def _bridge_list(
        self, name: str, bridge: str, subnet: str, ipam: str = "host-local"
    ) -> dict[str, Any]:
        given = (
            self._host_local(subnet)
            if ipam == "host-local"
            else {"type": ipam, "subnet": subnet, "reuseDelay": 0}
        )
        plugin = {"type": "bridge", "bridge": bridge, "ipam": given}
        return {"cniVersion": CNI_VERSION, "name": name, "plugins": [plugin]}

    def _macvlan_list(self, name: str, k: int) -> dict[str, Any]:
        plugin = {
            "type": "macvlan",
            "master": self.macvlan_master,
            "mode": "bridge",
            "ipam": {"type": "static", "addresses": [{"address": f"10.{120 + k}.0.2/16"}]},
        }
        return {"cniVersion": CNI_VERSION, "name": name, "plugins": [plugin]}

    def _ptp_list(self, name: str, subnet: str) -> dict[str, Any]:
        plugin = {"type": "ptp", "ipam": self._host_local(subnet)}
        return {"cniVersion": CNI_VERSION, "name": name, "plugins": [plugin]}

    def attachments(self, pod: PodSpec) -> list[dict[str, Any]]:
        """The floor's view of a pod: (ifname, config list) in attachment order."""
        first = [{"ifname": "eth0", "network": self.default.config}]
        return first + [
            {"ifname": f"net{i}", "network": net.config}
            for i, net in enumerate(pod.networks, start=1)
        ]

    def pod(self, name: str, kind: str, count: int) -> PodSpec:
        return PodSpec(name, tuple(self.networks[kind][:count]))

    # -- the objects ----------------------------------------------------------------------------

    def nad_objects(self) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": "k8s.cni.cncf.io/v1",
                "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": net.name, "namespace": NAMESPACE},
                "spec": {"config": json.dumps(net.config)},
            }
            for nets in self.networks.values()
            for net in nets
        ]

    def pod_object(self, pod: PodSpec, node: str) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": pod.name,
            "namespace": NAMESPACE,
            "labels": {"app": "bench"},
        }
        if pod.networks:
            meta["annotations"] = {NETWORKS_ANNOTATION: pod.selection}
        if pod.uid:
            meta["uid"] = pod.uid
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {
                "nodeName": node,
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}],
            },
            "status": {"phase": "Pending"},
        }

    def namespace_object(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}

    def write_manifests(self, pods: Sequence[PodSpec], node: str) -> None:
        """The directory feed's manifests: the namespace, every NAD, every pod (with its UID)."""
        docs = [self.namespace_object(), *self.nad_objects()]
        docs += [self.pod_object(pod, node) for pod in pods]
        text = "\n---\n".join(json.dumps(doc) for doc in docs) + "\n"
        tmp = self.manifests / ".all.yaml.tmp"
        tmp.write_text(text)
        tmp.replace(self.manifests / "all.yaml")
