"""A node's span of the cluster (POL-SPAN): the peer groups its pods' policies name, and pods as
those groups carry them.

A node compiles the rules of its own pods only (`compile.Compiler` targets), and those rules
read, of all the cluster's pods, the ones some peer of a governing policy can pick: the span.
The policy controller (`policy.groups`) publishes each peer's pods as a group; a node holds the
policies and namespaces of the cluster (few and small) and its own pods, works out which groups
its pods' policies name (`needed`), and reads those alone. Compiled from its pods and those
groups, a node's tables are the ones compiled from every pod of the cluster
(tests/unit/test_policy_span.py proves it on random clusters).

    GroupKey(scope, namespace_selector, pod_selector)   the pods a pod-selecting peer picks:
                in `scope` (the policy's namespace) when the peer has no namespaceSelector,
                else in every namespace its namespaceSelector matches
    GroupKey(port_name=name)   every pod declaring a container port of that name: an egress
                rule's named port is resolved against each destination's declared ports
                (`named_ports`), for any address the rule admits, picked or in an ipBlock

A member is a pod as policy reads it, in the compact form a group carries (`member_entry`),
and back (`member_pod`): its labels, its network-status entries (name, interface, ips) and its
named container ports.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from netattach.cluster import model
from netattach.policy.model import LabelSelector, Policy, Requirement
from netattach.policy.views import network_status


@dataclass(frozen=True, slots=True)
class GroupKey:
    scope: str = ""  # the policy's namespace, for a peer without namespaceSelector
    namespace_selector: LabelSelector | None = None
    pod_selector: LabelSelector | None = None
    port_name: str = ""  # a group of the pods declaring this port name

    def id(self) -> str:
        """A short name for the group, the same in every process (the objects' label)."""
        text = json.dumps(self.wire(), sort_keys=True, separators=(",", ":"))
        return "g" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def wire(self) -> dict[str, Any]:
        """The key as JSON (a group object's `spec.key`)."""
        out: dict[str, Any] = {}
        if self.port_name:
            out["portName"] = self.port_name
            return out
        if self.scope:
            out["namespace"] = self.scope
        if self.namespace_selector is not None:
            out["namespaceSelector"] = _selector_wire(self.namespace_selector)
        if self.pod_selector is not None:
            out["podSelector"] = _selector_wire(self.pod_selector)
        return out

    def picks(
        self,
        namespace: str,
        namespace_labels: Mapping[str, str],
        labels: Mapping[str, str],
        port_names: Iterable[str],
    ) -> bool:
        """Whether a pod of `namespace` (labelled `namespace_labels`: only its name label for
        one not seen, as compile reads it) with `labels` and container ports of `port_names`
        is a member."""
        if self.port_name:
            return self.port_name in port_names
        if self.namespace_selector is None:
            if namespace != self.scope:
                return False
        elif not self.namespace_selector.matches(namespace_labels):
            return False
        return self.pod_selector is None or self.pod_selector.matches(labels)


def _selector_wire(selector: LabelSelector) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if selector.match_labels:
        out["matchLabels"] = dict(selector.match_labels)
    if selector.match_expressions:
        out["matchExpressions"] = [_requirement_wire(r) for r in selector.match_expressions]
    return out


def _requirement_wire(requirement: Requirement) -> dict[str, Any]:
    out: dict[str, Any] = {"key": requirement.key, "operator": requirement.operator}
    if requirement.values:
        out["values"] = list(requirement.values)
    return out


def group_keys(policy: Policy) -> set[GroupKey]:
    """The groups `policy`'s rules read: one per pod-selecting peer, one per port name an
    egress rule names."""
    keys: set[GroupKey] = set()
    for rule in (*policy.ingress, *policy.egress):
        for peer in rule.peers:
            if peer.ip_block is not None:
                continue
            scope = policy.namespace if peer.namespace_selector is None else ""
            keys.add(GroupKey(scope, peer.namespace_selector, peer.pod_selector))
    for rule in policy.egress:
        for port in rule.ports:
            if isinstance(port.port, str):
                keys.add(GroupKey(port_name=port.port))
    return keys


def governs(policy: Policy, namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether `policy` selects a pod of `namespace` labelled `labels` (on some network)."""
    return policy.namespace == namespace and policy.pod_selector.matches(labels)


def needed(
    policies: Iterable[Policy], local: Iterable[tuple[str, Mapping[str, str]]]
) -> set[GroupKey]:
    """The groups a node whose pods are `local` ((namespace, labels) each) reads: those of every
    policy selecting one of them."""
    by_namespace: dict[str, list[Mapping[str, str]]] = {}
    for namespace, labels in local:
        by_namespace.setdefault(namespace, []).append(labels)
    keys: set[GroupKey] = set()
    for policy in policies:
        pods = by_namespace.get(policy.namespace, ())
        if any(policy.pod_selector.matches(labels) for labels in pods):
            keys |= group_keys(policy)
    return keys


# -- members ------------------------------------------------------------------------------------


def port_names(pod: model.KubeObject) -> list[str]:
    return [name for name, _, _ in _named_ports(pod)]


def _named_ports(pod: model.KubeObject) -> list[tuple[str, str, int]]:
    found = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in (container or {}).get("ports") or []:
            name, number = port.get("name"), port.get("containerPort")
            if isinstance(name, str) and isinstance(number, int):
                found.append((name, str(port.get("protocol", "TCP")), number))
    return found


def member_entry(pod: model.KubeObject) -> dict[str, Any]:
    """The pod as a group carries it: what `views.build_view` reads, and nothing else."""
    entry: dict[str, Any] = {"pod": f"{model.namespace_of(pod)}/{model.name_of(pod)}"}
    labels = model.labels(pod)
    if labels:
        entry["labels"] = dict(labels)
    networks = []
    for status in network_status(pod):
        kept = {"name": status["name"]}
        if isinstance(status.get("interface"), str):
            kept["interface"] = status["interface"]
        ips = [ip for ip in status.get("ips") or [] if isinstance(ip, str)]
        if ips:
            kept["ips"] = ips
        networks.append(kept)
    if networks:
        entry["networks"] = networks
    ports = _named_ports(pod)
    if ports:
        entry["ports"] = [[name, protocol, number] for name, protocol, number in ports]
    return entry


def member_pod(entry: Mapping[str, Any]) -> model.KubeObject:
    """A member entry as a pod object `views.build_view` reads the same as the pod itself.
    Raises ValueError for an entry that is not one (a group object written by hand)."""
    key = entry.get("pod")
    if not isinstance(key, str) or key.count("/") != 1:
        raise ValueError(f"a member's pod {key!r} is not namespace/name")
    namespace, name = key.split("/")
    labels = entry.get("labels") or {}
    networks = entry.get("networks") or []
    ports = entry.get("ports") or []
    if (
        not isinstance(labels, dict)
        or not isinstance(networks, list)
        or not isinstance(ports, list)
    ):
        raise ValueError(f"member {key}: labels, networks and ports are a map and two lists")
    declared = [
        {"name": p[0], "protocol": p[1], "containerPort": p[2]}
        for p in ports
        if isinstance(p, list) and len(p) == 3
    ]
    meta = model.ObjectMeta(namespace=namespace, name=name, labels=labels)
    if networks:
        meta["annotations"] = {model.STATUS_ANNOTATION: json.dumps(networks)}
    return model.KubeObject(metadata=meta, spec={"containers": [{"ports": declared}]})
