"""Example-based tests of netattach.cni.result: golden conversions, validation and wire shape.

The golden files under golden/results/ were written by hand from the CNI SPEC.md examples:
`<name>.<version>.json` is a result as a plugin prints it, `<name>.<from>-to-<to>.json` the same
result converted as libcni's converters (pkg/types/020, 040, 100) do.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from netattach.cni import errors, spec
from netattach.cni.result import (
    DNS,
    Interface,
    IPConfig,
    IPv4or6Config,
    Result,
    Result020,
    Result040,
    Result100,
    Route,
    first_sandbox_interface,
    parse_result,
)
from netattach.cni.result_convert import convert

GOLDEN = Path(__file__).resolve().parent / "golden" / "results"
_SOURCE = re.compile(r"^(?P<name>[a-z0-9-]+)\.(?P<version>\d+\.\d+\.\d+)\.json$")
_CONVERTED = re.compile(
    r"^(?P<name>[a-z0-9-]+)\.(?P<src>\d+\.\d+\.\d+)-to-(?P<dst>\d+\.\d+\.\d+)\.json$"
)

CLASS_OF = {
    "0.1.0": Result020,
    "0.2.0": Result020,
    "0.3.0": Result040,
    "0.3.1": Result040,
    "0.4.0": Result040,
    "1.0.0": Result100,
    "1.1.0": Result100,
}


def _load(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _sources() -> list[tuple[str, str]]:
    found = []
    for path in sorted(GOLDEN.glob("*.json")):
        match = _SOURCE.match(path.name)
        if match:
            found.append((match["name"], match["version"]))
    return found


def _pairs() -> list[tuple[str, str, str]]:
    # Every source against every other version: a golden file that is missing fails the test.
    return [(name, src, dst) for name, src in _sources() for dst in spec.VERSIONS if dst != src]


def _parse(raw: dict[str, object]) -> Result:
    return parse_result(raw, default_version="99.0.0")  # a default that would fail if used


# ---------------------------------------------------------------------------------------------
# Golden files


def test_golden_set_covers_every_layout_and_every_conversion() -> None:
    sources = _sources()
    assert {CLASS_OF[version] for _, version in sources} == {Result020, Result040, Result100}
    assert "1.1.0" in {version for _, version in sources}
    expected = {f"{name}.{src}-to-{dst}.json" for name, src, dst in _pairs()}
    converted = {p.name for p in GOLDEN.glob("*.json") if _CONVERTED.match(p.name)}
    assert converted == expected
    stray = {p.name for p in GOLDEN.iterdir()} - converted - {f"{n}.{v}.json" for n, v in sources}
    assert stray == set()


@pytest.mark.parametrize(("name", "version"), _sources())
def test_golden_source_reads_and_writes_back_unchanged(name: str, version: str) -> None:
    raw = _load(GOLDEN / f"{name}.{version}.json")
    result = _parse(raw)
    assert type(result) is CLASS_OF[version]
    assert result.cni_version == version
    assert result.to_raw() == raw


@pytest.mark.req("CNI-CONVERT")
@pytest.mark.parametrize(("name", "src", "dst"), _pairs())
def test_golden_conversion(name: str, src: str, dst: str) -> None:
    expected_raw = _load(GOLDEN / f"{name}.{src}-to-{dst}.json")
    converted = convert(_parse(_load(GOLDEN / f"{name}.{src}.json")), dst)
    assert type(converted) is CLASS_OF[dst]
    assert converted.cni_version == dst
    assert converted.to_raw() == expected_raw
    # The golden file is itself a well-formed result of `dst` that reads back to the same value.
    assert _parse(expected_raw) == converted


# ---------------------------------------------------------------------------------------------
# Choosing the layout and the version


@pytest.mark.parametrize("version", spec.VERSIONS)
def test_parse_result_picks_the_class_of_cniversion(version: str) -> None:
    result = parse_result({"cniVersion": version}, default_version="1.1.0")
    assert type(result) is CLASS_OF[version]
    assert result.cni_version == version


@pytest.mark.parametrize("missing", [{}, {"cniVersion": None}, {"cniVersion": ""}])
def test_result_without_a_version_takes_the_config_version(missing: dict[str, object]) -> None:
    # libcni fixupResultVersion: an absent or empty cniVersion is the config's version.
    raw = {**missing, "ips": [{"version": "4", "address": "10.0.0.5/24"}]}
    result = parse_result(raw, default_version="0.3.1")
    assert result == Result040(cni_version="0.3.1", ips=(IPConfig(address="10.0.0.5/24"),))


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ("0.5.0", "unknown CNI result version '0.5.0'"),
        ("2.0.0", "unknown CNI result version '2.0.0'"),
        ("1.0", "invalid CNI version '1.0'"),
        ("v1.0.0", "invalid CNI version 'v1.0.0'"),
        (1, "cniVersion 1 is not a version string"),
        (["1.0.0"], "cniVersion ['1.0.0'] is not a version string"),
    ],
)
def test_unknown_or_malformed_version_is_code_1_naming_it(declared: object, message: str) -> None:
    with pytest.raises(errors.IncompatibleVersionError) as caught:
        parse_result({"cniVersion": declared}, default_version="1.0.0")
    assert message in caught.value.msg
    assert caught.value.code == 1


def test_unknown_default_version_is_code_1() -> None:
    with pytest.raises(errors.IncompatibleVersionError, match=r"'0\.9\.0'"):
        parse_result({"ips": []}, default_version="0.9.0")


@pytest.mark.parametrize("raw", [None, [], "ips", 3, True])
def test_result_that_is_not_an_object_is_code_6(raw: object) -> None:
    with pytest.raises(errors.DecodingFailureError) as caught:
        parse_result(raw, default_version="1.0.0")
    assert caught.value.msg == f"invalid result: {raw!r} is not an object"
    assert caught.value.code == 6


@pytest.mark.parametrize(
    ("cls", "raw"),
    [
        (Result020, {"cniVersion": "0.4.0"}),
        (Result040, {"cniVersion": "1.0.0"}),
        (Result100, {"cniVersion": "0.2.0"}),
        (Result100, {}),
    ],
)
def test_class_from_raw_refuses_other_versions(
    cls: type[Result020 | Result040 | Result100], raw: dict[str, object]
) -> None:
    with pytest.raises(errors.IncompatibleVersionError, match=cls.__name__):
        cls.from_raw(raw)


# ---------------------------------------------------------------------------------------------
# Validation: every malformed field is named, with its value quoted


def test_the_documented_example_message() -> None:
    raw = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.5/24"}, {"address": "x"}]}
    with pytest.raises(errors.DecodingFailureError) as caught:
        parse_result(raw, default_version="1.0.0")
    assert (
        caught.value.msg == "invalid result: ips[1].address: 'x' is not an IP address with prefix"
    )


def test_every_problem_is_reported_in_one_error() -> None:
    raw = {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": ""}, {"name": "eth0", "mtu": -1, "socketPath": 7}],
        "ips": [{"address": "10.0.0.5", "gateway": "2001:db8::1", "interface": True}],
        "routes": [{"gw": "10.0.0.1"}, {"dst": "10.9.0.0/16", "table": 1.5}],
        "dns": {"nameservers": ["10.0.0.2", 53], "search": "example"},
    }
    with pytest.raises(errors.DecodingFailureError) as caught:
        parse_result(raw, default_version="1.1.0")
    assert caught.value.msg.split("; ") == [
        "invalid result: interfaces[0].name: '' is not a non-empty string",
        "interfaces[1].mtu: -1 is not a non-negative integer",
        "interfaces[1].socketPath: 7 is not a string",
        # the gateway's family cannot be checked against an address that did not parse
        "ips[0].address: '10.0.0.5' is not an IP address with prefix",
        "ips[0].interface: True is not a non-negative integer",
        "routes[0].dst: missing",
        "routes[1].table: 1.5 is not a non-negative integer",
        "dns.nameservers[1]: 53 is not a string",
        "dns.search: 'example' is not a list",
    ]


@pytest.mark.parametrize(
    ("version", "raw", "problem"),
    [
        ("1.0.0", {"ips": "10.0.0.5/24"}, "ips: '10.0.0.5/24' is not a list"),
        ("1.0.0", {"ips": ["10.0.0.5/24"]}, "ips[0]: '10.0.0.5/24' is not an object"),
        ("1.0.0", {"ips": [{}]}, "ips[0].address: missing"),
        (
            "1.0.0",
            {"ips": [{"address": 10}]},
            "ips[0].address: 10 is not an IP address with prefix",
        ),
        (
            "1.0.0",
            {"ips": [{"address": "10.0.0.5/255.255.255.0"}]},
            "ips[0].address: '10.0.0.5/255.255.255.0' is not an IP address with prefix",
        ),
        (
            "1.0.0",
            {"ips": [{"address": "10.0.0.5/33"}]},
            "ips[0].address: '10.0.0.5/33' is not an IP address with prefix",
        ),
        (
            "1.0.0",
            {"ips": [{"address": "fe80::1%eth0/64"}]},
            "ips[0].address: 'fe80::1%eth0/64' is not an IP address with prefix",
        ),
        (
            "1.0.0",
            {"ips": [{"address": "10.0.0.5/24", "gateway": "10.0.0.1/24"}]},
            "ips[0].gateway: '10.0.0.1/24' is not an IP address",
        ),
        (
            "1.0.0",
            {"ips": [{"address": "10.0.0.5/24", "gateway": "2001:db8::1"}]},
            "ips[0].gateway: '2001:db8::1' is not an IPv4 address like the address",
        ),
        (
            "1.0.0",
            {"ips": [{"address": "2001:db8::5/64", "gateway": "10.0.0.1"}]},
            "ips[0].gateway: '10.0.0.1' is not an IPv6 address like the address",
        ),
        (
            "1.0.0",
            {"ips": [{"address": "10.0.0.5/24", "interface": -1}]},
            "ips[0].interface: -1 is not a non-negative integer",
        ),
        (
            "1.0.0",
            {"ips": [{"address": "10.0.0.5/24", "interface": False}]},
            "ips[0].interface: False is not a non-negative integer",
        ),
        (
            "1.0.0",
            {"ips": [{"address": "10.0.0.5/24", "interface": "0"}]},
            "ips[0].interface: '0' is not a non-negative integer",
        ),
        (
            "0.4.0",
            {"ips": [{"version": "6", "address": "10.0.0.5/24"}]},
            "ips[0].version: '6' does not match the address '10.0.0.5/24'",
        ),
        (
            "0.3.0",
            {"ips": [{"version": 4, "address": "10.0.0.5/24"}]},
            'ips[0].version: 4 is not "4" or "6"',
        ),
        ("1.0.0", {"interfaces": [{}]}, "interfaces[0].name: missing"),
        ("1.0.0", {"interfaces": [{"name": 5}]}, "interfaces[0].name: 5 is not a non-empty string"),
        (
            "0.4.0",
            {"interfaces": [{"name": "a", "mac": 1}]},
            "interfaces[0].mac: 1 is not a string",
        ),
        (
            "1.1.0",
            {"interfaces": [{"name": "a", "mtu": 1500.0}]},
            "interfaces[0].mtu: 1500.0 is not a non-negative integer",
        ),
        (
            "1.0.0",
            {"interfaces": [{"name": "a", "sandbox": []}]},
            "interfaces[0].sandbox: [] is not a string",
        ),
        (
            "1.1.0",
            {"interfaces": [{"name": "a", "pciID": 3}]},
            "interfaces[0].pciID: 3 is not a string",
        ),
        (
            "1.0.0",
            {"routes": [{"dst": "10.0.0.1"}]},
            "routes[0].dst: '10.0.0.1' is not an IP prefix in CIDR notation",
        ),
        (
            "1.0.0",
            {"routes": [{"dst": "::/0", "gw": "10.0.0.1"}]},
            "routes[0].gw: '10.0.0.1' is not an IPv6 address like the dst",
        ),
        (
            "1.1.0",
            {"routes": [{"dst": "::/0", "scope": -3}]},
            "routes[0].scope: -3 is not a non-negative integer",
        ),
        (
            "1.1.0",
            {"routes": [{"dst": "::/0", "advmss": "1460"}]},
            "routes[0].advmss: '1460' is not a non-negative integer",
        ),
        ("1.0.0", {"dns": []}, "dns: [] is not an object"),
        ("1.0.0", {"dns": {"domain": ["a"]}}, "dns.domain: ['a'] is not a string"),
        ("0.2.0", {"ip4": "10.0.0.5/24"}, "ip4: '10.0.0.5/24' is not an object"),
        ("0.2.0", {"ip4": {}}, "ip4.ip: missing"),
        (
            "0.2.0",
            {"ip4": {"ip": "2001:db8::5/64"}},
            "ip4.ip: '2001:db8::5/64' is not an IPv4 address with prefix",
        ),
        (
            "0.1.0",
            {"ip6": {"ip": "10.0.0.5/24"}},
            "ip6.ip: '10.0.0.5/24' is not an IPv6 address with prefix",
        ),
        (
            "0.2.0",
            {"ip4": {"ip": "10.0.0.5/24", "gateway": "fe80::1"}},
            "ip4.gateway: 'fe80::1' is not an IPv4 address like the ip",
        ),
        (
            "0.2.0",
            {"ip4": {"ip": "10.0.0.5/24", "routes": [{"dst": "::/0"}]}},
            "ip4.routes[0].dst: '::/0' is not an IPv4 prefix in CIDR notation",
        ),
        (
            "0.2.0",
            {"ip6": {"ip": "2001:db8::5/64", "routes": {"dst": "::/0"}}},
            "ip6.routes: {'dst': '::/0'} is not a list",
        ),
    ],
)
def test_malformed_field_is_code_6_naming_field_and_value(
    version: str, raw: dict[str, object], problem: str
) -> None:
    with pytest.raises(errors.DecodingFailureError) as caught:
        parse_result({"cniVersion": version, **raw}, default_version=version)
    assert caught.value.msg == f"invalid result: {problem}"
    assert caught.value.code == 6


def test_a_huge_bad_value_is_quoted_shortened() -> None:
    huge = "x" * 10_000
    with pytest.raises(errors.DecodingFailureError) as caught:
        parse_result({"cniVersion": "1.0.0", "ips": [{"address": huge}]}, default_version="1.0.0")
    assert caught.value.msg.startswith("invalid result: ips[0].address: 'xxxx")
    assert "...' is not" not in caught.value.msg  # the cut is inside the quoted text
    assert caught.value.msg.endswith("... is not an IP address with prefix")
    assert len(caught.value.msg) < 200


# ---------------------------------------------------------------------------------------------
# What is accepted, as libcni accepts it


def test_interface_index_past_the_list_is_accepted_like_libcni() -> None:
    # libcni's decoders take any int here; only the plugins' ipam.ConfigureIface checks it.
    result = parse_result(
        {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/a"}],
            "ips": [{"address": "10.0.0.5/24", "interface": 3}],
        },
        default_version="1.0.0",
    )
    assert isinstance(result, Result100)
    assert result.ips[0].interface == 3
    assert first_sandbox_interface(result) == (
        0,
        Interface(name="eth0", sandbox="/var/run/netns/a"),
    )


def test_ipam_result_with_interface_index_and_no_interfaces_is_accepted() -> None:
    result = parse_result(
        {
            "cniVersion": "0.4.0",
            "ips": [{"version": "4", "address": "10.0.0.5/24", "interface": 0}],
        },
        default_version="0.4.0",
    )
    assert isinstance(result, Result040)
    assert result.interfaces == ()
    assert result.ips == (IPConfig(address="10.0.0.5/24", interface=0),)


def test_nulls_and_empty_gateways_mean_absent() -> None:
    raw = {
        "cniVersion": "1.1.0",
        "interfaces": None,
        "ips": [{"address": "10.0.0.5/24", "gateway": "", "interface": None}],
        "routes": [{"dst": "0.0.0.0/0", "gw": None, "table": None, "mtu": None}],
        "dns": None,
    }
    assert parse_result(raw, default_version="1.1.0") == Result100(
        cni_version="1.1.0",
        ips=(IPConfig(address="10.0.0.5/24"),),
        routes=(Route(dst="0.0.0.0/0"),),
    )


def test_version_key_may_be_absent_in_0_4_0_and_is_ignored_in_1_0_0() -> None:
    without = parse_result(
        {"cniVersion": "0.4.0", "ips": [{"address": "2001:db8::5/64"}]}, default_version="0.4.0"
    )
    assert without == Result040(cni_version="0.4.0", ips=(IPConfig(address="2001:db8::5/64"),))
    # In 1.0.0 the key does not exist, so even a wrong value is an unknown key.
    wrong = parse_result(
        {"cniVersion": "1.0.0", "ips": [{"version": "4", "address": "2001:db8::5/64"}]},
        default_version="1.0.0",
    )
    assert wrong == Result100(cni_version="1.0.0", ips=(IPConfig(address="2001:db8::5/64"),))


def test_unknown_keys_are_ignored_at_every_level() -> None:
    raw = {
        "cniVersion": "0.4.0",
        "plugin.example/extra": {"anything": [1, 2]},
        "interfaces": [{"name": "eth0", "metadata": {"a": "b"}, "mtu": "not even a number"}],
        "ips": [{"version": "4", "address": "10.0.0.5/24", "note": 1}],
        "routes": [{"dst": "0.0.0.0/0", "table": "main", "scope": -1}],
        "dns": {"nameservers": ["10.0.0.2"], "ttl": 5},
    }
    # mtu, table and scope are not 0.4.0 keys: ignored, not validated.
    assert parse_result(raw, default_version="0.4.0") == Result040(
        cni_version="0.4.0",
        interfaces=(Interface(name="eth0"),),
        ips=(IPConfig(address="10.0.0.5/24"),),
        routes=(Route(dst="0.0.0.0/0"),),
        dns=DNS(nameservers=("10.0.0.2",)),
    )


def test_1_1_keys_including_interface_mtu_are_ignored_in_a_1_0_0_result() -> None:
    # Interface mtu, socketPath and pciID and the route attributes all arrived with 1.1.0
    # (CNI "spec upgrades": "New fields mtu, socketPath and pciID ... to interfaces").
    raw = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "net1", "mtu": 9000, "socketPath": "/s", "pciID": "0000:00:01.0"}],
        "routes": [
            {"dst": "0.0.0.0/0", "mtu": 1400, "advmss": 1360, "priority": 5, "table": 7, "scope": 0}
        ],
    }
    assert parse_result(raw, default_version="1.0.0") == Result100(
        cni_version="1.0.0",
        interfaces=(Interface(name="net1"),),
        routes=(Route(dst="0.0.0.0/0"),),
    )
    # An unknown key is ignored, not validated: a malformed interface mtu is no error in 1.0.0.
    assert Interface.from_raw({"name": "net1", "mtu": -1}, cni_version="1.0.0") == Interface(
        name="net1"
    )
    # The same keys are read in a 1.1.0 result.
    assert parse_result({**raw, "cniVersion": "1.1.0"}, default_version="1.0.0") == Result100(
        cni_version="1.1.0",
        interfaces=(Interface(name="net1", mtu=9000, socket_path="/s", pci_id="0000:00:01.0"),),
        routes=(Route(dst="0.0.0.0/0", mtu=1400, advmss=1360, priority=5, table=7, scope=0),),
    )


def test_addresses_are_kept_as_written() -> None:
    raw = {
        "cniVersion": "1.0.0",
        "ips": [{"address": "2001:DB8:0::5/64", "gateway": "2001:db8::1"}],
    }
    result = parse_result(raw, default_version="1.0.0")
    assert isinstance(result, Result100)
    assert result.ips[0].address == "2001:DB8:0::5/64"
    assert result.ips[0].version == "6"
    # Host bits in a dst are accepted, as Go's ParseCIDR accepts them.
    assert Route.from_raw({"dst": "10.1.2.3/8"}).dst == "10.1.2.3/8"


# ---------------------------------------------------------------------------------------------
# Writing: exactly the wire shape of the version


def test_to_raw_writes_version_only_for_0_3_and_0_4_ips() -> None:
    ips = (IPConfig(address="10.0.0.5/24", interface=0), IPConfig(address="2001:db8::5/64"))
    assert Result040(cni_version="0.3.0", ips=ips).to_raw() == {
        "cniVersion": "0.3.0",
        "ips": [
            {"version": "4", "address": "10.0.0.5/24", "interface": 0},
            {"version": "6", "address": "2001:db8::5/64"},
        ],
    }
    assert Result100(cni_version="1.0.0", ips=ips).to_raw() == {
        "cniVersion": "1.0.0",
        "ips": [{"address": "10.0.0.5/24", "interface": 0}, {"address": "2001:db8::5/64"}],
    }


def test_to_raw_leaves_out_empty_parts_but_always_writes_cniversion() -> None:
    for cls, version in ((Result020, "0.1.0"), (Result040, "0.3.1"), (Result100, "1.1.0")):
        assert cls(cni_version=version).to_raw() == {"cniVersion": version}


def test_to_raw_writes_route_table_and_scope_zero_but_not_zero_mtu() -> None:
    route = Route(dst="0.0.0.0/0", table=0, scope=0)
    assert route.to_raw() == {"dst": "0.0.0.0/0", "table": 0, "scope": 0}
    assert route.to_raw(cni_version="1.0.0") == {"dst": "0.0.0.0/0"}
    assert Route.from_raw({"dst": "0.0.0.0/0", "table": 0, "scope": 0}) == route


def test_interface_to_raw_follows_the_version() -> None:
    interface = Interface(
        name="net1", mac="aa:bb:cc:dd:ee:ff", mtu=1400, sandbox="/ns", socket_path="/s", pci_id="p"
    )
    assert interface.to_raw() == {
        "name": "net1",
        "mac": "aa:bb:cc:dd:ee:ff",
        "mtu": 1400,
        "sandbox": "/ns",
        "socketPath": "/s",
        "pciID": "p",
    }
    assert interface.to_raw(cni_version="1.0.0") == {
        "name": "net1",
        "mac": "aa:bb:cc:dd:ee:ff",
        "sandbox": "/ns",
    }
    assert interface.to_raw(cni_version="0.4.0") == {
        "name": "net1",
        "mac": "aa:bb:cc:dd:ee:ff",
        "sandbox": "/ns",
    }
    assert Interface.from_raw(interface.to_raw()) == interface


def test_component_from_raw_reports_its_own_subject() -> None:
    with pytest.raises(errors.DecodingFailureError) as caught:
        IPv4or6Config.from_raw({"ip": "10.0.0.5/24", "routes": [{"dst": "::/0"}]})
    assert (
        caught.value.msg
        == "invalid IP configuration: routes[0].dst: '::/0' is not an IPv4 prefix in CIDR notation"
    )
    with pytest.raises(
        errors.DecodingFailureError, match=r"^invalid DNS: search\[0\]: 1 is not a string$"
    ):
        DNS.from_raw({"search": [1]})


# ---------------------------------------------------------------------------------------------
# A result cannot hold what its version cannot write


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: Result040(cni_version="0.4.0", interfaces=(Interface(name="a", mtu=1500),)),
            "a 0.4.0 result cannot carry interfaces[0].mtu",
        ),
        (
            lambda: Result100(cni_version="1.0.0", interfaces=(Interface(name="a", mtu=1500),)),
            "a 1.0.0 result cannot carry interfaces[0].mtu",
        ),
        (
            lambda: Result100(
                cni_version="1.0.0", interfaces=(Interface(name="a", socket_path="/s", pci_id="p"),)
            ),
            "a 1.0.0 result cannot carry interfaces[0].socket_path, interfaces[0].pci_id",
        ),
        (
            lambda: Result100(
                cni_version="1.0.0", routes=(Route(dst="::/0"), Route(dst="::/0", scope=0))
            ),
            "a 1.0.0 result cannot carry routes[1].scope",
        ),
        (
            lambda: Result020(
                cni_version="0.2.0",
                ip6=IPv4or6Config(ip="::1/128", routes=(Route(dst="::/0", mtu=1),)),
            ),
            "a 0.2.0 result cannot carry ip6.routes[0].mtu",
        ),
        (
            lambda: Result100(cni_version="0.4.0"),
            "Result100 is for CNI versions 1.0.0, 1.1.0, not '0.4.0'",
        ),
        (
            lambda: Result020(cni_version="1.0.0"),
            "Result020 is for CNI versions 0.1.0, 0.2.0, not '1.0.0'",
        ),
    ],
)
def test_constructing_a_result_beyond_its_version_is_refused(build: object, message: str) -> None:
    assert callable(build)
    with pytest.raises(errors.IncompatibleVersionError) as caught:
        build()
    assert caught.value.msg.startswith(message)


def test_1_1_result_with_1_1_fields_is_accepted() -> None:
    result = Result100(
        cni_version="1.1.0",
        interfaces=(Interface(name="a", mtu=1, socket_path="/s", pci_id="p"),),
        routes=(Route(dst="::/0", mtu=1, advmss=1, priority=1, table=0, scope=0),),
    )
    assert Result100.from_raw(result.to_raw()) == result


# ---------------------------------------------------------------------------------------------
# Conversion


BRIDGE_100 = Result100(
    cni_version="1.1.0",
    interfaces=(
        Interface(name="cni0", mac="00:11:22:33:44:55"),
        Interface(
            name="eth0",
            mac="99:88:77:66:55:44",
            mtu=1450,
            sandbox="/var/run/netns/blue",
            pci_id="p",
        ),
    ),
    ips=(
        IPConfig(address="2001:db8::5/64", interface=1),
        IPConfig(address="10.1.0.5/16", gateway="10.1.0.1", interface=1),
        IPConfig(address="10.1.0.6/16", interface=1),
        IPConfig(address="2001:db8::6/64", gateway="2001:db8::1", interface=1),
    ),
    routes=(
        Route(dst="::/0", gw="2001:db8::1", priority=10),
        Route(dst="0.0.0.0/0", table=100),
        Route(dst="10.9.0.0/16", gw="10.1.0.254"),
    ),
    dns=DNS(nameservers=("10.1.0.1",)),
)


@pytest.mark.req("CNI-CONVERT")
@pytest.mark.parametrize("target", ["0.1.0", "0.2.0"])
def test_down_to_0_2_keeps_the_first_address_of_each_family(target: str) -> None:
    converted = convert(BRIDGE_100, target)
    assert converted == Result020(
        cni_version=target,
        ip4=IPv4or6Config(
            ip="10.1.0.5/16",
            gateway="10.1.0.1",
            routes=(Route(dst="0.0.0.0/0"), Route(dst="10.9.0.0/16", gw="10.1.0.254")),
        ),
        ip6=IPv4or6Config(ip="2001:db8::5/64", routes=(Route(dst="::/0", gw="2001:db8::1"),)),
        dns=DNS(nameservers=("10.1.0.1",)),
    )


@pytest.mark.req("CNI-CONVERT")
def test_down_to_0_2_drops_routes_of_a_family_without_address() -> None:
    only_v6 = Result040(
        cni_version="0.4.0",
        ips=(IPConfig(address="2001:db8::5/64"),),
        routes=(Route(dst="0.0.0.0/0", gw="10.0.0.1"), Route(dst="2001:db8:1::/48")),
    )
    assert convert(only_v6, "0.2.0") == Result020(
        cni_version="0.2.0",
        ip6=IPv4or6Config(ip="2001:db8::5/64", routes=(Route(dst="2001:db8:1::/48"),)),
    )


@pytest.mark.req("CNI-CONVERT")
@pytest.mark.parametrize("source", ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
@pytest.mark.parametrize("target", ["0.1.0", "0.2.0"])
def test_result_without_ip_cannot_go_to_0_2(source: str, target: str) -> None:
    interfaces = (Interface(name="eth0", sandbox="/var/run/netns/blue"),)
    routes = (Route(dst="0.0.0.0/0"),)
    result: Result
    if source.startswith("0."):
        result = Result040(cni_version=source, interfaces=interfaces, routes=routes)
    else:
        result = Result100(cni_version=source, interfaces=interfaces, routes=routes)
    with pytest.raises(errors.IncompatibleVersionError) as caught:
        convert(result, target)
    assert caught.value.msg == f"cannot convert result from {source} to {target}: no IP addresses"
    assert caught.value.code == 1


@pytest.mark.req("CNI-CONVERT")
def test_0_2_result_without_ip_goes_up_but_not_back() -> None:
    empty = Result020(cni_version="0.2.0", dns=DNS(domain="example"))
    up = convert(empty, "1.0.0")
    assert up == Result100(cni_version="1.0.0", dns=DNS(domain="example"))
    assert convert(empty, "0.1.0") == Result020(cni_version="0.1.0", dns=DNS(domain="example"))
    with pytest.raises(errors.IncompatibleVersionError, match="no IP addresses"):
        convert(up, "0.2.0")


@pytest.mark.req("CNI-CONVERT")
def test_1_1_to_1_0_drops_only_the_1_1_fields() -> None:
    converted = convert(BRIDGE_100, "1.0.0")
    assert converted == Result100(
        cni_version="1.0.0",
        interfaces=(
            Interface(name="cni0", mac="00:11:22:33:44:55"),
            Interface(name="eth0", mac="99:88:77:66:55:44", sandbox="/var/run/netns/blue"),
        ),
        ips=BRIDGE_100.ips,
        routes=(
            Route(dst="::/0", gw="2001:db8::1"),
            Route(dst="0.0.0.0/0"),
            Route(dst="10.9.0.0/16", gw="10.1.0.254"),
        ),
        dns=BRIDGE_100.dns,
    )


@pytest.mark.req("CNI-CONVERT")
@pytest.mark.parametrize("target", ["0.3.0", "0.3.1", "0.4.0"])
def test_1_1_to_0_4_drops_the_1_1_interface_and_route_fields(target: str) -> None:
    converted = convert(BRIDGE_100, target)
    assert isinstance(converted, Result040)
    assert converted.cni_version == target
    assert converted.interfaces[1] == Interface(
        name="eth0", mac="99:88:77:66:55:44", sandbox="/var/run/netns/blue"
    )
    assert converted.ips == BRIDGE_100.ips
    assert [r.to_raw() for r in converted.routes] == [
        {"dst": "::/0", "gw": "2001:db8::1"},
        {"dst": "0.0.0.0/0"},
        {"dst": "10.9.0.0/16", "gw": "10.1.0.254"},
    ]


@pytest.mark.req("CNI-CONVERT")
def test_converting_to_the_same_version_returns_the_result_itself() -> None:
    assert convert(BRIDGE_100, "1.1.0") is BRIDGE_100


@pytest.mark.req("CNI-CONVERT")
@pytest.mark.parametrize("target", ["0.5.0", "1.2.0", "1.0", ""])
def test_converting_to_an_unknown_version_is_code_1(target: str) -> None:
    with pytest.raises(errors.IncompatibleVersionError, match=repr(target)):
        convert(BRIDGE_100, target)


# ---------------------------------------------------------------------------------------------
# Helpers


def test_first_sandbox_interface_skips_host_interfaces() -> None:
    assert first_sandbox_interface(BRIDGE_100) == (1, BRIDGE_100.interfaces[1])
    host_only = Result040(
        cni_version="0.4.0", interfaces=(Interface(name="cni0"), Interface(name="veth1"))
    )
    assert first_sandbox_interface(host_only) is None
    assert first_sandbox_interface(Result100(cni_version="1.0.0")) is None


@pytest.mark.parametrize(
    ("address", "family"),
    [
        ("10.0.0.5/24", "4"),
        ("0.0.0.0/0", "4"),
        ("2001:db8::5/64", "6"),
        ("::/0", "6"),
        ("::ffff:10.0.0.5/120", "6"),
    ],
)
def test_ipconfig_version_is_the_address_family(address: str, family: str) -> None:
    assert IPConfig(address=address).version == family
