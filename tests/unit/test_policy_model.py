"""MultiNetworkPolicy parsing and validation."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.cluster.model import KubeObject
from netattach.cni import errors
from netattach.policy.model import (
    LabelSelector,
    Requirement,
    collapse,
    parse_policies,
    parse_policy,
    parse_policy_for,
    subtract,
)


def _policy(spec: dict[str, object], policy_for: str = "net-a", name: str = "p") -> KubeObject:
    return {
        "apiVersion": "k8s.cni.cncf.io/v1beta1",
        "kind": "MultiNetworkPolicy",
        "metadata": {
            "namespace": "ns1",
            "name": name,
            "uid": "uid-1",
            "annotations": {"k8s.v1.cni.cncf.io/policy-for": policy_for},
        },
        "spec": spec,
    }


def test_parse_full_policy() -> None:
    pol = parse_policy(
        _policy(
            {
                "podSelector": {"matchLabels": {"app": "db"}},
                "ingress": [
                    {
                        "from": [
                            {"podSelector": {}, "namespaceSelector": {"matchLabels": {"t": "x"}}},
                            {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
                        ],
                        "ports": [{"port": "http"}, {"protocol": "UDP", "port": 5, "endPort": 9}],
                    }
                ],
                "egress": [{}],
            },
            policy_for="net-a, other/net-b",
        )
    )
    assert pol.networks == ("ns1/net-a", "other/net-b")
    assert pol.policy_types == ("ingress", "egress")
    assert pol.ingress[0].ports[1].end_port == 9
    assert pol.egress[0].peers == ()


def test_policy_types_default_to_ingress_only() -> None:
    assert parse_policy(_policy({"podSelector": {}})).policy_types == ("ingress",)


def test_every_problem_is_reported_at_once() -> None:
    obj = _policy(
        {
            "podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]},
            "policyTypes": ["Sideways"],
            "ingress": [
                {
                    "from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}],
                    "ports": [{"protocol": "ICMP", "port": 70000}, {"port": "x", "endPort": 3}],
                }
            ],
        },
        policy_for="a/b/c",
    )
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        parse_policy(obj)
    text = str(info.value)
    assert "ns1/p" in text
    for quoted in ("'Near'", "'Sideways'", "'10.0.0.0/33'", "'ICMP'", "70000", "'a/b/c'", "3"):
        assert quoted in text


def test_except_outside_cidr_is_invalid() -> None:
    obj = _policy(
        {
            "podSelector": {},
            "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["fd00::/8"]}}]}],
        }
    )
    with pytest.raises(errors.InvalidNetworkConfigError, match="fd00::/8"):
        parse_policy(obj)


def test_invalid_policies_are_skipped_not_fatal() -> None:
    good = _policy({"podSelector": {}}, name="good")
    bad = _policy({"podSelector": {}, "policyTypes": ["Nope"]}, name="bad")
    policies, problems = parse_policies([bad, good])
    assert [p.name for p in policies] == ["good"]
    assert len(problems) == 1
    assert "ns1/bad" in str(problems[0])


def test_policy_for_forms() -> None:
    assert parse_policy_for("b, x/a ,a", "ns") == ("ns/a", "ns/b", "x/a")
    with pytest.raises(errors.InvalidNetworkConfigError, match="'Bad Name'"):
        parse_policy_for("ok,Bad Name", "ns")


def test_selector_operators() -> None:
    sel = LabelSelector(
        (("app", "web"),),
        (
            Requirement("tier", "In", ("a", "b")),
            Requirement("env", "NotIn", ("prod",)),
            Requirement("team", "Exists"),
            Requirement("legacy", "DoesNotExist"),
        ),
    )
    assert sel.matches({"app": "web", "tier": "a", "team": "x"})
    assert not sel.matches({"app": "web", "tier": "c", "team": "x"})
    assert not sel.matches({"app": "web", "tier": "a", "team": "x", "env": "prod"})
    assert not sel.matches({"app": "web", "tier": "a"})
    assert not sel.matches({"app": "web", "tier": "a", "team": "x", "legacy": ""})
    assert LabelSelector().matches({})


def test_subtract_several_excepts_both_families() -> None:
    net = ipaddress.ip_network
    v4 = subtract(net("10.0.0.0/24"), [net("10.0.0.0/26"), net("10.0.0.128/25")])
    assert v4 == (net("10.0.0.64/26"),)
    v6 = subtract(net("fd00::/120"), [net("fd00::/121"), net("fd00::80/122"), net("fd00::/122")])
    assert v6 == (net("fd00::c0/122"),)
    assert subtract(net("10.0.0.0/8"), [net("10.0.0.0/8")]) == ()


_V4 = st.builds(
    lambda host, prefix: ipaddress.ip_network(
        f"10.0.{host >> 8}.{host & 255}/{prefix}", strict=False
    ),
    st.integers(0, 1023),
    st.integers(22, 32),
)
_V6 = st.builds(
    lambda host, prefix: ipaddress.ip_network(f"fd00::{host:x}/{prefix}", strict=False),
    st.integers(0, 1023),
    st.integers(118, 128),
)


@pytest.mark.req("POL-IPBLOCK", "POL-COMPACT")
@given(st.lists(st.one_of(_V4, _V6), max_size=16))
def test_collapse_covers_exactly_what_the_standard_library_collapse_covers(
    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network],
) -> None:
    want = (
        *ipaddress.collapse_addresses([n for n in nets if n.version == 4]),
        *ipaddress.collapse_addresses([n for n in nets if n.version == 6]),
    )
    assert collapse(nets) == want
    assert collapse(iter(nets)) == want  # a one-pass iterable too
