"""The node-safe defaults at admission (SEC-NODE, SEC-ADMISSION): the CEL of
`guard/admission_node.py`, evaluated as the API server does (tests/unit/test_admission_policy.py's
evaluator), refuses whatever the daemon's per-config check refuses of passthru masters, gateway
bridges and reserved ranges, refuses the corpus's SEC-NODE attacks under deploy/'s policy, and
admits the plain uses."""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.guard import admission, admission_node, check, delegate_policy, node_rules
from tests import attack_corpus
from tests.unit.admission_fixtures import CompiledPolicy, nad, policy_of

pytestmark = pytest.mark.req("SEC-NODE", "SEC-ADMISSION")

# The corpus's attacks on the node's interfaces, addresses and ports that a NAD alone carries.
NODE_ATTACKS = [
    "macvlan-passthru",
    "macvlan-passthru-master",
    "bridge-isGateway-node-gateway",
    "bridge-ipMasq",
    "ptp-static-metadata-address",
    "portmap",
]
CORPUS = CompiledPolicy(admission.build_policy(attack_corpus.corpus_policy())[0])


def labels_of(attack: attack_corpus.Attack) -> dict[str, str]:
    return dict(attack.labels)


@pytest.mark.parametrize("name", NODE_ATTACKS)
def test_the_corpus_policy_refuses_the_node_attacks_at_admission(name: str) -> None:
    attack = next(a for a in attack_corpus.ATTACKS if a.name == name)
    text = attack_corpus.config_text(attack)

    messages = CORPUS.messages(nad("blue", text), labels_of(attack))

    assert messages, name
    # And the daemon, on the config alone (the node's facts aside).
    rules = attack_corpus.corpus_policy().rules_for("blue", labels_of(attack))
    assert check.check_config(json.loads(text), rules), name


@pytest.mark.parametrize("attack", attack_corpus.ALLOWED, ids=lambda a: a.name)
def test_the_corpus_policy_admits_the_plain_uses(attack: attack_corpus.Attack) -> None:
    text = attack_corpus.config_text(attack)
    assert CORPUS.messages(nad("blue", text), labels_of(attack)) == []


def test_the_messages_name_the_rule() -> None:
    compiled = CompiledPolicy(admission.build_policy(policy_of({}))[0])
    passthru = json.dumps({"type": "macvlan", "master": "eth0", "mode": "passthru"})
    (message,) = compiled.messages(nad("blue", passthru), {})
    assert message == (
        'NetworkAttachmentDefinition blue/net-a: master taken whole (mode passthru) "master": '
        '"eth0" is not allowed by delegatePolicy.passthruMaster []'
    )
    gateway = json.dumps({"type": "bridge", "bridge": "br1", "isGateway": True})
    (message,) = compiled.messages(nad("blue", gateway), {})
    assert message.endswith('"bridge": "br1" is not allowed by delegatePolicy.gatewayBridge []')
    metadata = json.dumps(
        {
            "type": "ptp",
            "ipam": {"type": "static", "addresses": [{"address": "169.254.169.254/32"}]},
        }
    )
    (message,) = compiled.messages(nad("blue", metadata), {})
    assert message == (
        'NetworkAttachmentDefinition blue/net-a: address in a reserved range "address": '
        '"169.254.169.254/32" is not allowed by delegatePolicy.reservedRanges '
        "[node, 169.254.169.254/32, fd00:ec2::254/128]"
    )


# --- admission is at least as strict as the daemon's per-config check ---------------------------

NAMES = st.sampled_from(["eth0", "eth1", "na-x", "cni0", "br-1", ""])
LISTS = st.sampled_from([[], ["*"], ["eth1", "na-*"], ["*", "!cni0"], ["br-?", "cni0"]])
RANGES = st.sampled_from(
    [[], ["node"], ["10.96.0.0/12"], ["node", "10.96.0.0/12", "169.254.169.254/32"], ["10.0.0.0/9"]]
)
ADDRESSES = st.sampled_from(
    [
        "10.1.0.5",
        "10.96.3.4",
        "10.111.255.1",
        "10.112.0.1",
        "127.0.0.2",
        "169.254.169.254",
        "224.1.1.1",
        "10.127.0.9",
        "192.0.2.3",
    ]
)


@st.composite
def node_plugins(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["macvlan", "bridge", "ptp", "tuning", "ipvlan"]))
    plugin: dict[str, Any] = {"type": kind}
    if kind in ("macvlan", "ipvlan") and draw(st.booleans()):
        plugin["master"] = draw(NAMES)
    if kind == "macvlan" and draw(st.booleans()):
        plugin["mode"] = draw(st.sampled_from(["passthru", "bridge", "vepa"]))
    if kind == "bridge" and draw(st.booleans()):
        plugin["bridge"] = draw(NAMES)
    if kind in ("bridge", "ptp"):
        for flag in node_rules.GATEWAY_FLAGS:
            if draw(st.integers(0, 3)) == 0:
                plugin[flag] = draw(st.booleans())
    if kind in ("macvlan", "bridge", "ptp", "ipvlan") and draw(st.booleans()):
        address = draw(ADDRESSES)
        if draw(st.booleans()):
            plugin["ipam"] = {"type": "static", "addresses": [{"address": f"{address}/24"}]}
            if draw(st.booleans()):
                plugin["ipam"]["routes"] = [{"dst": f"{draw(ADDRESSES)}/32"}]
        else:
            plugin["ipam"] = {"type": "host-local", "subnet": f"{address}/30"}
    return plugin


@functools.cache
def compiled_for(
    passthru: tuple[str, ...], gateway: tuple[str, ...], reserved: tuple[str, ...]
) -> tuple[delegate_policy.DelegatePolicy, CompiledPolicy]:
    raw = {
        "types": ["*"],
        "passthruMaster": list(passthru),
        "gatewayBridge": list(gateway),
        "reservedRanges": list(reserved),
    }
    policy = policy_of(raw)
    return policy, CompiledPolicy(admission.build_policy(policy)[0])


@settings(max_examples=300, deadline=None)
@given(
    chain=st.lists(node_plugins(), min_size=1, max_size=3),
    passthru=LISTS,
    gateway=LISTS,
    reserved=RANGES,
    compact=st.booleans(),
)
def test_admission_refuses_whatever_the_daemon_refuses_of_the_node_rules(
    chain: list[dict[str, Any]],
    passthru: list[str],
    gateway: list[str],
    reserved: list[str],
    compact: bool,
) -> None:
    policy, compiled = compiled_for(tuple(passthru), tuple(gateway), tuple(reserved))
    config = {"cniVersion": "1.0.0", "name": "net-a", "plugins": chain}
    text = json.dumps(config, separators=(",", ":") if compact else None)

    refused_at_add = check.check_config(config, policy.rules)
    messages = compiled.messages(nad("blue", text), {})

    if refused_at_add:
        assert messages, (refused_at_add, config)
    if not any(k in text for k in ("passthru", "Gateway", "ipMasq", "address", "subnet")):
        assert messages == [], config  # nothing of the node's is asked: nothing refused


# The passthru master of each macvlan is its own: another plugin's master does not stand for it
# (the daemon reads one object at a time), however the text between them is written.
PASSTHRU_WITHOUT_ITS_MASTER = [
    pytest.param(
        [{"type": "macvlan", "mode": "passthru"}, {"type": "macvlan", "master": "eth0"}],
        id="master-of-the-next-plugin",
    ),
    pytest.param(
        [{"type": "macvlan", "master": "eth0"}, {"type": "macvlan", "mode": "passthru"}],
        id="master-of-the-previous-plugin",
    ),
    pytest.param(
        [{"type": "macvlan", "mode": "passthru", "ipam": {"type": "static", "master": "eth0"}}],
        id="master-in-a-nested-object",
    ),
    pytest.param(
        [
            {"type": "macvlan", "mode": "passthru", "x": "{"},
            {"type": "macvlan", "y": "}", "master": "eth0"},
        ],
        id="braces-in-strings",
    ),
    pytest.param(
        [{"type": "macvlan", "mode": "passthru", "master": ""}, {"type": "ipvlan", "master": "x"}],
        id="empty-master",
    ),
]


@pytest.mark.parametrize("chain", PASSTHRU_WITHOUT_ITS_MASTER)
@pytest.mark.parametrize("compact", [True, False])
def test_a_passthru_without_its_own_master_is_refused_unless_any_master_is_allowed(
    chain: list[dict[str, Any]], compact: bool
) -> None:
    config = {"cniVersion": "1.0.0", "name": "net-a", "plugins": chain}
    text = json.dumps(config, separators=(",", ":") if compact else None)
    for passthru, refused in ((("*", "!cni0"), True), (("eth0", "x"), True), (("*",), False)):
        policy, compiled = compiled_for(passthru, (), ())

        messages = compiled.messages(nad("blue", text), {})

        assert bool(check.check_config(config, policy.rules)) is refused, passthru
        assert bool(messages) is refused, (passthru, messages)


def test_a_passthru_with_its_own_master_beside_nested_objects_is_admitted() -> None:
    ipam = {
        "type": "host-local",
        "ranges": [[{"subnet": "10.1.0.0/24"}]],
        "routes": [{"dst": "10.2.0.0/16"}],
    }
    chain = [
        {"type": "macvlan", "mode": "passthru", "ipam": ipam, "master": "eth1"},
        {"type": "macvlan", "master": "eth1", "ipam": ipam, "mode": "passthru"},
        {"type": "tuning", "sysctl": {"net.ipv4.conf.all.arp_notify": "1"}},
    ]
    config = {"cniVersion": "1.0.0", "name": "net-a", "plugins": chain}
    policy, compiled = compiled_for(("eth1",), (), ())
    assert check.check_config(config, policy.rules) == []
    for text in (json.dumps(config), json.dumps(config, indent=2)):
        assert compiled.messages(nad("blue", text), {}) == []


# --- addresses as text -------------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(
    network=st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 32)),
    address=st.integers(0, 2**32 - 1),
)
def test_the_ipv4_regex_takes_exactly_the_addresses_of_its_range(
    network: tuple[int, int], address: int
) -> None:
    cidr = ipaddress.ip_network((network[0], network[1]), strict=False)
    regex = admission_node.ipv4_regex(str(cidr))
    assert regex is not None
    for candidate in (ipaddress.ip_address(address), cidr.network_address, cidr[-1]):
        assert (re.fullmatch(regex, str(candidate)) is not None) == (candidate in cidr)


def test_an_ipv6_range_is_left_to_the_daemon() -> None:
    assert admission_node.ipv4_regex("fd00:ec2::254/128") is None
    assert delegate_policy.DEFAULT_RESERVED_RANGES[-1] == "fd00:ec2::254/128"
