"""Node-safe defaults (SEC-NODE) as pure code: each rule of `guard/node_rules.py` on its own
config, the node's facts and the live attachments of `pods/node_guard.py`, the settings that
write them, and the orchestrator refusing before any plugin runs (fake plugins, no root)."""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path
from typing import Any

import pytest

from netattach.cni import conf
from netattach.guard import delegate_policy, node_rules, node_state
from netattach.netns.host import Link
from netattach.pods import delegate_guard, node_guard, plan, records
from netattach.settings import settings
from tests import builders
from tests.builders import call, nad, orchestrated, pod, view_of
from tests.unit.delegate_checks import refusals, rules
from tests.unit.orchestrator_harness import refused_add

pytestmark = pytest.mark.req("SEC-NODE")


def ipam_bridge(ipam: dict[str, Any], **bridge: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "type": "bridge", "bridge": "na-br", **bridge, "ipam": ipam}


# --- passthru ----------------------------------------------------------------------------------


def test_macvlan_passthru_needs_its_master_in_passthru_master() -> None:
    config = {"type": "macvlan", "master": "eth0", "mode": "passthru"}
    assert refusals(config) == [
        'master "eth0" is taken whole (mode passthru), which is not allowed by '
        "delegatePolicy.passthruMaster []"
    ]
    assert refusals(config, passthruMaster=["eth*", "!eth0"]) != []
    assert refusals(config, passthruMaster=["eth0"]) == []
    # The other modes share the master: the plain use needs no grant.
    assert refusals({**config, "mode": "bridge"}) == []


def test_passthru_without_a_master_is_the_default_route_interface() -> None:
    for master in ({}, {"master": ""}):
        config = {"type": "macvlan", "mode": "passthru", **master}
        (refusal,) = refusals(config, passthruMaster=["eth1"])
        assert refusal.startswith("master unset (the node's default-route interface) is taken")
        assert refusals(config, passthruMaster=["*"]) == []


def test_passthru_is_found_at_any_depth() -> None:
    meta = {
        "type": "na-meta",
        "delegates": [{"type": "macvlan", "master": "e", "mode": "passthru"}],
    }
    (refusal,) = refusals(meta, types=["*"])
    assert refusal.startswith('delegates[0].master "e" is taken whole')


# --- isGateway, isDefaultGateway, ipMasq -------------------------------------------------------


@pytest.mark.parametrize("flag", node_rules.GATEWAY_FLAGS)
def test_a_gateway_flag_needs_a_granted_bridge(flag: str) -> None:
    config = ipam_bridge({"type": "host-local", "subnet": "10.9.0.0/24"}, **{flag: True})
    assert refusals(config) == [
        f'{flag} true on bridge "na-br" is not allowed by delegatePolicy.gatewayBridge []'
    ]
    assert refusals(config, gatewayBridge=["na-*"]) == []
    assert refusals({**config, flag: False}) == []


def test_a_gateway_flag_on_the_default_bridge_is_checked_as_cni0() -> None:
    config = {"type": "bridge", "isGateway": True}
    assert refusals(config, gatewayBridge=["*", "!cni0"]) == [
        'isGateway true on bridge "cni0" is not allowed by delegatePolicy.gatewayBridge [*, !cni0]'
    ]


def test_ip_masq_outside_a_bridge_needs_a_list_that_allows_anything() -> None:
    ptp = {"type": "ptp", "ipMasq": True}
    (refusal,) = refusals(ptp, gatewayBridge=["na-*"])
    assert refusal.startswith("ipMasq true outside a bridge plugin is allowed only by a list")
    assert refusals(ptp, gatewayBridge=["*"]) == []


def test_a_gateway_flag_that_is_no_boolean_is_refused() -> None:
    (refusal,) = refusals({"type": "bridge", "isGateway": "yes"}, gatewayBridge=["*"])
    assert refusal.startswith('isGateway "yes" is not true or false')


# --- reserved ranges ---------------------------------------------------------------------------

SERVICES = "10.96.0.0/12"


def test_a_static_address_in_a_reserved_range_is_refused() -> None:
    ipam = {"type": "static", "addresses": [{"address": "10.96.0.10/24"}]}
    config = ipam_bridge(ipam)
    assert refusals(config, reservedRanges=["node", SERVICES]) == [
        'ipam.addresses[0].address "10.96.0.10/24" lies in 10.96.0.0/12, reserved by '
        "delegatePolicy.reservedRanges [node, 10.96.0.0/12]"
    ]
    # A namespace granted the range (its list without it) may.
    assert refusals(config, reservedRanges=["node"]) == []


def test_a_range_that_hands_out_a_reserved_address_is_refused_one_beside_is_not() -> None:
    ranges = [[{"subnet": "10.0.0.0/8", "rangeStart": "10.200.0.1", "rangeEnd": "10.200.0.9"}]]
    beside = ipam_bridge({"type": "host-local", "ranges": ranges})
    assert refusals(beside, reservedRanges=[SERVICES]) == []
    over = ipam_bridge({"type": "host-local", "subnet": "10.100.0.0/9"})
    (refusal,) = refusals(over, reservedRanges=[SERVICES])
    assert refusal.startswith(
        'ipam.subnet "10.100.0.0/9" (span 10.0.0.1-10.127.255.254) overlaps 10.96.0.0/12'
    )


def test_a_route_inside_a_reserved_range_is_refused_a_broader_one_is_not() -> None:
    def routed(dst: str) -> dict[str, Any]:
        return ipam_bridge({"type": "static", "addresses": [], "routes": [{"dst": dst}]})

    (refusal,) = refusals(routed("10.96.0.0/16"), reservedRanges=[SERVICES])
    assert refusal.startswith('ipam.routes[0].dst "10.96.0.0/16" lies in 10.96.0.0/12')
    assert refusals(routed("0.0.0.0/0"), reservedRanges=[SERVICES]) == []
    assert refusals(routed("10.0.0.0/8"), reservedRanges=[SERVICES]) == []


def test_the_metadata_address_is_reserved_by_default() -> None:
    config = {
        "type": "ptp",
        "ipam": {
            "type": "static",
            "addresses": [{"address": "10.2.0.5/24", "gateway": "169.254.169.254"}],
        },
    }
    (refusal,) = refusals(config)
    assert refusal.startswith(
        'ipam.addresses[0].gateway "169.254.169.254" lies in 169.254.169.254/32'
    )


def test_an_ips_request_is_a_claim_too() -> None:
    config = ipam_bridge({"type": "host-local", "subnet": "10.9.0.0/24"})
    config["args"] = {"cni": {"ips": ["10.96.0.1/24"]}}
    (refusal,) = refusals(config, reservedRanges=[SERVICES])
    assert refusal.startswith('args.cni.ips[0] "10.96.0.1/24" lies in 10.96.0.0/12')


def test_loopback_multicast_and_unspecified_are_never_handed_out() -> None:
    for address in ("127.0.0.2/8", "224.0.0.5/24", "0.0.0.0/24", "::1/128"):
        config = ipam_bridge({"type": "static", "addresses": [{"address": address}]})
        assert any("which no list can grant" in r for r in refusals(config, reservedRanges=[]))
    # A range is judged whole, not by its ends.
    wide = ipam_bridge({"type": "host-local", "subnet": "126.0.0.0/7"})
    (refusal,) = refusals(wide, reservedRanges=[])
    assert "(span 126.0.0.1-127.255.255.254) holds a loopback address" in refusal


def test_an_address_that_is_no_address_is_refused() -> None:
    for ipam in (
        {"type": "static", "addresses": [{"address": "10.1.0.500/24"}]},
        {"type": "host-local", "subnet": "10.1.0.0/33"},
        {"type": "host-local", "subnet": "10.1.0.0/24", "rangeStart": 5},
        {"type": "host-local", "subnet": "10.1.0.0/24", "rangeEnd": "10.2.0.9"},
    ):
        (refusal,) = refusals(ipam_bridge(ipam))
        assert "is not a" in refusal, refusal


def test_the_settings_check_reserved_ranges() -> None:
    raw = {
        "clusterNetwork": "x",
        "feed": {"directory": "/m"},
        "delegatePolicy": {
            "reservedRanges": ["node", "10.96.0.1/12", "banana", 7],
            "passthruMaster": "eth0",
        },
    }
    assert settings.settings_problems(raw) == (
        "delegatePolicy.passthruMaster: must be a list of names or globs ('*' any run, '?' one "
        "character, '!' in front excludes), got 'eth0'",
        "delegatePolicy.reservedRanges[2]: must be a CIDR such as 10.96.0.0/12 or 'node', "
        "got 'banana'",
        "delegatePolicy.reservedRanges[3]: must be a CIDR such as 10.96.0.0/12 or 'node', got 7",
    )
    written = rules(reservedRanges=["node", "10.96.0.1/12", "fd00::1"])
    assert written.reserved_ranges == ("node", "10.96.0.0/12", "fd00::1/128")


def test_the_defaults_and_a_namespace_entry_inherit_and_replace() -> None:
    policy = delegate_policy.DelegatePolicy()
    assert policy.rules.passthru_master.entries == ()
    assert policy.rules.gateway_bridge.entries == ()
    assert "portmap" not in delegate_policy.DEFAULT_TYPES
    assert policy.rules.reserved_ranges[0] == delegate_policy.NODE_RANGE
    problems: list[str] = []
    raw = {
        "reservedRanges": ["node", SERVICES],
        "namespaces": [{"namespaceSelector": {}, "gatewayBridge": ["na-*"]}],
    }
    parsed = delegate_policy.parse_policy(raw, "delegatePolicy", problems)
    assert parsed is not None
    entry = parsed.namespaces[0].rules
    assert entry.reserved_ranges == ("node", SERVICES)
    assert entry.gateway_bridge.entries == ("na-*",)


# --- the node's facts and the live attachments -------------------------------------------------


def addr(text: str) -> node_rules.Address:
    return ipaddress.ip_address(text)


FACTS = node_state.NodeFacts(
    addresses=(
        ("eth0", addr("192.0.2.2")),
        ("na-br", addr("10.9.0.1")),
        ("veth1", addr("10.8.0.1")),
    ),
    gateways=(addr("192.0.2.1"),),
)
LIVE = node_state.LiveAttachments(
    addresses={addr("10.9.0.7"): "red/net-a of pod red/db"}, host_interfaces=frozenset({"veth1"})
)


def node_refusals(config: dict[str, Any], live: node_state.LiveAttachments = LIVE) -> list[str]:
    claims, _ = node_rules.claims(config)
    return [str(r) for r in node_guard.refusals(claims, rules(), FACTS, live)]


def static(address: str, **more: Any) -> dict[str, Any]:
    return {"type": "static", "addresses": [{"address": address, **more}]}


def test_a_pod_address_that_is_the_nodes_or_its_gateway_is_refused() -> None:
    (own,) = node_refusals({"type": "macvlan", "master": "eth0", "ipam": static("192.0.2.2/24")})
    assert own.startswith('ipam.addresses[0].address "192.0.2.2/24" is the node\'s own address')
    assert "(on eth0), reserved by delegatePolicy.reservedRanges [node," in own
    (gateway,) = node_refusals({"type": "macvlan", "ipam": static("192.0.2.1/24")})
    assert "is the node's default gateway 192.0.2.1" in gateway
    # In the node's LAN, with the node's gateway as the pod's: the plain macvlan use.
    fine = {"type": "macvlan", "ipam": static("192.0.2.50/24", gateway="192.0.2.1")}
    assert node_refusals(fine) == []


def test_a_range_that_hands_out_the_nodes_address_is_refused() -> None:
    ipam = {"type": "host-local", "subnet": "192.0.2.0/24"}
    (refusal,) = node_refusals({"type": "macvlan", "ipam": ipam})
    assert "hands out the node's own address 192.0.2.2 (on eth0)" in refusal
    ipam |= {"rangeStart": "192.0.2.100", "rangeEnd": "192.0.2.200", "gateway": "192.0.2.1"}
    # The range's gateway is not handed out.
    assert node_refusals({"type": "macvlan", "ipam": ipam}) == []


def test_ptp_host_side_is_never_the_nodes_address_or_a_live_one() -> None:
    (refusal,) = node_refusals({"type": "ptp", "ipam": static("10.5.0.2/24", gateway="192.0.2.2")})
    assert refusal.startswith('ipam.addresses[0].gateway "192.0.2.2" is the node\'s own address')
    # Another ptp network's gateway on its host veths (a live attachment's) is no conflict.
    assert node_refusals({"type": "ptp", "ipam": static("10.8.0.5/24", gateway="10.8.0.1")}) == []
    (live,) = node_refusals({"type": "ptp", "ipam": static("10.5.0.2/24", gateway="10.9.0.7")})
    assert "is held by the live attachment red/net-a of pod red/db" in live


def test_a_bridge_gateway_on_its_own_bridge_is_no_conflict_elsewhere_it_is() -> None:
    own = ipam_bridge({"type": "host-local", "subnet": "10.9.0.0/24"}, isGateway=True)
    own["ipam"]["rangeStart"] = "10.9.0.100"
    assert node_refusals(own) == []
    other = {**own, "bridge": "na-other"}
    found = node_refusals(other)
    assert found[0].startswith(
        'ipam.gateway unset ("10.9.0.1") is the node\'s own address 10.9.0.1 (on na-br)'
    )
    lan = ipam_bridge(
        {"type": "static", "addresses": [{"address": "192.0.2.77/24"}]}, isGateway=True
    )
    assert any(
        "puts a route on the node over the node's own address 192.0.2.2" in r
        for r in node_refusals(lan)
    )


def test_a_static_claim_of_a_live_address_is_refused() -> None:
    (refusal,) = node_refusals({"type": "ptp", "ipam": static("10.9.0.7/24", gateway="10.9.0.254")})
    assert refusal == (
        'ipam.addresses[0].address "10.9.0.7/24" is held by the live attachment red/net-a of pod '
        "red/db, refused by SEC-NODE (an address is one attachment's)"
    )


def test_without_node_in_reserved_ranges_only_live_attachments_count() -> None:
    claims, _ = node_rules.claims({"type": "macvlan", "ipam": static("192.0.2.2/24")})
    assert node_guard.refusals(claims, rules(reservedRanges=[]), None, LIVE) == []


def test_the_live_attachments_are_read_from_the_records(tmp_path: Path) -> None:
    store_ = records.PodRecords(tmp_path)
    result = {
        "interfaces": [{"name": "na-br"}, {"name": "veth9"}, {"name": "net1", "sandbox": "/x"}],
        "ips": [{"address": "10.9.0.7/24", "gateway": "10.9.0.1"}],
    }
    default_result = {"interfaces": [{"name": "cni0"}], "ips": [{"address": "10.80.0.5/24"}]}
    for container, default in (("c-other", False), ("c-self", False), ("c-def", True)):
        attachment = records.AttachmentRecord(
            status_name="red/net-a" if not default else "cluster-default",
            ifname="net1",
            is_default=default,
            config={},
            capability_args={},
            result=default_result if default else result,
        )
        store_.save(builders.pod_record(container, attachment, namespace="red", pod="db"))

    # A pod whose ADD is still running: no result yet, its config's static address is taken.
    running = records.AttachmentRecord(
        status_name="red/net-s",
        ifname="net1",
        is_default=False,
        config={"type": "ptp", "ipam": static("10.7.0.3/24")},
        capability_args={},
    )
    store_.save(builders.pod_record("c-run", running, namespace="red", pod="job", uid="v"))

    live = node_guard.live_attachments(store_, "c-self")

    assert live.addresses == {
        addr("10.9.0.7"): "red/net-a of pod red/db",
        addr("10.80.0.5"): "cluster-default of pod red/db",
        addr("10.7.0.3"): "red/net-s of pod red/job",
    }
    assert live.host_interfaces == {"na-br", "veth9"}  # of the NADs' attachments only


# --- at ADD ------------------------------------------------------------------------------------


def test_a_nad_on_the_nodes_address_fails_the_add_before_any_plugin_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []

    def read() -> node_state.NodeFacts:
        reads.append(1)
        return FACTS

    monkeypatch.setattr(node_guard, "read_node_facts", read)
    config = {"type": "macvlan", "master": "eth1", "ipam": static("192.0.2.2/24")}
    view = view_of(pod("net-a"), nad("net-a", config))
    orch, sink, plugins = orchestrated(tmp_path, view)

    refused = refused_add(orch)

    assert refused.msg.startswith(
        "[blue/web/u1] NetworkAttachmentDefinition blue/net-a refused by the delegate policy: "
        'plugins[0].ipam.addresses[0].address "192.0.2.2/24" is the node\'s own address 192.0.2.2'
    )
    assert plugins.commands() == []
    assert list(orch.records.container_ids()) == []
    (event,) = sink.events
    assert event[2] == delegate_guard.DelegateRefusedError.event_reason
    # Within the TTL the next ADD reads the node no more.
    with pytest.raises(delegate_guard.DelegateRefusedError):
        asyncio.run(orch.add(call(), {"cniVersion": "1.0.0"}))
    assert reads == [1]


def test_a_config_that_hands_out_nothing_and_names_no_host_link_never_reads_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def read() -> node_state.NodeFacts:
        raise AssertionError("the node read for a config without addresses or host links")

    monkeypatch.setattr(node_guard, "read_node_facts", read)
    # No master: the node's default-route interface, which no list had to judge by name.
    view = view_of(pod("net-a"), nad("net-a", {"type": "macvlan"}))
    orch, _, plugins = orchestrated(tmp_path, view)

    asyncio.run(orch.add(call(), {"cniVersion": "1.0.0"}))

    assert plugins.commands() == [("bridge", "ADD"), ("macvlan", "ADD")]
    assert list(orch.records.container_ids()) == ["c1"]


def planned(status_name: str, config: dict[str, Any]) -> plan.PlannedAttachment:
    network = conf.parse_any({"cniVersion": "1.0.0", "name": "n", **config}, source="test")
    return plan.PlannedAttachment(
        status_name=status_name,
        ifname="net1",
        is_default=False,
        network=network,
        capability_args={},
    )


def test_two_adds_at_once_cannot_both_claim_one_address(tmp_path: Path) -> None:
    """The first ADD's claims count from its check until its record is on disk (the daemon runs
    ADDs side by side)."""
    store_ = records.PodRecords(tmp_path)
    # Forwarding granted: this is about addresses, not about the node's switches.
    policy = delegate_policy.DelegatePolicy(
        rules=rules(reservedRanges=[], nodeChanges=["forwarding"])
    )
    config = {"type": "ptp", "ipam": static("10.5.0.9/24", gateway="10.5.0.254")}
    first, second = [planned("blue/net-a", config)], [planned("red/net-b", config)]
    guard = node_guard.NodeGuard(view=None, records=store_)

    asyncio.run(guard.check_plan(first, policy, "c-first"))
    with pytest.raises(delegate_guard.DelegateRefusedError) as caught:
        asyncio.run(guard.check_plan(second, policy, "c-second"))
    assert "held by the live attachment blue/net-a of container c-first (being added)" in (
        caught.value.msg
    )
    # Its own retry is not refused by its own claim.
    asyncio.run(guard.check_plan(first, policy, "c-first"))

    # Once recorded (before any plugin runs), the record's config holds the address.
    attachment = records.AttachmentRecord(
        status_name="blue/net-a", ifname="net1", is_default=False, config=config, capability_args={}
    )
    store_.save(builders.pod_record("c-first", attachment))
    with pytest.raises(delegate_guard.DelegateRefusedError) as caught:
        asyncio.run(guard.check_plan(second, policy, "c-second"))
    assert "held by the live attachment blue/net-a of pod blue/web" in caught.value.msg


@pytest.mark.req("SEC-VALUES")
def test_a_bridge_another_add_is_making_is_not_judged_half_made(tmp_path: Path) -> None:
    """Twenty pods of one bridge NAD at once: the first one's plugin makes the bridge, and sets
    it up and its accept_ra to 0 one step after another. An ADD that reads the node in between
    (or within `NODE_FACTS_TTL` of it) sees a bridge of the node's taking router adverts. The CI
    run on record refused two of twenty that way (tests/e2e/test_concurrency.py)."""
    half_made = node_state.NodeFacts(
        links=(Link(name="na-br", kind="bridge", mtu=1500, up=False),), accept_ra=(("na-br", "1"),)
    )
    made = node_state.NodeFacts(
        links=(Link(name="na-br", kind="bridge", mtu=1500, up=True),), accept_ra=(("na-br", "0"),)
    )
    reads: list[node_state.NodeFacts] = [half_made]
    store_ = records.PodRecords(tmp_path)
    guard = node_guard.NodeGuard(view=None, records=store_, read=lambda: reads[0])
    policy = delegate_policy.DelegatePolicy(rules=rules(reservedRanges=[]))
    config = {"type": "bridge", "bridge": "na-br", "mtu": 1500}

    # The maker's record is on disk with no result yet: its bridge is not judged.
    making = records.AttachmentRecord(
        status_name="blue/net-a", ifname="net1", is_default=False, config=config, capability_args={}
    )
    store_.save(builders.pod_record("c-maker", making))
    asyncio.run(guard.check_plan([planned("blue/net-a", config)], policy, "c-second"))

    # The maker is done, the facts read in between are still cached: read again, and pass.
    store_.save(builders.pod_record("c-maker", making._replace(result={"cniVersion": "1.0.0"})))
    reads[0] = made
    asyncio.run(guard.check_plan([planned("blue/net-a", config)], policy, "c-third"))

    # A bridge of the node's that nobody is making is judged as it is.
    guard = node_guard.NodeGuard(view=None, records=store_, read=lambda: half_made)
    with pytest.raises(delegate_guard.DelegateRefusedError) as caught:
        asyncio.run(guard.check_plan([planned("blue/net-a", config)], policy, "c-fourth"))
    assert "sets the node's bridge 'na-br' up; it is down" in caught.value.msg
    assert "(and 1 more)" in caught.value.msg  # its accept_ra


def test_an_address_given_back_by_del_is_free_for_the_next_pod(tmp_path: Path) -> None:
    """A pod deleted and made again with its static address (the bench's pods, a StatefulSet's)
    is not refused by the claim of its own finished ADD: an ADD's claims end with it."""
    config = {"type": "macvlan", "master": "eth1", "ipam": static("10.6.0.9/24")}
    view = view_of(pod("net-a"), nad("net-a", config))
    orch, _, plugins = orchestrated(tmp_path, view, policy={"reservedRanges": []})

    asyncio.run(orch.add(call(), {"cniVersion": "1.0.0"}))
    asyncio.run(orch.delete(call()._replace(command="DEL")))
    again = call()._replace(container_id="c2")
    asyncio.run(orch.add(again, {"cniVersion": "1.0.0"}))

    assert plugins.commands().count(("macvlan", "ADD")) == 2
    assert list(orch.records.container_ids()) == ["c2"]


def test_a_range_alone_reads_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host-local range (the common NAD) is judged against the node only: the ADD path reads
    no other pod's record for it."""

    def loaded(*_: object, **__: object) -> node_state.LiveAttachments:
        raise AssertionError("the records were read for a range alone")

    monkeypatch.setattr(node_guard, "live_attachments", loaded)
    guard = node_guard.NodeGuard(view=None, records=records.PodRecords(tmp_path))
    policy = delegate_policy.DelegatePolicy(rules=rules(reservedRanges=[]))
    ipam = {"type": "host-local", "ranges": [[{"subnet": "10.5.0.0/24"}]]}
    span = [planned("blue/net-a", {"type": "macvlan", "master": "eth1", "ipam": ipam})]
    asyncio.run(guard.check_plan(span, policy, "c1"))

    static_claim = [planned("blue/net-b", {"type": "ptp", "ipam": static("10.5.0.9/24")})]
    with pytest.raises(AssertionError, match="records were read"):
        asyncio.run(guard.check_plan(static_claim, policy, "c1"))
