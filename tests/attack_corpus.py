"""The attacks a NAD author (or a pod author) can try on a node (issue 27), in one place, for every
layer that must refuse them: the daemon at ADD (SEC-DELEGATE, SEC-KEYS, SEC-NODE) and the
ValidatingAdmissionPolicy at creation (SEC-ADMISSION, tests/kube/test_admission_policy.py on a
real API server). To add an attack, add an `Attack` to `ATTACKS`; every test that takes the corpus
picks it up.

Each attack is judged by `corpus_policy()`: the `delegatePolicy` of deploy/configmap.yaml (no
bridge the cluster's own networking runs on, `dataDir` only under /var/lib/cni and /run/cni) plus
namespace grants chosen by the label `GRANT_LABEL`, so an attack can be tried from a namespace that
was granted something (a host device, one master) and shown to reach past the grant:

    netattach.test/grant=device        host-device allowed, device `net1`, pciBusID 0000:00:1f.6
    netattach.test/grant=master        master `eth1` only
    netattach.test/grant=any-type      types ["*"]
    netattach.test/grant=default-data-dir   dataDir: the built-in default deny-list
    netattach.test/grant=not-uplink   host-device allowed; any master or device but the
                                      node's uplink `eth0` and its management NIC
                                      `enx0a1b2c3d4e5f`
    netattach.test/grant=sriov        host-device allowed; resourceName intel.com/sriov_data only

Node addresses in the attacks are documentation ones: the node is 192.0.2.10 on `eth0`, its
gateway 192.0.2.1; `eth1` is a data NIC; `net1` the device granted to one namespace.
`node_facts()` is that node as the node guard reads it (SEC-VALUES): `eth0` also answers to its
alternative name `uplink0`, the management NIC has a 15-byte name (a USB NIC's `enx` + MAC),
`cni0` is the cluster's own bridge (alternative name `pods0`) and `br-data` an existing data
bridge, both up, MTU 1500, not promiscuous; both IP families forward. `LIVE_ADDRESS` is held by a
live attachment of another pod on the node.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from netattach.guard import delegate_policy, node_state
from netattach.netns import host

ROOT = Path(__file__).resolve().parents[1]
GRANT_LABEL = "netattach.test/grant"
CNI_VERSION = "1.0.0"
KERNEL_SYSCTL = {"kernel.core_pattern": "|/tmp/x"}
# LATIN SMALL LETTER LONG S: Go's encoding/json folds it to `s` when it matches a key.
LONG_S = "\u017f"


class Attack(NamedTuple):
    name: str
    """A short id (pytest ids use it): what the attack writes."""
    config: Mapping[str, Any] | str
    """The NAD's `spec.config`: a mapping (written as JSON), or the raw JSON text where the text
    itself is the attack (a duplicate key, an escape, nesting)."""
    labels: Mapping[str, str] = {}
    """The labels of the NAD's (and the pod's) namespace: which grant of `corpus_policy()` it is
    judged by; none: the cluster-wide lists."""
    cni_args: Mapping[str, Any] | None = None
    """A pod author's part: the `cni-args` of the pod's network selection element."""
    admission: bool = True
    """The admission policy can refuse it from the NAD's `spec.config` alone. False: it needs
    what only the node knows at ADD (its addresses, links and switches, the live attachments) or
    lies outside `spec.config` (`cni_args`, `resource`)."""
    does: str = ""
    """What it did to the node when it got through (issue 27)."""
    resource: str = ""
    """The NAD's `k8s.v1.cni.cncf.io/resourceName` annotation ("" for none). The admission policy
    judges it too, but tests/kube/test_admission_policy.py posts `spec.config` alone: an attack
    through it says admission=False (tests/unit/test_one_judge.py evaluates the policy on the
    whole NAD)."""


def config_text(attack: Attack | Mapping[str, Any] | str) -> str:
    """The `spec.config` text of an attack (or of a config)."""
    config = attack.config if isinstance(attack, Attack) else attack
    if isinstance(config, str):
        return config
    # Non-ASCII characters as they are (the long s, not its escape: an escape is refused apart).
    return json.dumps({"cniVersion": CNI_VERSION, "name": "attack", **config}, ensure_ascii=False)


def _grant(value: str, **rules: Any) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {GRANT_LABEL: value}}, **rules}


def corpus_settings() -> dict[str, Any]:
    """The settings' `delegatePolicy` mapping the corpus is judged by (see the module docstring)."""
    deploy = yaml.safe_load((ROOT / "deploy" / "configmap.yaml").read_text(encoding="utf-8"))
    settings = yaml.safe_load(deploy["data"]["settings.yaml"])
    policy: dict[str, Any] = dict(settings["delegatePolicy"])
    policy["namespaces"] = [
        _grant(
            "device",
            types=[*delegate_policy.DEFAULT_TYPES, "host-device"],
            device=["net1"],
            pciBusID=["0000:00:1f.6"],
        ),
        _grant("master", master=["eth1"]),
        _grant("any-type", types=["*"]),
        _grant("default-data-dir", dataDir=list(delegate_policy.DEFAULT_DATA_DIR)),
        _grant(
            "not-uplink",
            types=[*delegate_policy.DEFAULT_TYPES, "host-device"],
            master=["*", f"!{UPLINK}", f"!{MANAGEMENT_NIC}"],
            device=["*", f"!{UPLINK}", f"!{MANAGEMENT_NIC}"],
        ),
        _grant(
            "sriov",
            types=[*delegate_policy.DEFAULT_TYPES, "host-device"],
            resourceName=[DATA_RESOURCE],
        ),
    ]
    return policy


def corpus_policy() -> delegate_policy.DelegatePolicy:
    problems: list[str] = []
    policy = delegate_policy.parse_policy(corpus_settings(), "delegatePolicy", problems)
    assert policy is not None, problems
    return policy


NODE_ADDRESS = "192.0.2.10"
NODE_GATEWAY = "192.0.2.1"
UPLINK = "eth0"
UPLINK_ALTNAME = "uplink0"
# A USB NIC's name: `enx` and its MAC, 15 bytes, the most an interface name holds.
MANAGEMENT_NIC = "enx0a1b2c3d4e5f"
# The address a live attachment of another pod holds on the node.
LIVE_ADDRESS = "10.77.0.7"
DATA_RESOURCE = "intel.com/sriov_data"

DEVICE = {GRANT_LABEL: "device"}
MASTER = {GRANT_LABEL: "master"}
ANY_TYPE = {GRANT_LABEL: "any-type"}
DEFAULT_DATA_DIR = {GRANT_LABEL: "default-data-dir"}
NOT_UPLINK = {GRANT_LABEL: "not-uplink"}
SRIOV = {GRANT_LABEL: "sriov"}


def node_facts() -> node_state.NodeFacts:
    """The corpus's node as the node guard reads it (the module docstring says what it has)."""
    return node_state.NodeFacts(
        addresses=(
            ("eth0", ipaddress.ip_address(NODE_ADDRESS)),
            ("eth0", ipaddress.ip_address("2001:db8::10")),
            ("lo", ipaddress.ip_address("127.0.0.1")),
        ),
        gateways=(ipaddress.ip_address(NODE_GATEWAY),),
        links=(
            host.Link("lo", mtu=65536, up=True),
            host.Link(UPLINK, altnames=(UPLINK_ALTNAME,), mtu=1500, up=True),
            host.Link("eth1", mtu=1500, up=True),
            host.Link("net1", mtu=1500, up=True),
            host.Link(MANAGEMENT_NIC, mtu=1500, up=True),
            host.Link("cni0", altnames=("pods0",), kind="bridge", mtu=1500, up=True),
            host.Link("br-data", kind="bridge", mtu=1500, up=True),
        ),
        forwarding=((4, True), (6, True)),
        accept_ra=(),
    )


_HOST_LOCAL = {"type": "host-local", "subnet": "10.77.0.0/24"}
_DEEP = 900

ATTACKS: list[Attack] = [
    # -- key spelling: Go's encoding/json takes any case (and Unicode simple folds) of a key,
    # the last spelling winning (SEC-KEYS)
    Attack(
        "DEVICE-beside-device",
        {"type": "host-device", "device": "net1", "DEVICE": "eth0"},
        DEVICE,
        does="moved the node's uplink into the pod",
    ),
    Attack(
        "device-twice",
        f'{{"cniVersion": "{CNI_VERSION}", "name": "attack", "type": "host-device", '
        '"device": "net1", "device": "eth0"}',
        DEVICE,
        does="the last `device` wins in every JSON decoder: the node's uplink",
    ),
    Attack("Device", {"type": "host-device", "Device": "eth0"}, DEVICE),
    Attack(
        "HWADDR", {"type": "host-device", "device": "net1", "HWADDR": "02:00:00:00:00:01"}, DEVICE
    ),
    Attack("PCIBUSID", {"type": "host-device", "PCIBUSID": "0000:00:03.0"}, DEVICE),
    Attack(
        "runtimeConfig-DeviceID",
        {"type": "host-device", "runtimeConfig": {"DeviceID": "0000:00:03.0"}},
        DEVICE,
    ),
    Attack(
        "ipam-TYPE",
        {"type": "macvlan", "master": "eth1", "ipam": {"type": "host-local", "TYPE": "evil"}},
        does="ran a plugin outside `types`, on ADD and on DEL",
    ),
    Attack(
        "ipam-DataDir",
        {"type": "bridge", "bridge": "br-data", "ipam": {**_HOST_LOCAL, "DataDir": "/etc/x"}},
        does="host-local wrote root-owned files into /etc",
    ),
    Attack(
        "tuning-DataDir",
        {"type": "tuning", "DataDir": "/etc/x"},
        does="tuning wrote root-owned files into /etc",
    ),
    Attack(
        "MASTER",
        {"type": "macvlan", "master": "eth1", "MASTER": "eth0"},
        MASTER,
        does="a macvlan on a master the namespace's list refuses",
    ),
    Attack(
        f"ma{LONG_S}ter", {"type": "macvlan", "master": "eth1", f"ma{LONG_S}ter": "eth0"}, MASTER
    ),
    Attack(
        "BRIDGE",
        {"type": "bridge", "bridge": "br-data", "BRIDGE": "cni0"},
        does="a pod on the cluster's own bridge",
    ),
    Attack("Sysctl", {"type": "tuning", "Sysctl": KERNEL_SYSCTL}, does="a node-wide sysctl"),
    Attack(f"{LONG_S}ysctl", {"type": "tuning", f"{LONG_S}ysctl": KERNEL_SYSCTL}),
    Attack(
        "master-spelt-with-escape-u017f",
        f'{{"cniVersion": "{CNI_VERSION}", "name": "attack", "type": "macvlan", '
        '"master": "eth1", "ma\\u017fter": "eth0"}',
        MASTER,
        does="the same key spelt with a JSON escape",
    ),
    Attack(
        "Sysctl-spelt-with-escape-u0053",
        f'{{"cniVersion": "{CNI_VERSION}", "name": "attack", "type": "tuning", '
        '"\\u0053ysctl": {"kernel.core_pattern": "|/tmp/x"}}',
    ),
    Attack("args-cni-Sysctl", {"type": "tuning", "args": {"cni": {"Sysctl": KERNEL_SYSCTL}}}),
    Attack(
        "cni-args-Sysctl",
        {"type": "tuning"},
        cni_args={"Sysctl": KERNEL_SYSCTL},
        admission=False,
        does="a pod author's cni-args merged into tuning's args",
    ),
    # -- paths (issue 27 part 4)
    Attack(
        "dataDir-double-slash",
        {"type": "bridge", "bridge": "br-data", "ipam": {**_HOST_LOCAL, "dataDir": "//etc/x"}},
        DEFAULT_DATA_DIR,
    ),
    Attack(
        "dataDir-dot",
        {"type": "bridge", "bridge": "br-data", "ipam": {**_HOST_LOCAL, "dataDir": "/./etc/x"}},
        DEFAULT_DATA_DIR,
    ),
    Attack(
        "dataDir-cni-results",
        {
            "type": "bridge",
            "bridge": "br-data",
            "ipam": {**_HOST_LOCAL, "dataDir": "/var/lib/cni//results"},
        },
        does="files among the runtime's cached CNI results (a protected directory)",
    ),
    Attack(
        "ipam-type-path",
        {"type": "bridge", "bridge": "br-data", "ipam": {"type": "../x"}},
        ANY_TYPE,
        does="the bridge plugin ran and left its bridge, then failed",
    ),
    Attack("type-path", {"type": "/usr/bin/bridge", "bridge": "br-data"}, ANY_TYPE),
    # -- what the defaults allowed (SEC-NODE)
    Attack(
        "macvlan-passthru",
        {"type": "macvlan", "mode": "passthru"},
        does="the node's default-route interface taken whole: the node cut off from its gateway",
    ),
    Attack(
        "macvlan-passthru-master",
        {"type": "macvlan", "master": "eth0", "mode": "passthru"},
    ),
    Attack(
        "bridge-isGateway-node-gateway",
        {
            "type": "bridge",
            "bridge": "br-data",
            "isGateway": True,
            "ipam": {"type": "static", "addresses": [{"address": "192.0.2.1/24"}]},
        },
        does="the node's route to its gateway turned local; it stayed after DEL",
    ),
    Attack(
        "bridge-ipMasq",
        {"type": "bridge", "bridge": "br-data", "ipMasq": True, "ipam": _HOST_LOCAL},
    ),
    Attack(
        "ptp-static-metadata-address",
        {
            "type": "ptp",
            "ipam": {"type": "static", "addresses": [{"address": "169.254.169.254/32"}]},
        },
        does="a pod answering the node's cloud metadata requests",
    ),
    Attack(
        "ptp-static-node-address",
        {"type": "ptp", "ipam": {"type": "static", "addresses": [{"address": "192.0.2.10/24"}]}},
        admission=False,
        does="a node route sending node-to-pod traffic to the attacker's veth",
    ),
    Attack(
        "ptp-static-live-pod-address",
        {"type": "ptp", "ipam": {"type": "static", "addresses": [{"address": "10.77.0.7/24"}]}},
        admission=False,
        does="another pod's address (10.77.0.7, live on the node): a node route sending "
        "node-to-pod traffic for it to the attacker's veth (refused at ADD only: a live "
        "attachment's address is the node's fact)",
    ),
    Attack(
        "portmap",
        f'{{"cniVersion": "{CNI_VERSION}", "name": "attack", "plugins": ['
        '{"type": "bridge", "bridge": "br-data", "ipam": {"type": "host-local", '
        '"subnet": "10.77.0.0/24"}}, {"type": "portmap", "capabilities": {"portMappings": true}}]}',
        does="DNAT of a node port (22) into the pod",
    ),
    Attack(
        "nested-900-deep",
        f'{{"cniVersion": "{CNI_VERSION}", "name": "attack", "type": "bridge", '
        f'"bridge": "br-data", "x": {"[" * _DEEP}{"]" * _DEEP}}}',
        admission=False,
        does="999 (RecursionError) instead of 7",
    ),
    # -- values as the plugin and the kernel read them (SEC-VALUES)
    Attack(
        "static-address-mapped-cidr",
        {
            "type": "ptp",
            "ipam": {"type": "static", "addresses": [{"address": f"::ffff:{NODE_ADDRESS}/120"}]},
        },
        does="the node's own address 192.0.2.10 to a Go plugin (its /120 read as IPv6 bits), "
        "where Python read an IPv6 address that no node address equals",
    ),
    Attack(
        "ptp-gateway-mapped-node-gateway",
        {
            "type": "ptp",
            "ipam": {
                "type": "static",
                "addresses": [{"address": "192.0.2.50/24", "gateway": f"::ffff:{NODE_GATEWAY}"}],
            },
        },
        does="ptp put the node's gateway 192.0.2.1 on its host veth: the node's route to its "
        "gateway turned local (Python read the gateway as IPv6, the node's as IPv4)",
    ),
    Attack(
        "host-local-range-hex-mapped-node-address",
        {
            "type": "macvlan",
            "master": "eth1",
            "ipam": {
                "type": "host-local",
                "ranges": [
                    [
                        {
                            "subnet": "192.0.2.0/24",
                            "rangeStart": "::ffff:c000:20a",
                            "rangeEnd": "::ffff:c000:20a",
                        }
                    ]
                ],
            },
        },
        does="a range of one address, the node's 192.0.2.10 written as hex IPv4-mapped IPv6",
    ),
    Attack(
        "ptp-host-local-gateway-hex-mapped-node-gateway",
        {
            "type": "ptp",
            "ipam": {
                "type": "host-local",
                "subnet": "192.0.2.0/24",
                "rangeStart": "192.0.2.100",
                "rangeEnd": "192.0.2.200",
                "gateway": "::ffff:c000:201",
            },
        },
        does="the node's gateway 192.0.2.1 (hex IPv4-mapped) on ptp's host veth",
    ),
    Attack(
        "cni-args-ips-mapped-node-address",
        {"type": "macvlan", "master": "eth1", "ipam": _HOST_LOCAL},
        cni_args={"ips": [f"::ffff:{NODE_ADDRESS}"]},
        admission=False,
        does="a pod author's cni-args `ips` asking host-local for the node's own address",
    ),
    Attack(
        "route-gw-mapped-metadata",
        {
            "type": "ptp",
            "ipam": {
                "type": "static",
                "addresses": [{"address": "10.77.0.9/24"}],
                "routes": [{"dst": "0.0.0.0/0", "gw": "::ffff:169.254.169.254"}],
            },
        },
        does="a route through the cloud metadata address, written IPv4-mapped",
    ),
    Attack(
        "bridge-name-with-NUL",
        f'{{"cniVersion": "{CNI_VERSION}", "name": "attack", "type": "bridge", '
        '"bridge": "cni0\\u0000x"}',
        does="the kernel reads the name up to the NUL: a pod on the cluster's own bridge cni0",
    ),
    Attack(
        "host-device-name-with-NUL",
        f'{{"cniVersion": "{CNI_VERSION}", "name": "attack", "type": "host-device", '
        '"device": "eth0\\u0000"}',
        NOT_UPLINK,
        does="the kernel reads `eth0`: the node's uplink moved into the pod past `!eth0`",
    ),
    Attack(
        "bridge-name-pattern",
        {"type": "bridge", "bridge": "br%d"},
        does="the kernel made the new bridge br0 (the first free number), not the name judged, "
        "and the failed ADD left it on the node",
    ),
    Attack(
        "master-over-15-bytes",
        {"type": "macvlan", "master": f"{MANAGEMENT_NIC}0"},
        NOT_UPLINK,
        does="16 bytes, past `!enx0a1b2c3d4e5f`; a kernel that cuts the name to 15 acts on the "
        "management NIC",
    ),
    Attack(
        "master-altname-of-uplink",
        {"type": "macvlan", "master": UPLINK_ALTNAME},
        NOT_UPLINK,
        admission=False,
        does="`uplink0` is eth0's alternative name: a macvlan on the uplink past `!eth0`",
    ),
    Attack(
        "device-altname-of-uplink",
        {"type": "host-device", "device": UPLINK_ALTNAME},
        NOT_UPLINK,
        admission=False,
        does="the node's uplink moved into the pod by its alternative name",
    ),
    Attack(
        "bridge-altname-of-cni0",
        {"type": "bridge", "bridge": "pods0", "ipam": _HOST_LOCAL},
        admission=False,
        does="`pods0` is cni0's alternative name: a pod on the cluster's own bridge past `!cni0`",
    ),
    Attack(
        "bridge-promiscMode-existing-bridge",
        {"type": "bridge", "bridge": "br-data", "promiscMode": True, "ipam": _HOST_LOCAL},
        admission=False,
        does="the node's bridge br-data left promiscuous after DEL",
    ),
    Attack(
        "bridge-macspoofchk",
        {"type": "bridge", "bridge": "br-data", "macspoofchk": True, "ipam": _HOST_LOCAL},
        does="the nftables table `bridge nat` and its PREROUTING chain left on the node",
    ),
    Attack(
        "dhcp-daemonSocketPath",
        {
            "type": "macvlan",
            "master": "eth1",
            "ipam": {"type": "dhcp", "daemonSocketPath": "/run/containerd/containerd.sock"},
        },
        does="the dhcp plugin spoke its RPC to the container runtime's socket",
    ),
    Attack(
        "firewall",
        f'{{"cniVersion": "{CNI_VERSION}", "name": "attack", "plugins": ['
        '{"type": "bridge", "bridge": "br-data", "ipam": {"type": "host-local", '
        '"subnet": "10.77.0.0/24"}}, {"type": "firewall"}]}',
        does="CNI-FORWARD, CNI-ADMIN and their jumps left in the node's iptables after DEL",
    ),
    Attack(
        "resourceName-not-granted",
        {"type": "host-device"},
        SRIOV,
        admission=False,
        resource="intel.com/sriov_mgmt",
        does="a device of the management VF pool, which the namespace's resourceName refuses",
    ),
]

# What must still be admitted and attach with no grant beyond the corpus policy's.
ALLOWED: list[Attack] = [
    Attack("macvlan-data-network", {"type": "macvlan", "master": "eth1", "ipam": _HOST_LOCAL}),
    Attack("bridge-data-network", {"type": "bridge", "bridge": "br-data", "ipam": _HOST_LOCAL}),
    Attack("granted-host-device", {"type": "host-device", "device": "net1"}, DEVICE),
    Attack("granted-master", {"type": "macvlan", "master": "eth1"}, MASTER),
    Attack("granted-resource", {"type": "host-device"}, SRIOV, resource=DATA_RESOURCE),
]
