"""Compiling policies to the rule IR, checked against a direct NetworkPolicy evaluator."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netattach.cluster.model import KubeObject
from netattach.policy.compile import compile_pod, compile_pods
from netattach.policy.ir import allows
from netattach.policy.model import Policy, parse_policy
from netattach.policy.views import ViewCache, pod_key
from tests.unit.policy_fixtures import (
    NET,
    POLICY_FOR,
    STATUS,
    container_ports_st,
    labels_st,
    numbered_pod,
    policy_spec_st,
)

# ---- a direct evaluator of NetworkPolicy semantics on the raw objects (no netattach code) ----


def _sel(sel: dict[str, Any], labels: dict[str, str]) -> bool:
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        k, op, vals = e["key"], e["operator"], e.get("values") or []
        ok = {
            "In": k in labels and labels[k] in vals,
            "NotIn": k not in labels or labels[k] not in vals,
            "Exists": k in labels,
            "DoesNotExist": k not in labels,
        }[op]
        if not ok:
            return False
    return True


def _ips(pod: KubeObject, net: str) -> list[str]:
    status = json.loads(pod["metadata"]["annotations"][STATUS])
    return [ip.split("/")[0] for e in status if e["name"] == net for ip in e.get("ips", [])]


def _ns_labels(nss: list[KubeObject], ns: str) -> dict[str, str]:
    for n in nss:
        if n["metadata"]["name"] == ns:
            return {"kubernetes.io/metadata.name": ns, **n["metadata"].get("labels", {})}
    return {"kubernetes.io/metadata.name": ns}


def _types(pol: KubeObject) -> list[str]:
    spec = pol["spec"]
    if "policyTypes" in spec:
        return [t.lower() for t in spec["policyTypes"]]
    return ["ingress", "egress"] if spec.get("egress") is not None else ["ingress"]


def _nets(pol: KubeObject) -> set[str]:
    ns = pol["metadata"]["namespace"]
    out = set()
    for raw in pol["metadata"]["annotations"][POLICY_FOR].split(","):
        item = raw.strip()
        out.add(item if "/" in item else f"{ns}/{item}")
    return out


def evaluate(
    target: KubeObject,
    pods: list[KubeObject],
    nss: list[KubeObject],
    pols: list[KubeObject],
    direction: str,
    peer_ip: str,
    proto: str,
    port: int,
) -> bool:
    tns = target["metadata"]["namespace"]
    tlabels = target["metadata"].get("labels", {})
    selecting = [
        p
        for p in pols
        if p["metadata"]["namespace"] == tns
        and _sel(p["spec"]["podSelector"], tlabels)
        and NET in _nets(p)
        and direction in _types(p)
    ]
    if not selecting:
        return True
    ip = ipaddress.ip_address(peer_ip)
    owners = [p for p in pods if peer_ip in [str(ipaddress.ip_address(a)) for a in _ips(p, NET)]]
    dest = target if direction == "ingress" else (owners[0] if owners else None)

    def peer_ok(peer: dict[str, Any], pns: str) -> bool:
        if "ipBlock" in peer:
            b = peer["ipBlock"]
            if ip not in ipaddress.ip_network(b["cidr"], strict=False):
                return False
            return not any(ip in ipaddress.ip_network(e) for e in b.get("except", []))
        for p in owners:
            ns = p["metadata"]["namespace"]
            if "namespaceSelector" in peer:
                if not _sel(peer["namespaceSelector"], _ns_labels(nss, ns)):
                    continue
            elif ns != pns:
                continue
            if "podSelector" in peer and not _sel(
                peer["podSelector"], p["metadata"].get("labels", {})
            ):
                continue
            return True
        return False

    def port_ok(spec: dict[str, Any]) -> bool:
        if spec.get("protocol", "TCP") != proto:
            return False
        p = spec.get("port")
        if p is None:
            return True
        if isinstance(p, int):
            return bool(p <= port <= spec.get("endPort", p))
        if dest is None:
            return False
        return any(
            cp.get("name") == p
            and cp.get("protocol", "TCP") == proto
            and cp["containerPort"] == port
            for c in dest["spec"]["containers"]
            for cp in c.get("ports", [])
        )

    key = "from" if direction == "ingress" else "to"
    for pol in selecting:
        pns = pol["metadata"]["namespace"]
        for rule in pol["spec"].get(direction) or []:
            peers, ports = rule.get(key) or [], rule.get("ports") or []
            if peers and not any(peer_ok(pe, pns) for pe in peers):
                continue
            if ports and not any(port_ok(ps) for ps in ports):
                continue
            return True
    return False


pods_st = st.lists(
    st.tuples(st.sampled_from(["ns-a", "ns-b"]), labels_st, st.booleans(), container_ports_st),
    min_size=1,
    max_size=5,
).map(lambda ps: [numbered_pod(i, *p) for i, p in enumerate(ps)])
policies_st = st.lists(
    st.tuples(
        st.sampled_from(["ns-a", "ns-b"]),
        st.sampled_from(["net", "ns-a/net", "other"]),
        policy_spec_st,
    ),
    max_size=3,
).map(
    lambda ps: [
        {
            "metadata": {
                "namespace": ns,
                "name": f"pol{i}",
                "uid": f"uid-{i}",
                "annotations": {POLICY_FOR: pf},
            },
            "spec": spec,
        }
        for i, (ns, pf, spec) in enumerate(ps)
    ]
)
PEERS = [f"10.0.0.{i}" for i in (1, 2, 3, 4, 5, 6, 9, 20)] + [
    "fd00::1",
    "fd00::2",
    "fd00::9",
    "192.168.1.1",
    "2001:db8::1",
]


_SHARED_VIEWS = ViewCache()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pods=pods_st,
    ns_labels=st.tuples(labels_st, labels_st),
    policies=policies_st,
    queries=st.lists(
        st.tuples(
            st.sampled_from(["ingress", "egress"]),
            st.sampled_from(PEERS),
            st.sampled_from(["TCP", "UDP", "SCTP"]),
            st.sampled_from([53, 80, 443, 1000, 1005, 1500, 8080]),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_compiled_rules_match_direct_evaluation(
    pods: list[KubeObject],
    ns_labels: tuple[dict[str, str], dict[str, str]],
    policies: list[KubeObject],
    queries: list[tuple[str, str, str, int]],
) -> None:
    nss: list[KubeObject] = [
        {"metadata": {"name": "ns-a", "labels": ns_labels[0]}},
        {"metadata": {"name": "ns-b", "labels": ns_labels[1]}},
    ]
    parsed: list[Policy] = [parse_policy(p) for p in policies]
    target = pods[0]
    rules = compile_pod(target, nss, pods, parsed)
    assert "eth0" not in rules
    # A cache shared by every example (pods of the same name, other content) changes nothing.
    assert compile_pods([target], nss, pods, parsed, cache=_SHARED_VIEWS)[pod_key(target)] == rules
    for direction, peer, proto, port in queries:
        expected = evaluate(target, pods, nss, policies, direction, peer, proto, port)
        got = allows(rules.get("net1"), direction, peer, proto, port)  # type: ignore[arg-type]
        assert got == expected, (direction, peer, proto, port, rules)


def _policy(ns: str, spec: dict[str, Any], pf: str = "net") -> Policy:
    meta = {"namespace": ns, "name": "p", "uid": "u1", "annotations": {POLICY_FOR: pf}}
    return parse_policy({"metadata": meta, "spec": spec})  # type: ignore[typeddict-item]


def test_unselected_pod_and_ungoverned_interface_are_untouched() -> None:
    pod = numbered_pod(0, "ns-a", {"app": "x"}, False, [])
    other_net = _policy("ns-a", {"podSelector": {}}, pf="other")
    other_pod = _policy("ns-a", {"podSelector": {"matchLabels": {"app": "y"}}})
    assert compile_pod(pod, [], [pod], [other_net, other_pod]) == {}
    governed = compile_pod(pod, [], [pod], [_policy("ns-a", {"podSelector": {}})])
    assert set(governed) == {"net1"}
    assert governed["net1"].egress is None
    assert not allows(governed["net1"], "ingress", "10.0.0.1", "TCP", 80)
    assert allows(governed["net1"], "egress", "10.0.0.1", "TCP", 80)


def test_empty_rule_allows_all() -> None:
    pod = numbered_pod(0, "ns-a", {}, False, [])
    rules = compile_pod(pod, [], [pod], [_policy("ns-a", {"podSelector": {}, "ingress": [{}]})])
    assert allows(rules["net1"], "ingress", "2001:db8::1", "SCTP", 9)


def test_named_egress_port_resolves_per_destination_pod() -> None:
    a = numbered_pod(0, "ns-a", {}, False, [])
    b = numbered_pod(1, "ns-a", {}, False, [{"name": "http", "containerPort": 8080}])
    c = numbered_pod(2, "ns-a", {}, False, [{"name": "http", "containerPort": 80}])
    spec = {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": "http"}]}]}
    rules = compile_pod(a, [], [a, b, c], [_policy("ns-a", spec)])["net1"]
    assert allows(rules, "egress", "10.0.0.2", "TCP", 8080)
    assert not allows(rules, "egress", "10.0.0.2", "TCP", 80)
    assert allows(rules, "egress", "10.0.0.3", "TCP", 80)
    assert not allows(rules, "egress", "192.168.0.1", "TCP", 80)
