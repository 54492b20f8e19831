"""Values as the plugins and the kernel read them (SEC-VALUES), in pure code: addresses through
Go's `net` reading, host link names through the kernel's, the node changes the node's state
shows, the `nodeChanges` grant, and `netattach validate` judging with the daemon's own code.
The real readers are the oracle in tests/unit/test_values_oracle.py and
tests/netns/test_names_oracle.py; the real plugins run in tests/e2e/test_node_values.py.
"""

from __future__ import annotations

import io
import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from netattach.cli import validate
from netattach.guard import delegate_policy, goaddr, ifnames, node_state
from netattach.netns.host import Link
from netattach.pods import node_guard
from netattach.settings import runtime as runtime_settings
from tests.unit.delegate_checks import refusals, rules

pytestmark = pytest.mark.req("SEC-VALUES")


def address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


# The node: 192.0.2.10 on eth0 (altname `uplink0`), its gateway 192.0.2.1; a bridge `br-data`
# that is up, taking no router adverts, MTU 9000; `br-ra` taking them; `br-down` down.
NODE = node_state.NodeFacts(
    addresses=(("eth0", address("192.0.2.10")),),
    gateways=(address("192.0.2.1"),),
    links=(
        Link(name="eth0", altnames=("uplink0", "enp0s31f6-long-alternative"), mtu=1500, up=True),
        Link(name="br-data", kind="bridge", mtu=9000, up=True),
        Link(name="br-ra", kind="bridge", mtu=1500, up=True),
        Link(name="br-down", kind="bridge", mtu=1500, up=False),
    ),
    forwarding=((4, False), (6, True)),
    accept_ra=(("br-data", "0"), ("br-ra", "1"), ("br-down", "0")),
)


def judged(config: dict[str, Any], facts: node_state.NodeFacts = NODE, **lists: Any) -> list[str]:
    return [str(r) for r in node_guard.judge_config(config, rules(**lists), facts)]


# --- addresses as Go reads them ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("192.0.2.10", "192.0.2.10"),
        ("::ffff:192.0.2.10", "192.0.2.10"),
        ("::FFFF:c000:20a", "192.0.2.10"),
        ("0:0:0:0:0:ffff:c000:020a", "192.0.2.10"),
        ("::1.2.3.4", "::102:304"),  # IPv4-compatible: IPv6 to Go too
        ("fe80::1", "fe80::1"),
        ("fe80::1%eth0", None),  # a zone: Go refuses it
        ("010.0.0.1", None),  # a leading zero
        ("1.2.3", None),
        ("", None),
    ],
)
def test_an_address_is_read_as_go_reads_it(text: str, read: str | None) -> None:
    found = goaddr.read_ip(text)
    assert (str(found) if found is not None else None) == read


def test_a_cidr_is_read_as_go_reads_it() -> None:
    assert goaddr.read_cidr("10.0.0.0/255.255.0.0") is None  # Go takes a length only
    assert goaddr.read_cidr("10.0.0.0/ 8") is None
    assert goaddr.read_cidr("10.0.0.0/33") is None
    assert goaddr.read_cidr("1.2.3.4/032") == goaddr.GoCIDR(address("1.2.3.4"), 32, 32, False)
    mapped = goaddr.read_cidr("::ffff:10.0.0.5/120")
    assert mapped == goaddr.GoCIDR(address("10.0.0.5"), 120, 128, True)


def test_an_ipv4_mapped_address_is_judged_as_the_ipv4_address() -> None:
    config = {
        "type": "ptp",
        "ipam": {
            "type": "static",
            "addresses": [{"address": "10.9.0.2/24", "gateway": "::ffff:169.254.169.254"}],
        },
    }
    (refusal,) = refusals(config)
    assert refusal == (
        'ipam.addresses[0].gateway "::ffff:169.254.169.254" (IPv4 169.254.169.254 to a Go '
        "plugin) lies in 169.254.169.254/32, reserved by delegatePolicy.reservedRanges [node, "
        "169.254.169.254/32, fd00:ec2::254/128]"
    )
    # The node's own address, spelled in hex.
    pod: dict[str, Any] = {"type": "macvlan", "ipam": {"type": "static", "addresses": []}}
    pod["args"] = {"cni": {"ips": ["::ffff:c000:20a"]}}
    (own,) = judged(pod)
    assert "is the node's own address 192.0.2.10 (on eth0)" in own


def test_an_ipv4_mapped_cidr_is_refused_outright() -> None:
    config: dict[str, Any] = {"type": "macvlan", "ipam": {"type": "static", "addresses": []}}
    config["ipam"]["addresses"] = [{"address": "::ffff:10.44.0.5/120"}]
    (refusal,) = refusals(config)
    assert refusal.startswith('ipam.addresses[0].address "::ffff:10.44.0.5/120" is an ')
    assert refusal.endswith("write it as IPv4, refused by SEC-VALUES (docs/security.md)")
    ranged: dict[str, Any] = {"type": "bridge", "bridge": "b", "ipam": {"type": "host-local"}}
    ranged["ipam"]["subnet"] = "::ffff:10.44.0.0/120"
    assert "IPv4-mapped IPv6 CIDR" in refusals(ranged)[0]


@pytest.mark.parametrize("value", ["fe80::1%eth0/64", "10.44.0.0/255.255.255.0", "10.44.0.0/+8"])
def test_a_cidr_go_would_not_read_is_refused(value: str) -> None:
    config = {"type": "bridge", "bridge": "b", "ipam": {"type": "host-local", "subnet": value}}
    (refusal,) = refusals(config)
    assert refusal == (
        f'ipam.subnet "{value}" is not a CIDR as Go reads one, refused by SEC-NODE '
        "(docs/security.md)"
    )


# --- names as the kernel reads them ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("cni0\0x", "holds a NUL byte: the kernel reads it up to the NUL, as 'cni0'"),
        ("a" * 16, "is 16 bytes: the kernel reads at most 15 of an interface name"),
        ("ethé" * 4, "is 20 bytes"),
        ("eth\ud800", "is not valid UTF-8"),
        ("eth/0", "is no name the kernel gives an interface"),
        ("br%d", "holds a '%': the kernel makes another name of it"),
        ("..", "is no name the kernel gives an interface"),
        ("eth 0", "is no name the kernel gives an interface"),
    ],
)
def test_a_name_the_kernel_reads_otherwise_is_refused_whatever_the_list(
    name: str, why: str
) -> None:
    assert why in ifnames.problem(name)
    for key, kind in (("master", "macvlan"), ("bridge", "bridge"), ("device", "host-device")):
        (refusal,) = [
            r
            for r in refusals({"type": kind, key: name}, types=["*"], device=["*"])
            if r.startswith(f"{key} ")
        ]
        assert why in refusal
        assert f"; refused whatever delegatePolicy.{key} [*]" in refusal


def test_a_plain_name_is_read_as_written() -> None:
    assert ifnames.problem("eth0") == ""
    assert ifnames.problem("a" * 15) == ""
    assert ifnames.problem("br-é") == ""


def test_an_alternative_name_of_a_node_link_is_refused() -> None:
    for value in ("uplink0", "enp0s31f6-long-alternative"):
        (master,) = [r for r in judged({"type": "macvlan", "master": value}) if "master" in r]
        assert master.startswith(f'master "{value}" is an alternative name of the node\'s link')
        assert master.endswith(
            "write the link's own name. Refused by SEC-VALUES (docs/security.md)"
        )
    device = {"type": "host-device", "device": "uplink0"}
    assert judged(device) != []
    # In the pod's own namespace (linkInContainer), the node's names do not count.
    inside = {"type": "macvlan", "master": "uplink0", "linkInContainer": True}
    assert judged(inside) == []


# --- changes that outlive the pod --------------------------------------------------------------


def ptp(subnet: str) -> dict[str, Any]:
    return {"type": "ptp", "ipam": {"type": "host-local", "subnet": subnet}}


def test_ptp_on_a_node_that_does_not_forward_needs_the_grant() -> None:
    (refusal,) = judged(ptp("10.60.0.0/24"))
    assert refusal == (
        'type "ptp" makes a node change that outlives the pod (switches the node\'s '
        "net.ipv4.ip_forward on; it is off here); 'forwarding' is not granted by "
        "delegatePolicy.nodeChanges []"
    )
    assert judged(ptp("10.60.0.0/24"), nodeChanges=["forwarding"]) == []
    assert judged(ptp("fd60::/64")) == []  # IPv6 forwarding is on
    forwarding = NODE._replace(forwarding=((4, True), (6, True)))
    assert judged(ptp("10.60.0.0/24"), forwarding) == []
    # Addresses from elsewhere (dhcp): either family may be switched on.
    dhcp = {"type": "ptp", "ipam": {"type": "dhcp"}}
    assert "net.ipv4.ip_forward" in judged(dhcp)[0]


def bridge(name: str, **extra: Any) -> dict[str, Any]:
    return {"type": "bridge", "bridge": name, "mtu": 9000, **extra}


def test_an_existing_bridge_is_not_changed() -> None:
    assert judged(bridge("br-data")) == []
    assert judged(bridge("br-new", promiscMode=True)) == []  # made by the plugin: the NAD's
    (down,) = judged({"type": "bridge", "bridge": "br-down"})
    assert "(sets the node's bridge 'br-down' up; it is down); 'bridgeUp' is not granted" in down
    (ra,) = judged({"type": "bridge", "bridge": "br-ra"})
    assert "writes 0 to net.ipv6.conf.br-ra.accept_ra, which is 1 here" in ra
    (promisc,) = judged(bridge("br-data", promiscMode=True))
    assert promisc.startswith("promiscMode true makes a node change that outlives the pod")
    (mtu,) = judged({"type": "bridge", "bridge": "br-data"})
    assert mtu.startswith("mtu 1500 makes a node change")
    assert "lowers the node's bridge 'br-data' from 9000; give the NAD mtu 9000" in mtu
    granted = ["bridgeUp", "bridgeAcceptRA", "bridgePromisc", "bridgeMtu"]
    for config in ({"type": "bridge", "bridge": "br-down"}, bridge("br-ra", promiscMode=True)):
        assert judged(config, nodeChanges=granted) == []
    assert judged({"type": "bridge", "bridge": "br-data"}, nodeChanges=["bridge*"]) == []


def test_macspoofchk_and_a_foreign_dhcp_socket_need_the_grant() -> None:
    (mac,) = refusals({"type": "bridge", "bridge": "b", "macspoofchk": True})
    assert "the nftables table 'bridge nat' and its PREROUTING chain" in mac
    assert refusals({"type": "bridge", "bridge": "b", "macspoofchk": False}) == []
    assert refusals({"type": "bridge", "bridge": "b", "macspoofchk": True}, nodeChanges=["*"]) == []
    socket: dict[str, Any] = {
        "type": "macvlan",
        "ipam": {"type": "dhcp", "daemonSocketPath": "/run/x.sock"},
    }
    (foreign,) = refusals(socket)
    assert foreign.startswith('ipam.daemonSocketPath "/run/x.sock" makes a node change')
    assert "'dhcpSocket' is not granted" in foreign
    for default in ("/run/cni/dhcp.sock", "/var/run/cni//dhcp.sock"):
        socket["ipam"]["daemonSocketPath"] = default
        assert refusals(socket) == []


def test_the_firewall_plugin_is_no_default_type() -> None:
    assert "firewall" not in delegate_policy.DEFAULT_TYPES
    (refusal,) = refusals({"type": "firewall"})
    assert refusal.startswith('type "firewall" is not allowed by delegatePolicy.types')


def test_node_changes_names_are_checked_in_the_settings() -> None:
    problems: list[str] = []
    delegate_policy.parse_policy({"nodeChanges": ["forwarding", "bridgeUP"]}, "dp", problems)
    assert problems == [
        "dp.nodeChanges[1]: must be one of forwarding, bridgeUp, bridgePromisc, bridgeAcceptRA, "
        "bridgeMtu, macspoofchk, dhcpSocket (or a glob of them), got 'bridgeUP'"
    ]


# --- one judge: validate -----------------------------------------------------------------------


FEED = {"directory": "/etc/netattach/manifests"}


def nad(name: str, config: dict[str, Any], resource: str = "") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "blue"}
    if resource:
        metadata["annotations"] = {"k8s.v1.cni.cncf.io/resourceName": resource}
    body = {"cniVersion": "1.0.0", "name": name, **config}
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": metadata,
        "spec": {"config": json.dumps(body)},
    }


def run_validate(tmp_path: Path, documents: list[dict[str, Any]], *, node: bool) -> str:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    out = io.StringIO()
    validate.run([str(path)], stdin=io.StringIO(), stdout=out, node=node)
    return out.getvalue()


def test_validate_judges_resource_names_as_the_daemon_does(tmp_path: Path) -> None:
    documents = [
        {"clusterNetwork": "x", "feed": FEED, "delegatePolicy": {"resourceName": ["intel.com/*"]}},
        nad("vf", {"type": "host-device"}, resource="example.com/vf"),
    ]
    text = run_validate(tmp_path, documents, node=False)
    assert (
        "NetworkAttachmentDefinition blue/vf: refused by the delegate policy: resourceName "
        "'example.com/vf' is not allowed by delegatePolicy.resourceName [intel.com/*]"
    ) in text


def test_validate_node_judges_against_this_nodes_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_guard, "read_node_facts", lambda: NODE)
    state = tmp_path / "state"
    documents = [
        {"clusterNetwork": "x", "feed": FEED, "stateDir": str(state)},
        nad("net-alt", {"type": "macvlan", "master": "uplink0"}),
        nad("net-ptp", ptp("10.60.0.0/24")),
        nad("net-own", own_address()),
    ]
    without = run_validate(tmp_path, documents, node=False)
    assert "refused" not in without
    text = run_validate(tmp_path, documents, node=True)
    assert (
        'blue/net-alt: refused by the delegate policy: plugins[0].master "uplink0" is an '
        "alternative name" in text
    )
    assert (
        'blue/net-ptp: refused by the delegate policy: plugins[0].type "ptp" makes a node change'
        in text
    )
    assert (
        "blue/net-own: refused by the delegate policy: plugins[0].ipam.addresses[0].address" in text
    )
    assert text.endswith("4 objects checked, 3 problems\n")
    assert state != runtime_settings.DEFAULT_STATE_DIR


def own_address() -> dict[str, Any]:
    """A macvlan whose pod address is the node's own (192.0.2.10)."""
    return {
        "type": "macvlan",
        "ipam": {"type": "static", "addresses": [{"address": "192.0.2.10/24"}]},
    }
