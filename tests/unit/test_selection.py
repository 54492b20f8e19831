"""The selection annotation (standard §4): both forms, every key, every limit, one error for all."""

from __future__ import annotations

import ipaddress
import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netattach.attach import selection
from netattach.cni import errors

POD_NS = "my-namespace"
POD = "my-pod"
MSG = f"invalid network selection annotation of pod {POD_NS}/{POD}"


def parse(text: str) -> tuple[selection.Selection, ...]:
    return selection.parse_selections(text, pod_namespace=POD_NS, pod=POD)


def refusal(text: str) -> errors.InvalidSelectionError:
    with pytest.raises(errors.InvalidSelectionError) as info:
        parse(text)
    return info.value


def problems(text: str) -> list[str]:
    return refusal(text).details.split("; ")


def one(**element: Any) -> selection.Selection:
    """The one selection a JSON list holding `element` asks for (keys spelled with `_` → `-`)."""
    (result,) = parse(json.dumps([wire(element)]))
    return result


def bad(**element: Any) -> list[str]:
    return problems(json.dumps([wire(element)]))


def wire(element: dict[str, Any]) -> dict[str, Any]:
    renames = {
        "cni_args": "cni-args",
        "default_route": "default-route",
        "infiniband_guid": "infiniband-guid",
        "ipam_claim_reference": "ipam-claim-reference",
    }
    return {renames.get(key, key): value for key, value in element.items()}


def sel(name: str, namespace: str = POD_NS, **fields: Any) -> selection.Selection:
    return selection.Selection(namespace=namespace, name=name, **fields)


# --- comma form (§4.1.1) ---------------------------------------------------------------------


@pytest.mark.req("SEL-CSV")
def test_the_standards_comma_example_selects_three_networks() -> None:
    # standard §4.1.1
    assert parse("net-a,net-b,other-ns/net-c") == (
        sel("net-a"),
        sel("net-b"),
        sel("net-c", "other-ns"),
    )


@pytest.mark.req("SEL-CSV")
def test_whitespace_around_comma_items_and_their_parts_is_ignored() -> None:
    assert parse("  net-a , other-ns / net-c ,\tnet-d @ eth5\n") == (
        sel("net-a"),
        sel("net-c", "other-ns"),
        sel("net-d", interface="eth5"),
    )


@pytest.mark.req("SEL-CSV")
def test_comma_items_may_request_an_interface_with_at() -> None:
    # Multus's `name@ifname` extension of §4.1.1
    assert parse("net-a@eth5,other-ns/net-c@net9") == (
        sel("net-a", interface="eth5"),
        sel("net-c", "other-ns", interface="net9"),
    )


@pytest.mark.req("SEL-CSV")
@pytest.mark.parametrize("text", ["", " ", "\n\t  "])
def test_a_blank_annotation_selects_nothing(text: str) -> None:
    assert parse(text) == ()


@pytest.mark.req("SEL-CSV")
@pytest.mark.parametrize(
    ("text", "index"),
    [("net-a,,net-b", 1), ("net-a,", 1), (",net-a", 0), ("net-a, ,net-b", 1)],
)
def test_an_empty_comma_item_is_refused_quoting_the_text(text: str, index: int) -> None:
    assert problems(text) == [f"networks[{index}]: empty item in {text!r}"]


@pytest.mark.req("SEL-CSV")
@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a/b/c", "networks[0]: 'a/b/c' has more than one '/'"),
        ("net-a@x@y", "networks[0]: 'net-a@x@y' has more than one '@'"),
        ("/net-a", "networks[0]: '/net-a' has an empty namespace before '/'"),
        ("ns/", "networks[0]: 'ns/' names no network"),
        ("@eth0", "networks[0]: '@eth0' names no network"),
        (
            "net-a@",
            "networks[0].interface: '' is not a valid interface name: "
            "an interface name must not be empty",
        ),
    ],
)
def test_malformed_comma_items_are_refused(text: str, problem: str) -> None:
    assert problems(text) == [problem]


# --- JSON form (§4.1.2) ----------------------------------------------------------------------

STANDARD_JSON_EXAMPLE = """
[
  {"name":"net-a"},
  {
    "name":"net-b",
    "ips": ["1.2.3.4"],
    "mac": "aa:bb:cc:dd:ee:ff"
  },
  {
    "name":"net-c",
    "namespace":"other-ns"
  }
]
"""


@pytest.mark.req("SEL-JSON")
def test_the_standards_json_example() -> None:
    # standard §4.1.2
    assert parse(STANDARD_JSON_EXAMPLE) == (
        sel("net-a"),
        sel("net-b", ips=("1.2.3.4",), mac="aa:bb:cc:dd:ee:ff"),
        sel("net-c", "other-ns"),
    )


@pytest.mark.req("SEL-JSON")
@pytest.mark.parametrize("namespace", [None, ""])
def test_a_missing_or_empty_namespace_is_the_pods(namespace: str | None) -> None:
    element: dict[str, Any] = {"name": "net-a"}
    if namespace is not None:
        element["namespace"] = namespace
    assert one(**element) == sel("net-a", POD_NS)


@pytest.mark.req("SEL-JSON")
def test_an_empty_json_list_selects_nothing() -> None:
    assert parse(" [ ] ") == ()


@pytest.mark.req("SEL-JSON")
@pytest.mark.parametrize(
    ("element", "problem"),
    [
        ({}, "networks[0]: 'name' is required"),
        ({"name": None}, "networks[0]: 'name' is required"),
        ({"name": 5}, "networks[0].name: 5 is not a string"),
        ({"name": ""}, "networks[0].name: '' is not a DNS-1123 label"),
        ({"name": "a", "namespace": ["x"]}, 'networks[0].namespace: ["x"] is not a string'),
    ],
)
def test_name_is_a_required_string(element: dict[str, Any], problem: str) -> None:
    (found,) = bad(**element)
    assert found.startswith(problem)


@pytest.mark.req("SEL-JSON")
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('{"name": "net-a"}', '{"name": "net-a"}'),
        ('"net-a"', "'net-a'"),
        ("{}", "{}"),
    ],
)
def test_the_json_form_is_a_list(text: str, shown: str) -> None:
    assert problems(text) == [f"networks: the JSON form is a list of objects, not {shown}"]


@pytest.mark.req("SEL-JSON")
def test_list_elements_are_objects() -> None:
    assert problems('[{"name": "net-a"}, "net-b", 7]') == [
        "networks[1]: 'net-b' is not a JSON object",
        "networks[2]: 7 is not a JSON object",
    ]


@pytest.mark.req("SEL-JSON")
@pytest.mark.parametrize("text", ['net-a,"net-b"', "net-a, {net-b}", "[net-a]", '[{"name":1,}]'])
def test_text_with_a_bracket_brace_or_quote_is_json_as_in_multus(text: str) -> None:
    (problem,) = problems(text)
    assert problem.startswith("networks: not valid JSON (")
    assert problem.endswith(repr(text))


@pytest.mark.req("SEL-JSON")
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_numbers_json_cannot_carry_are_refused(literal: str) -> None:
    (problem,) = problems(f'[{{"name": "a", "cni-args": {{"x": {literal}}}}}]')
    assert problem.startswith("networks: not valid JSON (")


@pytest.mark.req("SEL-JSON")
def test_null_means_absent_as_in_go() -> None:
    # Go marshals Multus's NetworkSelectionElement with `"cni-args": null` (no omitempty).
    keys = ["ips", "mac", "interface", "interfaceRequest", "cni-args", "portMappings"]
    keys += ["bandwidth", "default-route", "infiniband-guid", "ipam-claim-reference"]
    element = {"name": "net-a", "namespace": None, **dict.fromkeys(keys)}
    assert parse(json.dumps([element])) == (sel("net-a"),)


@pytest.mark.req("SEL-CSV", "SEL-JSON")
@pytest.mark.parametrize(
    ("comma", "json_form"),
    [
        ("net-a", [{"name": "net-a"}]),
        ("other-ns/net-c", [{"name": "net-c", "namespace": "other-ns"}]),
        ("net-a@eth5", [{"name": "net-a", "interface": "eth5"}]),
        (
            "net-a, other-ns/net-b@x1, net-a",
            [
                {"name": "net-a"},
                {"name": "net-b", "namespace": "other-ns", "interface": "x1"},
                {"name": "net-a", "namespace": ""},
            ],
        ),
    ],
)
def test_both_forms_give_the_same_selections(comma: str, json_form: list[Any]) -> None:
    assert parse(comma) == parse(json.dumps(json_form))


@pytest.mark.req("NAD-NAME")
def test_reference_is_namespace_slash_name() -> None:
    assert parse("other-ns/net-c")[0].reference() == "other-ns/net-c"
    assert parse("net-a")[0].reference() == f"{POD_NS}/net-a"
    assert selection.ANNOTATION == "k8s.v1.cni.cncf.io/networks"


# --- names (§3.3) ----------------------------------------------------------------------------

VALID_LABELS = ["a", "0", "net-a", "a-b-c", "1net", "x" * 63, "a" + "-" * 61 + "z"]
INVALID_LABELS = ["Net-a", "net_a", "-net", "net-", "net.a", "x" * 64, "nét", "net a", "ns/x"]


@pytest.mark.req("NAD-NAME")
@pytest.mark.parametrize("label", VALID_LABELS)
def test_dns_1123_labels_are_accepted_as_names_and_namespaces(label: str) -> None:
    assert one(name=label, namespace=label) == sel(label, label)
    assert parse(f"{label}/{label}") == (sel(label, label),)


@pytest.mark.req("NAD-NAME")
@pytest.mark.parametrize("label", INVALID_LABELS)
@pytest.mark.parametrize("key", ["name", "namespace"])
def test_other_names_and_namespaces_are_refused(label: str, key: str) -> None:
    element = {"name": "net-a", key: label}
    (problem,) = bad(**element)
    assert problem.startswith(f"networks[0].{key}: {label!r} is not a DNS-1123 label (")


@pytest.mark.req("NAD-NAME", "SEL-CSV")
@pytest.mark.parametrize("label", [x for x in INVALID_LABELS if "/" not in x])
def test_comma_items_with_bad_names_are_refused(label: str) -> None:
    (problem,) = problems(f"ok/{label}")
    assert problem.startswith(f"networks[0].name: {label!r} is not a DNS-1123 label")
    (problem,) = problems(f"{label}/ok")
    assert problem.startswith(f"networks[0].namespace: {label!r} is not a DNS-1123 label")


# --- ips (§4.1.2.1.3) ------------------------------------------------------------------------


def test_the_standards_ips_example() -> None:
    # standard §4.1.2.1.3.1
    text = '[{"name":"net-b", "ips": ["10.2.2.42", "2001:db8::5"]}]'
    assert parse(text) == (sel("net-b", ips=("10.2.2.42", "2001:db8::5")),)


def test_ips_keep_cidr_and_plain_forms_as_written() -> None:
    ips = ["10.1.1.5/24", "2001:DB8::5/64", "192.168.0.1", "::ffff:10.0.0.1", "10.0.0.0/0"]
    assert one(name="a", ips=ips).ips == tuple(ips)


@pytest.mark.parametrize(
    ("ips", "problem"),
    [
        ([], "networks[0].ips: must list at least one address"),
        ("10.0.0.1", "networks[0].ips: '10.0.0.1' is not a list of addresses"),
        ([5], "networks[0].ips[0]: 5 is not a string"),
        ([None], "networks[0].ips[0]: null is not a string"),
    ],
)
def test_ips_is_a_non_empty_list_of_strings(ips: Any, problem: str) -> None:
    assert bad(name="a", ips=ips) == [problem]


@pytest.mark.parametrize(
    "ip",
    [
        "",
        "1.2.3",
        "1.2.3.999",
        "01.2.3.4",
        "fe80::1%eth0",  # Python takes a zone, Go's net.ParseIP does not
        "10.0.0.1/255.255.255.0",  # Python takes a netmask, Go's ParseCIDR does not
        "10.0.0.1/33",
        "2001:db8::1/129",
        "10.0.0.1/024",
        "10.0.0.1/",
        " 10.0.0.1",
        "net-a",
        "\u0661.\u0662.\u0663.\u0664",  # Arabic-Indic digits
    ],
)
def test_each_ip_is_an_ipv4_or_ipv6_address_or_cidr(ip: str) -> None:
    assert bad(name="a", ips=["10.0.0.1", ip]) == [
        f"networks[0].ips[1]: {ip!r} is not an IPv4 or IPv6 address or CIDR"
    ]


# --- mac (§4.1.2.1.4) ------------------------------------------------------------------------


def test_the_standards_mac_example() -> None:
    # standard §4.1.2.1.4.1
    text = '[{"name":"net-b", "mac": "02:23:45:67:89:01"}]'
    assert parse(text) == (sel("net-b", mac="02:23:45:67:89:01"),)


IPOIB = ":".join(["a0"] * 20)


@pytest.mark.parametrize(
    "mac",
    ["02:23:45:67:89:01", "02-23-45-67-89-AB", "0223.4567.89ab", IPOIB, IPOIB.replace(":", "-")],
)
def test_mac_is_6_byte_ethernet_or_20_byte_infiniband_in_gos_forms(mac: str) -> None:
    assert one(name="a", mac=mac).mac == mac


@pytest.mark.parametrize(
    "mac",
    [
        "zz:zz",
        "",
        "02:23:45:67:89",
        "02:23:45:67:89:01:02:03",  # 8 bytes: a GUID, not a MAC
        "02:23-45:67:89:01",
        "0223.4567.89ab.cdef",
        "02:23:45:67:89:0g",
        "2:23:45:67:89:01",
    ],
)
def test_other_macs_are_refused(mac: str) -> None:
    assert bad(name="a", mac=mac) == [
        f"networks[0].mac: {mac!r} is not a 6-byte Ethernet or 20-byte InfiniBand address"
    ]


def test_mac_is_a_string() -> None:
    assert bad(name="a", mac=42) == ["networks[0].mac: 42 is not a string"]


# --- interface (§4.1.2.1.5) ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["eth5", "net1", "a", "x" * 15, "vlan.100", "my-if_2"])
def test_interface_is_a_linux_interface_name(name: str) -> None:
    assert one(name="a", interface=name).interface == name


@pytest.mark.parametrize("name", ["", "x" * 16, "a/b", "a:b", "a b", "a\tb", ".", "..", "é" * 8])
def test_other_interface_names_are_refused(name: str) -> None:
    (problem,) = bad(name="a", interface=name)
    assert problem.startswith(f"networks[0].interface: {name!r} is not a valid interface name: ")


def test_multus_legacy_interface_request_means_interface() -> None:
    assert one(name="a", interfaceRequest="eth7").interface == "eth7"
    assert one(name="a", interface="eth7", interfaceRequest="eth7").interface == "eth7"


def test_interface_and_interface_request_must_agree() -> None:
    assert bad(name="a", interface="eth7", interfaceRequest="eth8") == [
        "networks[0]: 'interface' 'eth7' and 'interfaceRequest' 'eth8' disagree"
    ]
    (problem,) = bad(name="a", interfaceRequest="a/b")
    assert problem.startswith("networks[0].interfaceRequest: 'a/b' is not a valid interface")


# --- reserved keys (§4.1.2.1) ----------------------------------------------------------------


@pytest.mark.req("SEL-RESERVED")
def test_keys_with_a_dot_belong_to_implementations_and_are_ignored() -> None:
    element = {"name": "a", "org.example.key-name": {"any": ["thing"]}, "io.netattach.x": 1}
    assert one(**element) == sel("a")


@pytest.mark.req("SEL-RESERVED")
@pytest.mark.parametrize("key", ["foo", "Name", "deviceID", "ip", "interface_request"])
def test_unknown_keys_without_a_dot_are_refused_naming_them(key: str) -> None:
    (problem,) = bad(name="a", **{key: "x"})
    assert problem.startswith(f"networks[0]: unknown key {key!r} (keys without a '.' are reserved")


# --- multiple attachments (§4.2) -------------------------------------------------------------


def test_the_standards_repeated_network_example_gives_two_selections() -> None:
    # standard §4.2.2
    assert parse("net-a,net-a") == (sel("net-a"), sel("net-a"))


def test_repeated_selections_are_kept_in_order() -> None:
    text = json.dumps(
        [
            {"name": "net-a", "interface": "x1"},
            {"name": "net-b"},
            {"name": "net-a", "interface": "x2"},
            {"name": "net-a", "namespace": POD_NS},
        ]
    )
    assert parse(text) == (
        sel("net-a", interface="x1"),
        sel("net-b"),
        sel("net-a", interface="x2"),
        sel("net-a"),
    )


# --- cni-args (v1.1) -------------------------------------------------------------------------


def test_cni_args_is_a_json_object_kept_as_written() -> None:
    args = {"foo": "bar", "n": 1, "nested": {"list": [1, 2.5, None, True]}}
    found = one(name="a", cni_args=args)
    assert found.cni_args == args
    assert json.loads(json.dumps(dict(found.cni_args or {}))) == args


def test_cni_args_cannot_be_changed_through_the_selection() -> None:
    found = one(name="a", cni_args={"foo": "bar"})
    assert found.cni_args is not None
    with pytest.raises(TypeError):
        found.cni_args["foo"] = "baz"  # type: ignore[index]


@pytest.mark.parametrize(("args", "shown"), [([1], "[1]"), ("k=v", "'k=v'"), (3, "3")])
def test_cni_args_other_than_an_object_are_refused(args: Any, shown: str) -> None:
    assert bad(name="a", cni_args=args) == [f"networks[0].cni-args: {shown} is not a JSON object"]


# --- portMappings (v1.1) ---------------------------------------------------------------------


def test_port_mappings_default_to_tcp_and_keep_what_was_written() -> None:
    found = one(
        name="a",
        portMappings=[
            {"hostPort": 8080, "containerPort": 80},
            {"hostPort": 1, "containerPort": 65535, "protocol": "UDP", "hostIP": "10.0.0.1"},
            {"hostPort": 53, "containerPort": 53, "protocol": "Sctp", "hostIP": ""},
        ],
    )
    assert found.port_mappings == (
        selection.PortMapping(host_port=8080, container_port=80),
        selection.PortMapping(
            host_port=1, container_port=65535, protocol="UDP", host_ip="10.0.0.1"
        ),
        selection.PortMapping(host_port=53, container_port=53, protocol="Sctp"),
    )


def test_port_mappings_become_runtime_config_entries() -> None:
    mapping = selection.PortMapping(
        host_port=8080, container_port=80, protocol="TCP", host_ip="2001:db8::1"
    )
    assert mapping.to_runtime_config() == {
        "hostPort": 8080,
        "containerPort": 80,
        "protocol": "tcp",  # lower-case, as the kubelet's runtimes send it
        "hostIP": "2001:db8::1",
    }
    plain = selection.PortMapping(host_port=1, container_port=2)
    assert plain.to_runtime_config() == {"hostPort": 1, "containerPort": 2, "protocol": "tcp"}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"containerPort": 80}, ["networks[0].portMappings[0]: 'hostPort' is required"]),
        ({"hostPort": 80}, ["networks[0].portMappings[0]: 'containerPort' is required"]),
        (
            {"hostPort": 0, "containerPort": 80},
            ["networks[0].portMappings[0].hostPort: 0 is not between 1 and 65535"],
        ),
        (
            {"hostPort": 80, "containerPort": 65536},
            ["networks[0].portMappings[0].containerPort: 65536 is not between 1 and 65535"],
        ),
        (
            {"hostPort": True, "containerPort": 80},
            ["networks[0].portMappings[0].hostPort: true is not an integer"],
        ),
        (
            {"hostPort": "80", "containerPort": 80.0},
            [
                "networks[0].portMappings[0].hostPort: '80' is not an integer",
                "networks[0].portMappings[0].containerPort: 80.0 is not an integer",
            ],
        ),
        (
            {"hostPort": 80, "containerPort": 80, "protocol": "icmp"},
            ["networks[0].portMappings[0].protocol: 'icmp' is not TCP, UDP or SCTP"],
        ),
        (
            {"hostPort": 80, "containerPort": 80, "protocol": ""},
            ["networks[0].portMappings[0].protocol: '' is not TCP, UDP or SCTP"],
        ),
        (
            {"hostPort": 80, "containerPort": 80, "protocol": 6},
            ["networks[0].portMappings[0].protocol: 6 is not a string"],
        ),
        (
            {"hostPort": 80, "containerPort": 80, "hostIP": "10.0.0.0/8"},
            ["networks[0].portMappings[0].hostIP: '10.0.0.0/8' is not an IPv4 or IPv6 address"],
        ),
        (
            {"hostPort": 80, "containerPort": 80, "hostNetwork": True},
            [
                "networks[0].portMappings[0]: unknown key 'hostNetwork' "
                "(expected hostPort, containerPort, protocol, hostIP)"
            ],
        ),
        ("80:80", ["networks[0].portMappings[0]: '80:80' is not a JSON object"]),
    ],
)
def test_bad_port_mappings_are_refused(entry: Any, expected: list[str]) -> None:
    assert bad(name="a", portMappings=[entry]) == expected


def test_port_mappings_is_a_list() -> None:
    assert bad(name="a", portMappings={"hostPort": 1, "containerPort": 1}) == [
        'networks[0].portMappings: {"hostPort": 1, "containerPort": 1} '
        "is not a list of port mappings"
    ]


# --- bandwidth (v1.1) ------------------------------------------------------------------------


def test_bandwidth_keeps_the_given_keys_only() -> None:
    found = one(name="a", bandwidth={"ingressRate": 1000, "ingressBurst": 800})
    assert found.bandwidth == selection.Bandwidth(ingress_rate=1000, ingress_burst=800)
    assert found.bandwidth.to_runtime_config() == {"ingressRate": 1000, "ingressBurst": 800}
    every = {
        "ingressRate": 1,
        "ingressBurst": 2,
        "egressRate": 3,
        "egressBurst": 8 * (2**32 - 1) - 1,
    }
    bandwidth = one(name="a", bandwidth=every).bandwidth
    assert bandwidth is not None
    assert bandwidth.to_runtime_config() == every


def test_zero_rate_and_zero_burst_mean_no_limit() -> None:
    found = one(name="a", bandwidth={"egressRate": 0, "egressBurst": 0})
    assert found.bandwidth == selection.Bandwidth(egress_rate=0, egress_burst=0)


@pytest.mark.parametrize(
    ("bandwidth", "expected"),
    [
        (
            {"ingressBurst": 10},
            ["networks[0].bandwidth: 'ingressBurst' is given without 'ingressRate'"],
        ),
        (
            {"ingressRate": 10, "ingressBurst": 10, "egressBurst": 10},
            ["networks[0].bandwidth: 'egressBurst' is given without 'egressRate'"],
        ),
        # the bandwidth plugin refuses these on ADD *and* DEL: refused before anything runs
        (
            {"egressRate": 1000000},
            ["networks[0].bandwidth: 'egressRate' needs 'egressBurst' as well"],
        ),
        (
            {"ingressRate": 0, "ingressBurst": 10},
            [
                "networks[0].bandwidth: 'ingressRate' and 'ingressBurst' are both 0 (no limit) "
                "or both above 0, got 0 and 10"
            ],
        ),
        (
            {"ingressRate": 10, "ingressBurst": 0},
            [
                "networks[0].bandwidth: 'ingressRate' and 'ingressBurst' are both 0 (no limit) "
                "or both above 0, got 10 and 0"
            ],
        ),
        (
            {"egressRate": 10, "egressBurst": 8 * (2**32 - 1)},
            [
                "networks[0].bandwidth.egressBurst: 34359738360 bits is 4 GB or more, "
                "the most a token bucket holds is 34359738359"
            ],
        ),
        (
            {"ingressRate": -1, "ingressBurst": 1},
            ["networks[0].bandwidth.ingressRate: -1 is not between 0 and 9223372036854775807"],
        ),
        (
            {"egressRate": 2**63, "egressBurst": 1},
            [
                "networks[0].bandwidth.egressRate: 9223372036854775808 "
                "is not between 0 and 9223372036854775807"
            ],
        ),
        (
            {"egressRate": 1.5, "egressBurst": 1},
            ["networks[0].bandwidth.egressRate: 1.5 is not an integer"],
        ),
        (
            {"egressRate": False, "egressBurst": 1},
            ["networks[0].bandwidth.egressRate: false is not an integer"],
        ),
        (
            {},
            [
                "networks[0].bandwidth: {} names none of "
                "ingressRate, ingressBurst, egressRate, egressBurst"
            ],
        ),
        (
            {"rate": 5, "egressRate": 5, "egressBurst": 5},
            [
                "networks[0].bandwidth: unknown key 'rate' "
                "(expected ingressRate, ingressBurst, egressRate, egressBurst)"
            ],
        ),
        ("1Mbit", ["networks[0].bandwidth: '1Mbit' is not a JSON object"]),
    ],
)
def test_bad_bandwidth_is_refused(bandwidth: Any, expected: list[str]) -> None:
    assert bad(name="a", bandwidth=bandwidth) == expected


# --- default-route (v1.1) --------------------------------------------------------------------


@pytest.mark.parametrize(
    "gateways", [["10.0.0.1"], ["2001:db8::1"], ["10.0.0.1", "2001:db8::1"], ["fd00::1", "1.1.1.1"]]
)
def test_default_route_names_at_most_one_gateway_per_family(gateways: list[str]) -> None:
    assert one(name="a", default_route=gateways).default_route == tuple(gateways)


@pytest.mark.parametrize(
    ("gateways", "expected"),
    [
        (
            ["10.0.0.1", "10.0.0.2"],
            ["networks[0].default-route: at most one IPv4 gateway, got '10.0.0.1' and '10.0.0.2'"],
        ),
        (
            ["fd00::1", "10.0.0.1", "fd00::2"],
            ["networks[0].default-route: at most one IPv6 gateway, got 'fd00::1' and 'fd00::2'"],
        ),
        (
            # Go's net.IP, which Multus decodes this into, takes a v4-mapped address as IPv4.
            ["10.0.0.1", "::ffff:10.0.0.2"],
            [
                "networks[0].default-route: at most one IPv4 gateway, "
                "got '10.0.0.1' and '::ffff:10.0.0.2'"
            ],
        ),
        (
            ["10.0.0.1/24"],
            ["networks[0].default-route[0]: '10.0.0.1/24' is not an IPv4 or IPv6 address"],
        ),
        ([7], ["networks[0].default-route[0]: 7 is not a string"]),
        ([], ["networks[0].default-route: must list at least one gateway address"]),
        ("10.0.0.1", ["networks[0].default-route: '10.0.0.1' is not a list of gateway addresses"]),
    ],
)
def test_bad_default_routes_are_refused(gateways: Any, expected: list[str]) -> None:
    assert bad(name="a", default_route=gateways) == expected


def test_only_one_selection_may_carry_default_route() -> None:
    text = json.dumps(
        [
            {"name": "a", "default-route": ["10.0.0.1"]},
            {"name": "b"},
            {"name": "c", "default-route": ["fd00::1"]},
            {"name": "d", "default-route": ["10.9.9.9"]},
        ]
    )
    assert problems(text) == [
        "networks[2].default-route: only one selection may carry 'default-route', "
        "networks[0] already does",
        "networks[3].default-route: only one selection may carry 'default-route', "
        "networks[0] already does",
    ]


# --- infiniband-guid (v1.2) ------------------------------------------------------------------


@pytest.mark.parametrize("guid", ["00:11:22:33:44:55:66:77", "aa-bb-cc-dd-ee-ff-00-11"])
def test_infiniband_guid_is_8_bytes(guid: str) -> None:
    assert one(name="a", infiniband_guid=guid).infiniband_guid == guid


@pytest.mark.parametrize(
    "guid", ["00:11:22:33:44:55", "", "guid", IPOIB, "00:11:22:33:44:55:66:7g"]
)
def test_other_infiniband_guids_are_refused(guid: str) -> None:
    assert bad(name="a", infiniband_guid=guid) == [
        f"networks[0].infiniband-guid: {guid!r} is not an 8-byte InfiniBand GUID"
    ]


# --- ipam-claim-reference (v1.3) -------------------------------------------------------------


@pytest.mark.parametrize("claim", ["my-claim", "pod.net-a", "x" * 63])
def test_ipam_claim_reference_names_an_ipam_claim(claim: str) -> None:
    assert one(name="a", ipam_claim_reference=claim).ipam_claim_reference == claim


@pytest.mark.parametrize("claim", ["", "My-Claim", "-x", "a..b", "x" * 254, "a/b"])
def test_other_ipam_claim_references_are_refused(claim: str) -> None:
    (problem,) = bad(name="a", ipam_claim_reference=claim)
    assert problem.startswith("networks[0].ipam-claim-reference: ")
    assert " is not a DNS-1123 name (" in problem


def test_ipam_claim_reference_and_ips_exclude_each_other() -> None:
    assert bad(name="a", ips=["10.0.0.1"], ipam_claim_reference="claim") == [
        "networks[0]: 'ips' and 'ipam-claim-reference' cannot both be given"
    ]


# --- the error (SEL-INVALID) -----------------------------------------------------------------


def test_the_error_is_102_names_the_pod_and_quotes_the_bad_value() -> None:
    error = refusal('[{"name": "net-a"}, {"name": "net-b", "mac": "zz:zz"}]')
    assert error.code == 102
    assert error.msg == MSG
    assert error.details == (
        "networks[1].mac: 'zz:zz' is not a 6-byte Ethernet or 20-byte InfiniBand address"
    )
    assert error.to_raw("1.0.0")["code"] == 102


def test_every_problem_is_reported_at_once() -> None:
    text = json.dumps(
        [
            {"name": "net-a", "ips": ["10.0.0.1", "300.0.0.1"], "mac": "02:00:00:00:00"},
            {"name": "Net_B", "interface": "eth0/1"},
            "net-c",
            {"name": "net-d", "weird": 1, "bandwidth": {"egressBurst": 1}},
        ]
    )
    assert problems(text) == [
        "networks[0].ips[1]: '300.0.0.1' is not an IPv4 or IPv6 address or CIDR",
        "networks[0].mac: '02:00:00:00:00' is not a 6-byte Ethernet or 20-byte InfiniBand address",
        "networks[1].name: 'Net_B' is not a DNS-1123 label (at most 63 lower-case letters, "
        "digits and '-', starting and ending with a letter or digit)",
        "networks[1].interface: 'eth0/1' is not a valid interface name: "
        "an interface name must not contain '/'",
        "networks[2]: 'net-c' is not a JSON object",
        "networks[3]: unknown key 'weird' (keys without a '.' are reserved for the standard, "
        "an implementation's own keys are reverse-domain names such as 'org.example.key')",
        "networks[3].bandwidth: 'egressBurst' is given without 'egressRate'",
    ]


@pytest.mark.req("SEL-CSV")
def test_every_comma_problem_is_reported_at_once() -> None:
    assert problems("ok, Bad, a/b/c,,x@") == [
        "networks[1].name: 'Bad' is not a DNS-1123 label (at most 63 lower-case letters, "
        "digits and '-', starting and ending with a letter or digit)",
        "networks[2]: 'a/b/c' has more than one '/'",
        "networks[3]: empty item in 'ok, Bad, a/b/c,,x@'",
        "networks[4].interface: '' is not a valid interface name: "
        "an interface name must not be empty",
    ]


def test_long_bad_values_are_cut() -> None:
    mac = "z" * 500
    (problem,) = bad(name="a", mac=mac)
    assert problem == f"networks[0].mac: {repr(mac)[:80]}... is not a 6-byte Ethernet or " + (
        "20-byte InfiniBand address"
    )


# --- limits (SEL-LIMITS) ---------------------------------------------------------------------


@pytest.mark.req("SEL-LIMITS")
def test_an_annotation_of_64_kib_is_read_and_one_byte_more_is_refused() -> None:
    def padded(size: int) -> str:
        head = '[{"name": "net-a"}'
        return head + " " * (size - len(head) - 1) + "]"

    assert parse(padded(65536)) == (sel("net-a"),)
    assert problems(padded(65537)) == [
        "networks: the annotation has 65537 bytes, more than the limit of 65536: "
        + repr(padded(65537))[:80]
        + "..."
    ]


@pytest.mark.req("SEL-LIMITS")
def test_the_size_limit_counts_utf8_bytes() -> None:
    text = "é" * 40000  # 40000 characters, 80000 bytes
    assert problems(text) == [
        "networks: the annotation has 80000 bytes, more than the limit of 65536: "
        + repr(text)[:80]
        + "..."
    ]


@pytest.mark.req("SEL-LIMITS")
@pytest.mark.parametrize(
    "text",
    [
        "x" * 10_000_000,
        "[" * 10_000_000,
        "[" * 100_000,
        "[" * 65_000,  # under the size limit: the nesting check refuses it
        '{"a":' * 13_000,
        '[{"name": "a", "cni-args": ' + "[" * 60_000,
        '"' + "\\" * 65_000,
        ",".join(["net-a"] * 10_000),
    ],
)
def test_hostile_annotations_are_refused_fast(text: str) -> None:
    started = time.perf_counter()
    refusal(text)
    assert time.perf_counter() - started < 0.5


@pytest.mark.req("SEL-LIMITS")
def test_nesting_is_measured_before_parsing() -> None:
    assert problems("[" * 65_000) == [
        "networks: the JSON nests 65000 levels deep, more than the limit of 8: "
        + repr("[" * 100)[:80]
        + "..."
    ]


@pytest.mark.req("SEL-LIMITS")
def test_json_recursion_is_caught_even_if_the_nesting_scan_missed_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(selection, "_nesting_depth", lambda text: 0)
    assert problems("[" * 30_000 + "]" * 30_000) == [
        "networks: the JSON nests too deep to parse, the limit is 8"
    ]


def nested(levels: int) -> str:
    """An annotation whose JSON nests `levels` deep: list, selection, cni-args, then lists."""
    inner = "[" * (levels - 3) + "]" * (levels - 3)
    return f'[{{"name": "a", "cni-args": {{"x": {inner or "1"}}}}}]'


@pytest.mark.req("SEL-LIMITS")
def test_nesting_8_deep_is_read_and_9_is_refused() -> None:
    (found,) = parse(nested(8))
    assert found.cni_args == {"x": [[[[[]]]]]}
    assert problems(nested(9)) == [
        f"networks: the JSON nests 9 levels deep, more than the limit of 8: {nested(9)!r}"
    ]


@pytest.mark.req("SEL-LIMITS")
def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = json.dumps([{"name": "a", "cni-args": {"x": '[[[[{{{{[[[[\\"]]]'}}])
    assert parse(text)[0].cni_args == {"x": '[[[[{{{{[[[[\\"]]]'}


@pytest.mark.req("SEL-LIMITS")
def test_64_selections_are_read_and_65_are_refused() -> None:
    assert len(parse(",".join(["net-a"] * 64))) == 64
    assert len(parse(json.dumps([{"name": "net-a"}] * 64))) == 64
    comma, listed = ",".join(["net-a"] * 65), json.dumps([{"name": "net-a"}] * 65)
    assert problems(comma) == [
        f"networks: 65 selections, more than the limit of 64: {repr(comma)[:80]}..."
    ]
    assert problems(listed) == [
        f"networks: 65 selections, more than the limit of 64: {repr(listed)[:80]}..."
    ]


@pytest.mark.req("SEL-LIMITS")
def test_strings_of_1024_characters_are_read_and_longer_are_refused() -> None:
    assert one(name="a", cni_args={"x": "y" * 1024}).cni_args == {"x": "y" * 1024}
    assert bad(name="a", cni_args={"x": "y" * 1025}) == [
        "networks[0].cni-args.x: a string of 1025 characters, more than the limit of 1024: "
        + repr("y" * 1025)[:80]
        + "..."
    ]
    (problem,) = bad(name="a", cni_args={"k" * 1025: 1})
    assert problem.startswith("networks[0].cni-args: a key of 1025 characters, more than the limit")


@pytest.mark.req("SEL-LIMITS")
def test_limit_problems_are_reported_before_field_problems() -> None:
    text = json.dumps([{"name": "BAD", "cni-args": {"x": "y" * 2000}}])
    (problem,) = problems(text)
    assert problem.startswith("networks[0].cni-args.x: a string of 2000 characters")


# --- properties ------------------------------------------------------------------------------

labels = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
ifnames = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.",
    min_size=1,
    max_size=15,
).filter(lambda name: name not in (".", ".."))


@st.composite
def addresses(draw: st.DrawFn, *, cidr: bool) -> str:
    address = draw(st.ip_addresses())
    text = draw(st.sampled_from([str(address), address.exploded, str(address).upper()]))
    if cidr and draw(st.booleans()):
        text += f"/{draw(st.integers(0, address.max_prefixlen))}"
    return text


@st.composite
def hardware_addresses(draw: st.DrawFn, sizes: tuple[int, ...]) -> str:
    size = draw(st.sampled_from(sizes))
    data = draw(st.binary(min_size=size, max_size=size))
    digits = data.hex()
    if draw(st.booleans()):
        digits = digits.upper()
    if draw(st.booleans()):
        return ".".join(digits[i : i + 4] for i in range(0, len(digits), 4))
    separator = draw(st.sampled_from(":-"))
    return separator.join(digits[i : i + 2] for i in range(0, len(digits), 2))


def json_scalars(bits: int, text_size: int) -> st.SearchStrategy[Any]:
    """null, booleans, integers within 2**bits either side, finite floats, short strings."""
    return (
        st.none()
        | st.booleans()
        | st.integers(-(2**bits), 2**bits)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=text_size)
    )


json_leaves = json_scalars(70, 20)
json_small = (
    json_leaves
    | st.lists(json_leaves, max_size=3)
    | st.dictionaries(st.text(max_size=10), json_leaves, max_size=3)
)
cni_args = st.dictionaries(st.text(max_size=10), json_small, max_size=4)

port_mappings = st.builds(
    selection.PortMapping,
    host_port=st.integers(1, 65535),
    container_port=st.integers(1, 65535),
    protocol=st.sampled_from(["tcp", "UDP", "Sctp", "TCP"]),
    host_ip=st.just("") | addresses(cidr=False),
)


@st.composite
def bandwidths(draw: st.DrawFn) -> selection.Bandwidth:
    # what the bandwidth plugin accepts: per direction nothing, 0 and 0, or both above 0
    fields: dict[str, int | None] = {}
    for direction in ("ingress", "egress"):
        shape = draw(st.sampled_from(["none", "zero", "limit"]))
        rate = burst = None
        if shape == "zero":
            rate = burst = 0
        elif shape == "limit":
            rate = draw(st.integers(1, 2**63 - 1))
            burst = draw(st.integers(1, 8 * (2**32 - 1) - 1))
        fields[f"{direction}_rate"], fields[f"{direction}_burst"] = rate, burst
    if all(value is None for value in fields.values()):
        fields["egress_rate"], fields["egress_burst"] = 1, 1
    return selection.Bandwidth(**fields)


def _not_v4_mapped(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None


@st.composite
def default_routes(draw: st.DrawFn) -> tuple[str, ...]:
    v4 = draw(st.none() | st.ip_addresses(v=4).map(str))
    v6 = draw(st.none() | st.ip_addresses(v=6).filter(_not_v4_mapped).map(str))
    gateways = [g for g in (v4, v6) if g is not None] or ["10.0.0.1"]
    return tuple(draw(st.permutations(gateways)))


@st.composite
def selections(draw: st.DrawFn) -> selection.Selection:
    claim = draw(st.just("") | labels)
    return selection.Selection(
        namespace=draw(labels),
        name=draw(labels),
        interface=draw(st.just("") | ifnames),
        ips=() if claim else tuple(draw(st.lists(addresses(cidr=True), max_size=3))),
        mac=draw(st.just("") | hardware_addresses((6, 20))),
        cni_args=draw(st.none() | cni_args),
        port_mappings=tuple(draw(st.lists(port_mappings, max_size=3))),
        bandwidth=draw(st.none() | bandwidths()),
        default_route=draw(st.just(()) | default_routes()),
        infiniband_guid=draw(st.just("") | hardware_addresses((8,))),
        ipam_claim_reference=claim,
    )


def only_first_default_route(found: list[selection.Selection]) -> list[selection.Selection]:
    """The selections with `default_route` dropped from all but the first that has one."""
    kept: list[selection.Selection] = []
    seen = False
    for item in found:
        if item.default_route and seen:
            kept.append(item._replace(default_route=()))
            continue
        seen = seen or bool(item.default_route)
        kept.append(item)
    return kept


def render(item: selection.Selection) -> dict[str, Any]:
    """`item` written as a JSON-form element, with the wire spellings."""
    raw: dict[str, Any] = {"name": item.name, "namespace": item.namespace}
    optional: dict[str, Any] = {
        "interface": item.interface,
        "ips": list(item.ips),
        "mac": item.mac,
        "cni-args": None if item.cni_args is None else dict(item.cni_args),
        "portMappings": [
            {**m.to_runtime_config(), "protocol": m.protocol} for m in item.port_mappings
        ],
        "bandwidth": None if item.bandwidth is None else item.bandwidth.to_runtime_config(),
        "default-route": list(item.default_route),
        "infiniband-guid": item.infiniband_guid,
        "ipam-claim-reference": item.ipam_claim_reference,
    }
    raw.update({key: value for key, value in optional.items() if value not in ("", [], None)})
    return raw


@pytest.mark.req("SEL-JSON")
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(selections(), max_size=5))
def test_rendered_selections_parse_back_to_themselves(found: list[selection.Selection]) -> None:
    expected = only_first_default_route(found)
    assert parse(json.dumps([render(item) for item in expected])) == tuple(expected)


@pytest.mark.req("SEL-CSV", "SEL-JSON")
@given(
    st.lists(
        st.tuples(st.none() | labels, labels, st.none() | ifnames.filter(lambda n: n.strip())),
        min_size=1,
        max_size=8,
    )
)
def test_both_forms_agree_on_any_comma_expressible_selection(
    items: list[tuple[str | None, str, str | None]],
) -> None:
    comma = ", ".join(
        (f"{namespace}/" if namespace else "") + name + (f"@{ifname}" if ifname else "")
        for namespace, name, ifname in items
    )
    elements = [
        {"name": name}
        | ({"namespace": namespace} if namespace else {})
        | ({"interface": ifname} if ifname else {})
        for namespace, name, ifname in items
    ]
    assert parse(comma) == parse(json.dumps(elements))


def refuses_only_as_invalid_selection(text: str) -> None:
    try:
        result = parse(text)
    except errors.InvalidSelectionError as exc:
        error = exc
    else:
        assert isinstance(result, tuple)
        assert all(isinstance(item, selection.Selection) for item in result)
        return
    assert error.code == 102
    assert error.msg == MSG
    assert error.details


@pytest.mark.req("SEL-LIMITS")
@settings(max_examples=500)
@given(st.text() | st.text(alphabet='[]{}",:/@ .\\-_0123456789abcdefnrtuxyzNI\x00é'))
def test_any_text_is_read_or_refused_as_an_invalid_selection(text: str) -> None:
    refuses_only_as_invalid_selection(text)


KEYS = [
    "name",
    "namespace",
    "ips",
    "mac",
    "interface",
    "interfaceRequest",
    "cni-args",
    "portMappings",
    "bandwidth",
    "default-route",
    "infiniband-guid",
    "ipam-claim-reference",
    "hostPort",
    "containerPort",
    "protocol",
    "hostIP",
    "ingressRate",
    "ingressBurst",
    "egressRate",
    "egressBurst",
    "org.example.key",
]
hostile_leaves = (
    json_scalars(64, 30) | labels | addresses(cidr=True) | hardware_addresses((6, 8, 20))
)
hostile_json = st.recursive(
    hostile_leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), children, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_json, max_size=4) | hostile_json)
def test_any_json_is_read_or_refused_as_an_invalid_selection(value: Any) -> None:
    refuses_only_as_invalid_selection(json.dumps(value))


@given(st.ip_addresses())
def test_every_address_python_formats_is_accepted(address: Any) -> None:
    text = str(ipaddress.ip_address(address))
    assert one(name="a", ips=[text]).ips == (text,)
