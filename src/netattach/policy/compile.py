"""Policies -> a rule IR per pod and interface (POL-SELECT, POL-PEERS, POL-PORTS, POL-IPBLOCK).

Pure: the inputs are the cluster's objects, the output is data. One allow rule per policy rule
(split only when a named port resolves differently for different destination pods), with its
peers as address sets and its ports as a port set, so the rule count never grows with
peers x ports (POL-COMPACT).
"""

from __future__ import annotations

import bisect
import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
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
from netattach.policy.model import (
    DIRECTIONS,
    NAMESPACE_NAME_LABEL,
    Direction,
    IPNetwork,
    Peer,
    Policy,
    PortSpec,
    Rule,
    collapse,
)


@dataclass(frozen=True, order=True)
class PortRange:
    protocol: str  # TCP, UDP, SCTP
    first: int
    last: int


@dataclass(frozen=True)
class AllowRule:
    """Traffic from/to `peers` (None: any address) on `ports` (None: any port) passes."""

    policy_uid: str
    origin: str  # "ns/name ingress[0]"
    peers: tuple[IPNetwork, ...] | None
    ports: tuple[PortRange, ...] | None


@dataclass(frozen=True)
class DirectionRules:
    """An isolated direction: only what one of `rules` allows passes."""

    policy_uids: tuple[str, ...]  # the policies isolating this direction
    rules: tuple[AllowRule, ...]


@dataclass(frozen=True)
class InterfaceRules:
    network: str  # "ns/net"
    ingress: DirectionRules | None  # None: not isolated
    egress: DirectionRules | None

    def direction(self, direction: Direction) -> DirectionRules | None:
        return self.ingress if direction == "ingress" else self.egress


@dataclass(frozen=True)
class _PodView:
    namespace: str
    labels: Mapping[str, str]
    addresses: Mapping[str, tuple[IPNetwork, ...]]  # network -> host addresses
    interfaces: tuple[tuple[str, str], ...]  # (ifname, network)
    ports: tuple[tuple[str, str, int], ...]  # (name, protocol, number)


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


def _view(pod: KubeObject) -> _PodView:
    addresses: dict[str, list[IPNetwork]] = {}
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
            addresses.setdefault(net, []).append(ipaddress.ip_network(addr))
    ports: list[tuple[str, str, int]] = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in (container or {}).get("ports") or []:
            name, number = port.get("name"), port.get("containerPort")
            if isinstance(name, str) and isinstance(number, int):
                ports.append((name, str(port.get("protocol", "TCP")), number))
    return _PodView(
        namespace=namespace_of(pod),
        labels=labels(pod),
        addresses={k: collapse(v) for k, v in addresses.items()},
        interfaces=tuple(interfaces),
        ports=tuple(ports),
    )


def namespace_labels(namespaces: Iterable[KubeObject]) -> dict[str, dict[str, str]]:
    """Namespace name -> labels, with the automatic `kubernetes.io/metadata.name` label."""
    out: dict[str, dict[str, str]] = {}
    for ns in namespaces:
        out[name_of(ns)] = {NAMESPACE_NAME_LABEL: name_of(ns), **labels(ns)}
    return out


def _ns_labels(ns_labels: Mapping[str, Mapping[str, str]], ns: str) -> Mapping[str, str]:
    return ns_labels.get(ns) or {NAMESPACE_NAME_LABEL: ns}


_Groups = list[tuple[tuple[IPNetwork, ...] | None, tuple[PortRange, ...] | None]]


def _resolve(ports: tuple[PortSpec, ...], dest: _PodView | None) -> tuple[PortRange, ...] | None:
    """The port set, named ports resolved against `dest` (unresolvable names match nothing)."""
    if not ports:
        return None
    out: set[PortRange] = set()
    for p in ports:
        if p.port is None:
            out.add(PortRange(p.protocol, 1, 65535))
        elif isinstance(p.port, int):
            out.add(PortRange(p.protocol, p.port, p.end_port or p.port))
        elif dest is not None:
            for name, proto, number in dest.ports:
                if name == p.port and proto == p.protocol:
                    out.add(PortRange(p.protocol, number, number))
    return tuple(sorted(out))


class _Membership:
    """Whether a host address lies in any of `nets` (None: everything), by bisection over the
    collapsed (so disjoint and sortable) networks."""

    def __init__(self, nets: tuple[IPNetwork, ...] | None) -> None:
        self.everything = nets is None
        self.ranges: dict[int, tuple[list[int], list[int]]] = {}
        for net in sorted(nets or (), key=lambda n: (n.version, int(n.network_address))):
            starts, ends = self.ranges.setdefault(net.version, ([], []))
            starts.append(int(net.network_address))
            ends.append(int(net.broadcast_address))

    def __call__(self, host: IPNetwork) -> bool:
        if self.everything:
            return True
        starts, ends = self.ranges.get(host.version, ([], []))
        value = int(host.network_address)
        i = bisect.bisect_right(starts, value) - 1
        return i >= 0 and value <= ends[i]


class _Compiler:
    """One cluster snapshot, compiled for any number of targets.

    A rule's peers (and, for egress, its per-destination port groups) do not depend on the
    target, so they are resolved once per (policy, direction, rule, network) and reused: the
    cost grows with policies x pods once, not again with every target.
    """

    def __init__(
        self,
        views: Sequence[_PodView],
        ns_labels: Mapping[str, Mapping[str, str]],
        policies: Sequence[Policy],
    ) -> None:
        self.views = views
        self.ns_labels = ns_labels
        self.by_namespace: dict[str, list[_PodView]] = {}
        for v in views:
            self.by_namespace.setdefault(v.namespace, []).append(v)
        self.policies: dict[str, list[Policy]] = {}
        for policy in sorted(policies, key=lambda p: (p.namespace, p.name, p.uid)):
            self.policies.setdefault(policy.namespace, []).append(policy)
        self._peers: dict[tuple[int, Direction, int, str], tuple[IPNetwork, ...] | None] = {}
        self._egress: dict[tuple[int, int, str], _Groups] = {}

    def _namespaces(self, peer: Peer, policy: Policy) -> list[str]:
        if peer.namespace_selector is None:
            return [policy.namespace]
        return [
            ns
            for ns in self.by_namespace
            if peer.namespace_selector.matches(_ns_labels(self.ns_labels, ns))
        ]

    def _peer_pods(self, peer: Peer, policy: Policy) -> list[_PodView]:
        out = []
        for ns in self._namespaces(peer, policy):
            for v in self.by_namespace.get(ns, ()):
                if peer.pod_selector is None or peer.pod_selector.matches(v.labels):
                    out.append(v)
        return out

    def peers(
        self, policy: Policy, direction: Direction, index: int, rule: Rule, network: str
    ) -> tuple[IPNetwork, ...] | None:
        """The addresses a rule admits on `network` (None: any address)."""
        key = (id(policy), direction, index, network)
        if key in self._peers:
            return self._peers[key]
        peers: tuple[IPNetwork, ...] | None = None
        if rule.peers:
            nets: list[IPNetwork] = []
            for peer in rule.peers:
                if peer.ip_block is not None:
                    nets.extend(peer.ip_block.networks())
                else:
                    for v in self._peer_pods(peer, policy):
                        nets.extend(v.addresses.get(network, ()))
            peers = collapse(nets)
        self._peers[key] = peers
        return peers

    def groups(
        self,
        policy: Policy,
        direction: Direction,
        index: int,
        rule: Rule,
        *,
        network: str,
        target: _PodView,
    ) -> _Groups:
        """(peers, ports) groups of one rule; more than one only for egress to named ports."""
        peers = self.peers(policy, direction, index, rule, network)
        named = any(isinstance(p.port, str) for p in rule.ports)
        if direction == "ingress" or not named:
            return [(peers, _resolve(rule.ports, target if direction == "ingress" else None))]
        key = (id(policy), index, network)
        if key not in self._egress:
            self._egress[key] = self._egress_groups(rule, network, peers)
        return self._egress[key]

    def _egress_groups(
        self, rule: Rule, network: str, peers: tuple[IPNetwork, ...] | None
    ) -> _Groups:
        """Egress to named ports: each destination pod resolves the names itself."""
        groups: dict[tuple[PortRange, ...] | None, list[IPNetwork]] = {}
        numeric_specs = tuple(p for p in rule.ports if not isinstance(p.port, str))
        numeric = _resolve(numeric_specs, None) if numeric_specs else ()
        out: _Groups = []
        if numeric:
            out.append((peers, numeric))
        inside = _Membership(peers)
        by_ports: dict[tuple[tuple[str, str, int], ...], tuple[PortRange, ...] | None] = {}
        for v in self.views:
            addresses = v.addresses.get(network, ())
            if not addresses:
                continue
            if v.ports not in by_ports:
                by_ports[v.ports] = _resolve(rule.ports, v)
            resolved = by_ports[v.ports]
            if not resolved or resolved == numeric:
                continue
            for addr in addresses:
                if inside(addr):
                    groups.setdefault(resolved, []).append(addr)
        for ports, addrs in sorted(groups.items(), key=lambda kv: kv[0] or ()):
            out.append((collapse(addrs), ports))
        return out

    def compile(self, target: _PodView) -> dict[str, InterfaceRules]:
        selecting = [
            p
            for p in self.policies.get(target.namespace, ())
            if p.pod_selector.matches(target.labels)
        ]
        result: dict[str, InterfaceRules] = {}
        for ifname, network in target.interfaces:
            governing = [p for p in selecting if network in p.networks]
            if not governing or ifname in result:
                continue
            per_dir: dict[Direction, DirectionRules | None] = {}
            for direction in DIRECTIONS:
                isolating = [p for p in governing if direction in p.policy_types]
                if not isolating:
                    per_dir[direction] = None
                    continue
                rules: list[AllowRule] = []
                for policy in isolating:
                    for i, rule in enumerate(policy.rules(direction)):
                        origin = f"{policy.key} {direction}[{i}]"
                        for peers, ports in self.groups(
                            policy, direction, i, rule, network=network, target=target
                        ):
                            if peers == () or ports == ():
                                continue  # allows nothing
                            rules.append(AllowRule(policy.uid, origin, peers, ports))
                per_dir[direction] = DirectionRules(tuple(p.uid for p in isolating), tuple(rules))
            result[ifname] = InterfaceRules(network, per_dir["ingress"], per_dir["egress"])
        return result


def compile_pod(
    pod: KubeObject,
    namespaces: Sequence[KubeObject],
    pods: Sequence[KubeObject],
    policies: Sequence[Policy],
) -> dict[str, InterfaceRules]:
    """The rules of every interface of `pod` whose network some policy selecting it governs.

    An empty result means the pod is untouched (POL-SELECT).
    """
    return compile_pods([pod], namespaces, pods, policies)[pod_key(pod)]


class ViewCache:
    """Pods as compile reads them, kept between compiles by what they hold.

    Reading a pod (its network-status JSON, its addresses) is most of a compile's cost for a
    large cluster, and from one pass to the next almost every pod is unchanged. Each `views`
    call keeps exactly the pods it was given, so the cache never outgrows the cluster.
    """

    def __init__(self) -> None:
        self._views: dict[tuple[object, ...], _PodView] = {}

    def views(self, pods: Iterable[KubeObject]) -> list[_PodView]:
        fresh: dict[tuple[object, ...], _PodView] = {}
        out = []
        for pod in pods:
            key = _view_key(pod)
            view = fresh.get(key) or self._views.get(key) or _view(pod)
            fresh[key] = view
            out.append(view)
        self._views = fresh
        return out


def _view_key(pod: KubeObject) -> tuple[object, ...]:
    containers = (pod.get("spec") or {}).get("containers")
    return (
        namespace_of(pod),
        name_of(pod),
        tuple(sorted(labels(pod).items())),
        annotation(pod, STATUS_ANNOTATION),
        repr(containers) if containers else "",
    )


def compile_pods(
    targets: Iterable[KubeObject],
    namespaces: Sequence[KubeObject],
    pods: Sequence[KubeObject],
    policies: Sequence[Policy],
    *,
    cache: ViewCache | None = None,
) -> dict[str, dict[str, InterfaceRules]]:
    """`compile_pod` for each of `targets` ("ns/name" -> rules), reading the cluster once.

    `cache`: reuse the pod views of an earlier compile (the daemon passes one per node)."""
    targets = list(targets)
    if not any(_selected(pod, policies) for pod in targets):
        return {pod_key(pod): {} for pod in targets}  # no peer needs reading
    views = cache.views(pods) if cache is not None else [_view(p) for p in pods]
    compiler = _Compiler(views, namespace_labels(namespaces), policies)
    return {pod_key(pod): compiler.compile(_view(pod)) for pod in targets}


def _selected(pod: KubeObject, policies: Sequence[Policy]) -> bool:
    ns, pod_labels = namespace_of(pod), labels(pod)
    return any(p.namespace == ns and p.pod_selector.matches(pod_labels) for p in policies)


def allows(
    rules: InterfaceRules | None, direction: Direction, peer_ip: str, protocol: str, port: int
) -> bool:
    """Whether the IR lets a new connection through (the peer is the source for ingress)."""
    if rules is None:
        return True
    d = rules.direction(direction)
    if d is None:
        return True
    addr = ipaddress.ip_address(peer_ip)
    for r in d.rules:
        if r.peers is not None and not any(addr in n for n in r.peers):
            continue
        if r.ports is not None and not any(
            p.protocol == protocol and p.first <= port <= p.last for p in r.ports
        ):
            continue
        return True
    return False


def rules_to_json(rules: Mapping[str, InterfaceRules]) -> dict[str, Any]:
    """The IR as JSON-ready data (golden files, debugging)."""

    def direction(d: DirectionRules | None) -> dict[str, Any] | None:
        if d is None:
            return None
        return {
            "policies": list(d.policy_uids),
            "rules": [
                {
                    "policy": r.policy_uid,
                    "origin": r.origin,
                    "peers": None if r.peers is None else [str(n) for n in r.peers],
                    "ports": None
                    if r.ports is None
                    else [[p.protocol, p.first, p.last] for p in r.ports],
                }
                for r in d.rules
            ],
        }

    return {
        ifname: {
            "network": ir.network,
            "ingress": direction(ir.ingress),
            "egress": direction(ir.egress),
        }
        for ifname, ir in sorted(rules.items())
    }
