"""What the policy compiler's tests share: the network they govern, hypothesis strategies of
labels, selectors, peers, ports, policy specs, pods and policies of a random cluster, and the pods
they compile for."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from netattach.cluster.model import KubeObject
from netattach.policy.model import Policy, parse_policy
from tests import builders

NET = "ns-a/net"
STATUS = builders.STATUS_ANNOTATION
POLICY_FOR = builders.POLICY_FOR_ANNOTATION


keys = st.sampled_from(["app", "tier"])
vals = st.sampled_from(["x", "y"])
labels_st = st.dictionaries(keys, vals, max_size=2)
expr_st = st.one_of(
    st.fixed_dictionaries(
        {
            "key": keys,
            "operator": st.sampled_from(["In", "NotIn"]),
            "values": st.lists(vals, min_size=1, max_size=2, unique=True),
        }
    ),
    st.fixed_dictionaries({"key": keys, "operator": st.sampled_from(["Exists", "DoesNotExist"])}),
)
selector_st = st.fixed_dictionaries(
    {},
    optional={
        "matchLabels": st.dictionaries(keys, vals, max_size=1),
        "matchExpressions": st.lists(expr_st, max_size=2),
    },
)
BLOCKS = {
    "10.0.0.0/28": ["10.0.0.0/30", "10.0.0.4/31", "10.0.0.8/29", "10.0.0.2/32"],
    "fd00::/124": ["fd00::/126", "fd00::4/127", "fd00::8/125"],
    "0.0.0.0/0": ["10.0.0.0/29", "10.0.0.5/32"],
}
ipblock_st = st.sampled_from(sorted(BLOCKS)).flatmap(
    lambda c: st.fixed_dictionaries(
        {"cidr": st.just(c)},
        optional={"except": st.lists(st.sampled_from(BLOCKS[c]), max_size=3, unique=True)},
    )
)
peer_st = st.one_of(
    st.fixed_dictionaries({"ipBlock": ipblock_st}),
    st.fixed_dictionaries({"podSelector": selector_st}),
    st.fixed_dictionaries({"namespaceSelector": selector_st}),
    st.fixed_dictionaries({"podSelector": selector_st, "namespaceSelector": selector_st}),
)
port_st = st.one_of(
    st.fixed_dictionaries({}, optional={"protocol": st.sampled_from(["TCP", "UDP", "SCTP"])}),
    st.fixed_dictionaries(
        {"port": st.sampled_from(["http", "dns"])},
        optional={"protocol": st.sampled_from(["TCP", "UDP"])},
    ),
    st.tuples(
        st.sampled_from([53, 80, 1000]), st.sampled_from([None, 0, 5, 500]), st.booleans()
    ).map(
        lambda t: {
            "port": t[0],
            "protocol": "UDP" if t[2] else "TCP",
            **({} if t[1] is None else {"endPort": t[0] + t[1]}),
        }
    ),
)


def rule_st(key: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            key: st.lists(peer_st, max_size=3),
            "ports": st.lists(port_st, max_size=3),
        },
    )


policy_spec_st = st.fixed_dictionaries(
    {"podSelector": selector_st},
    optional={
        "policyTypes": st.lists(st.sampled_from(["Ingress", "Egress"]), max_size=2, unique=True),
        "ingress": st.lists(rule_st("from"), max_size=3),
        "egress": st.lists(rule_st("to"), max_size=3),
    },
)
container_ports_st = st.lists(
    st.tuples(st.sampled_from(["http", "dns"]), st.sampled_from([53, 80, 8080]), st.booleans()).map(
        lambda t: {"name": t[0], "containerPort": t[1], "protocol": "UDP" if t[2] else "TCP"}
    ),
    max_size=2,
)


def numbered_pod(
    i: int, ns: str, labels: dict[str, str], v6: bool = True, ports: Any = ()
) -> KubeObject:
    """The pod `pod<i>` in `ns` on NET at 10.0.0.<i+1> (and fd00::<i+1> when `v6`)."""
    return builders.addressed_pod(f"pod{i}", ns, labels, i + 1, v6=v6, ports=ports, network=NET)


def policy(name: str, spec: dict[str, Any], ns: str = "ns-a", pf: str = "net") -> KubeObject:
    """The MultiNetworkPolicy `ns/name` for the networks `pf` names."""
    return builders.policy(name, spec, namespace=ns, policy_for=pf)


NAMESPACES: list[KubeObject] = [
    {"metadata": {"name": "ns-a", "labels": {"team": "a"}}},
    {"metadata": {"name": "ns-b", "labels": {"team": "b"}}},
]
# The pod the golden policies govern: a database taking connections on its port `pg`.
TARGET = numbered_pod(0, "ns-a", {"app": "db"}, ports=[{"name": "pg", "containerPort": 5432}])


# -- a random cluster's pods and policies (the incremental and the span tests) --

NAMESPACE_NAMES = ("ns-a", "ns-b", "ns-c")
POD_NAMES = tuple(f"pod{i}" for i in range(5))
# Weighted towards the namespace whose policies govern NET, so changes meet selections.
SOME_NAMESPACE = st.sampled_from(("ns-a", "ns-a", "ns-a", "ns-b", "ns-c"))


def make_pod(
    ns: str, name: str, labels: dict[str, str], addr: int, v6: bool, ports: Any
) -> KubeObject:
    return builders.addressed_pod(name, ns, labels, addr, v6=v6, ports=ports, network=NET)


def make_policy(index: int, ns: str, pf: str, spec: dict[str, Any]) -> Policy:
    return parse_policy(
        {
            "metadata": {
                "namespace": ns,
                "name": f"pol{index}",
                "uid": f"uid-{index}",
                "annotations": {POLICY_FOR: pf},
            },
            "spec": spec,
        }
    )


pod_st = st.builds(
    make_pod,
    SOME_NAMESPACE,
    st.sampled_from(POD_NAMES),
    labels_st,
    st.integers(1, 12),  # shared addresses and adjacent ones included
    st.booleans(),
    container_ports_st,
)
# Policies with rules more often than not, so that targets have peers that change under them.
spec_st = st.one_of(
    policy_spec_st,
    st.fixed_dictionaries(
        {"podSelector": selector_st, "ingress": st.lists(rule_st("from"), min_size=1, max_size=3)}
    ),
    st.fixed_dictionaries(
        {
            "podSelector": selector_st,
            "policyTypes": st.just(["Egress"]),
            "egress": st.lists(rule_st("to"), min_size=1, max_size=3),
        }
    ),
)
policy_st = st.builds(
    make_policy,
    st.integers(0, 3),
    SOME_NAMESPACE,
    st.sampled_from(["net", "ns-a/net"]),
    spec_st,
)
