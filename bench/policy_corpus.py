"""A deterministic, realistic cluster for the policy benchmark: namespaces, pods, policies.

Seeded (`random.Random(seed)`), so the same sizes always give the same objects. What it holds:

    namespaces   labelled `team`, `env` (prod/staging/dev) and `tier`
    networks     two shared NADs of namespace `default` (`storage`, `dataplane`) and one
                 `app-net` per namespace; a pod's network-status lists the cluster default
                 (eth0) and 1-2 of these (net1, net2), with unique addresses, some dual-stack
    pods         labelled `app`, `role`, `version` and sometimes `canary`; containers declare
                 named ports (http, metrics, and grpc or db by role)
    policies     `policy-for` one or two of the namespace's networks; a podSelector with
                 matchLabels, matchExpressions (In, NotIn, Exists, DoesNotExist) or `{}`;
                 Ingress, Egress or both; rules whose peers are podSelectors, namespaceSelectors,
                 both, or ipBlocks with 1-3 excepts (IPv4 and IPv6); several ports per rule:
                 numeric, ranges (endPort), named (http, metrics, grpc, db), UDP and SCTP
"""

from __future__ import annotations

import dataclasses
import json
import random
import uuid
from typing import Any

from netattach.cluster import model

STATUS = model.STATUS_ANNOTATION
POLICY_FOR = "k8s.v1.cni.cncf.io/policy-for"
SHARED_NETWORKS = ("default/storage", "default/dataplane")
APPS = ("shop", "cart", "search", "auth", "billing", "catalog", "media", "notify")
ROLES = ("frontend", "backend", "db", "cache")
TEAMS = ("red", "blue", "green", "gold", "iron")
ENVS = ("prod", "staging", "dev")
NAMED_PORTS = ("http", "metrics", "grpc", "db")


@dataclasses.dataclass(frozen=True, slots=True)
class Corpus:
    namespaces: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    policies: list[dict[str, Any]]


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _namespace(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": f"team-{index:02d}",
            "labels": {
                "team": TEAMS[index % len(TEAMS)],
                "env": ENVS[index % len(ENVS)],
                "tier": "edge" if index % 4 == 0 else "core",
            },
        },
    }


def _ports(role: str) -> list[dict[str, Any]]:
    ports = [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    if role == "db":
        ports.append({"name": "db", "containerPort": 5432, "protocol": "TCP"})
    elif role in ("backend", "frontend"):
        ports.append({"name": "grpc", "containerPort": 50051, "protocol": "TCP"})
    return ports


def _pod(rng: random.Random, index: int, ns: str, ns_index: int) -> dict[str, Any]:
    role = ROLES[rng.randrange(len(ROLES))]
    labels = {
        "app": APPS[rng.randrange(len(APPS))],
        "role": role,
        "version": rng.choice(("v1", "v2")),
    }
    if rng.random() < 0.2:
        labels["canary"] = "true"
    # Unique per pod: 10.<net>.<index high>.<index low>
    hi, lo = divmod(index, 250)
    status = [
        {
            "name": "cluster-default",
            "interface": "eth0",
            "ips": [f"10.244.{hi}.{lo + 2}"],
            "default": True,
        }
    ]
    networks = [rng.choice(SHARED_NETWORKS)]
    if rng.random() < 0.6:
        networks.append(f"{ns}/app-net")
    for position, network in enumerate(networks, start=1):
        octet = {"default/storage": 10, "default/dataplane": 11}.get(network, 20 + ns_index % 30)
        ips = [f"10.{octet}.{hi}.{lo + 2}/16"]
        if network == "default/dataplane" or rng.random() < 0.3:
            ips.append(f"fd00:{octet:x}::{index + 2:x}/64")
        status.append({"name": network, "interface": f"net{position}", "ips": ips})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{labels['app']}-{role}-{index:04d}",
            "namespace": ns,
            "uid": _uid(rng),
            "labels": labels,
            "annotations": {STATUS: model_json(status)},
        },
        "spec": {"containers": [{"name": "app", "ports": _ports(role)}]},
    }


def pod(rng: random.Random, index: int, ns: str, ns_index: int) -> dict[str, Any]:
    """One more pod like the corpus's (index past the corpus's pods: unique addresses)."""
    return _pod(rng, index, ns, ns_index)


def model_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _selector(rng: random.Random) -> dict[str, Any]:
    """A pod selector as people write them: mostly matchLabels, some expressions, some `{}`."""
    shape = rng.random()
    if shape < 0.1:
        return {}
    if shape < 0.55:
        chosen = {"app": rng.choice(APPS)}
        if rng.random() < 0.4:
            chosen["role"] = rng.choice(ROLES)
        return {"matchLabels": chosen}
    expressions: list[dict[str, Any]] = [
        {"key": "role", "operator": "In", "values": sorted(rng.sample(ROLES, 2))}
    ]
    extra = rng.random()
    if extra < 0.3:
        expressions.append({"key": "canary", "operator": "DoesNotExist"})
    elif extra < 0.55:
        expressions.append({"key": "version", "operator": "NotIn", "values": ["v1"]})
    elif extra < 0.7:
        expressions.append({"key": "app", "operator": "Exists"})
    selector: dict[str, Any] = {"matchExpressions": expressions}
    if rng.random() < 0.3:
        selector["matchLabels"] = {"app": rng.choice(APPS)}
    return selector


def _namespace_selector(rng: random.Random) -> dict[str, Any]:
    shape = rng.random()
    if shape < 0.15:
        return {}
    if shape < 0.6:
        return {"matchLabels": {"team": rng.choice(TEAMS)}}
    if shape < 0.85:
        return {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}
    excluded = {"key": "team", "operator": "NotIn", "values": [rng.choice(TEAMS)]}
    return {"matchLabels": {"tier": "core"}, "matchExpressions": [excluded]}


def _ip_block(rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.25:
        base = rng.choice((10, 11))
        return {
            "cidr": f"fd00:{base:x}::/64",
            "except": [f"fd00:{base:x}::{rng.randrange(1, 4000):x}/128"],
        }
    octet = rng.choice((10, 11, 20, 21, 22))
    third = rng.randrange(0, 3)
    excepts = sorted(
        {f"10.{octet}.{third}.{rng.randrange(0, 63) * 4}/30" for _ in range(rng.randint(1, 3))}
    )
    return {"cidr": f"10.{octet}.{third}.0/24", "except": excepts}


def _peer(rng: random.Random) -> dict[str, Any]:
    shape = rng.random()
    if shape < 0.4:
        return {"podSelector": _selector(rng)}
    if shape < 0.6:
        return {"namespaceSelector": _namespace_selector(rng)}
    if shape < 0.8:
        return {"podSelector": _selector(rng), "namespaceSelector": _namespace_selector(rng)}
    return {"ipBlock": _ip_block(rng)}


def _port(rng: random.Random) -> dict[str, Any]:
    shape = rng.random()
    if shape < 0.35:
        return {"protocol": "TCP", "port": rng.choice((80, 443, 8080, 8443))}
    if shape < 0.65:
        return {"protocol": "TCP", "port": rng.choice(NAMED_PORTS)}
    if shape < 0.8:
        first = rng.choice((30000, 31000, 32000))
        return {"protocol": "TCP", "port": first, "endPort": first + rng.choice((9, 99, 767))}
    if shape < 0.95:
        return {"protocol": "UDP", "port": rng.choice((53, 123, 4789))}
    return {"protocol": "SCTP", "port": 3868}


def _rules(rng: random.Random, peers_key: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for _ in range(rng.randint(1, 3)):
        rule: dict[str, Any] = {}
        if rng.random() < 0.9:
            rule[peers_key] = [_peer(rng) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.85:
            ports = {model_json(p): p for p in (_port(rng) for _ in range(rng.randint(1, 4)))}
            rule["ports"] = list(ports.values())
        rules.append(rule)
    return rules


def _policy(rng: random.Random, index: int, ns: str) -> dict[str, Any]:
    networks = [f"{ns}/app-net", *SHARED_NETWORKS]
    governed = rng.sample(networks, rng.choice((1, 1, 2)))
    # policy-for entries: bare names mean the policy's namespace (written that way when they are)
    written = [n.split("/", 1)[1] if n.startswith(f"{ns}/") else n for n in governed]
    types = rng.choice((["Ingress"], ["Ingress"], ["Egress"], ["Ingress", "Egress"]))
    spec: dict[str, Any] = {"podSelector": _selector(rng), "policyTypes": types}
    if "Ingress" in types:
        spec["ingress"] = _rules(rng, "from")
    if "Egress" in types:
        spec["egress"] = _rules(rng, "to")
    return {
        "apiVersion": "k8s.cni.cncf.io/v1beta1",
        "kind": "MultiNetworkPolicy",
        "metadata": {
            "name": f"policy-{index:04d}",
            "namespace": ns,
            "uid": _uid(rng),
            "annotations": {POLICY_FOR: ",".join(written)},
        },
        "spec": spec,
    }


def build_corpus(*, policies: int, pods: int, seed: int = 20261122) -> Corpus:
    """`policies` MultiNetworkPolicies and `pods` pods over one namespace per 25 pods (2 to
    20 namespaces: 20 for 500 pods)."""
    namespaces = max(2, min(20, pods // 25))
    rng = random.Random(seed)
    ns_objs = [_namespace(i) for i in range(namespaces)]
    names = [str(ns["metadata"]["name"]) for ns in ns_objs]
    pod_objs = [_pod(rng, i, names[i % namespaces], i % namespaces) for i in range(pods)]
    policy_objs = [_policy(rng, i, names[i % namespaces]) for i in range(policies)]
    return Corpus(namespaces=ns_objs, pods=pod_objs, policies=policy_objs)
