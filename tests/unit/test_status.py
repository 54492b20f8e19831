"""Tests of netattach.attach.status: network-status entries from CNI results (standard §5).

The golden files under golden/status/ were written by hand from the standard's §5 text and its
§5.4 example: each holds the `build_entry` arguments, the delegate's result as it printed it (or
null), the expected entry with its keys in the module's order, and the requirement IDs it proves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.attach import status
from netattach.cni import errors
from netattach.cni import result as cni_result

GOLDEN = Path(__file__).resolve().parent / "golden" / "status"
KEY_ORDER = (
    "name",
    "interface",
    "ips",
    "mac",
    "default",
    "dns",
    "gateway",
    "default-route",
    "device-info",
)


def _load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _entry_from_golden(case: Mapping[str, Any]) -> dict[str, object]:
    args = case["args"]
    raw = case["result"]
    # A result always names its version in these files; a default that is no version fails.
    result = None if raw is None else cni_result.parse_result(raw, default_version="99.0.0")
    return status.build_entry(
        name=args["name"],
        ifname=args["ifname"],
        result=result,
        default=args["default"],
        device_info=args.get("device_info"),
        gateways=args.get("gateways", ()),
    )


def _golden_params() -> list[Any]:
    params = []
    for path in sorted(GOLDEN.glob("*.json")):
        case = _load(path)
        marks = [pytest.mark.req(rid) for rid in case["proves"]]
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


# ---------------------------------------------------------------------------------------------
# Golden files


def test_golden_set_covers_the_cases_the_standard_names() -> None:
    names = {path.stem for path in GOLDEN.glob("*.json")}
    assert {
        "standard-example-default",
        "standard-example-some-network",
        "standard-example-infiniband",
        "result-0.2.0",
        "no-sandbox-interface",
        "bridge-host-interfaces-first",
        "mixed-interface-indexes",
        "no-result",
    } <= names


@pytest.mark.parametrize("path", _golden_params())
def test_golden_entry(path: Path) -> None:
    case = _load(path)
    entry = _entry_from_golden(case)
    assert entry == case["expected"], case["description"]
    # Same keys in the same order: the annotation text is stable across runs and versions.
    assert list(entry) == list(case["expected"])
    assert json.dumps(entry) == json.dumps(case["expected"])


@pytest.mark.req("STAT-KEYS")
def test_standard_example_annotation_is_rebuilt_from_the_three_results() -> None:
    # standard §5.4, the whole annotation: the default network entry and two secondary ones.
    names = ("standard-example-default", "standard-example-some-network")
    entries = [_entry_from_golden(_load(GOLDEN / f"{name}.json")) for name in names]
    entries.append(_entry_from_golden(_load(GOLDEN / "standard-example-infiniband.json")))
    annotation = status.build_status(entries)
    assert annotation == [
        {
            "name": "cluster-wide-default",
            "interface": "eth5",
            "ips": ["1.2.3.1/24", "2001:abba::2230/64"],
            "mac": "02:11:22:33:44:54",
            "default": True,
        },
        {
            "name": "some-network",
            "interface": "eth1",
            "ips": ["1.2.3.4/24", "2001:abba::2234/64"],
            "mac": "02:11:22:33:44:55",
            "dns": {
                "nameservers": ["4.2.2.1", "2001:4860:4860::8888"],
                "search": ["eng.foobar.com", "foobar.com"],
            },
            "default": False,
        },
        {
            "name": "other-ns/an-ip-over-infiniband-network",
            "interface": "ib0",
            "ips": ["5.4.3.2/16"],
            "mac": "80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22",
            "default": False,
        },
    ]
    assert status.STATUS_ANNOTATION == "k8s.v1.cni.cncf.io/network-status"


# ---------------------------------------------------------------------------------------------
# build_entry details


@pytest.mark.req("STAT-KEYS")
def test_dns_is_left_out_when_empty_and_options_never_appear() -> None:
    result = cni_result.Result100(
        cni_version="1.0.0",
        interfaces=(cni_result.Interface(name="net1", sandbox="/ns"),),
        dns=cni_result.DNS(options=("ndots:5",)),
    )
    entry = status.build_entry(name="a/b", ifname="net1", result=result, default=False)
    assert "dns" not in entry
    assert entry == {"name": "a/b", "interface": "net1", "default": False}


@pytest.mark.req("STAT-SRC")
def test_the_first_sandbox_interface_wins_even_when_ifname_differs() -> None:
    # §5.1.1: the status comes from the result's first sandbox interface, not from CNI_IFNAME.
    result = cni_result.Result040(
        cni_version="0.3.1",
        interfaces=(
            cni_result.Interface(name="host0"),
            cni_result.Interface(name="eth9", mac="02:00:00:00:00:09", sandbox="/ns"),
            cni_result.Interface(name="net1", mac="02:00:00:00:00:01", sandbox="/ns"),
        ),
        ips=(
            cni_result.IPConfig(address="10.0.0.9/8", interface=1),
            cni_result.IPConfig(address="10.0.0.1/8", interface=2),
        ),
    )
    entry = status.build_entry(name="a/b", ifname="net1", result=result, default=False)
    assert (entry["interface"], entry["mac"], entry["ips"]) == (
        "eth9",
        "02:00:00:00:00:09",
        ["10.0.0.9/8"],
    )


@pytest.mark.req("STAT-IPS")
def test_a_negative_interface_index_counts_as_no_interface() -> None:
    # §5.3.3.1 (2): "no interface property or an interface property less than zero". The parser
    # refuses a negative index; a cni_result.Result built in code can still hold one.
    result = cni_result.Result100(
        cni_version="1.0.0",
        ips=(
            cni_result.IPConfig(address="10.0.0.1/24", interface=-1),
            cni_result.IPConfig(address="10.0.0.2/24", interface=0),
            cni_result.IPConfig(address="10.0.0.3/24"),
        ),
    )
    entry = status.build_entry(name="a/b", ifname="net1", result=result, default=False)
    assert entry["ips"] == ["10.0.0.1/24", "10.0.0.3/24"]


@pytest.mark.req("STAT-COMPAT")
def test_gateways_appear_under_both_keys_and_are_copies() -> None:
    gateways = ["10.0.0.1"]
    entry = status.build_entry(
        name="a/b", ifname="net1", result=None, default=False, gateways=gateways
    )
    assert entry["gateway"] == entry["default-route"] == ["10.0.0.1"]
    gateways.append("10.0.0.2")
    assert entry["gateway"] == ["10.0.0.1"]
    assert entry["gateway"] is not entry["default-route"]


def test_device_info_is_copied_not_shared() -> None:
    info: dict[str, object] = {"type": "pci", "version": "1.1.0", "pci": {"pci-address": "x"}}
    entry = status.build_entry(
        name="a/b", ifname="net1", result=None, default=False, device_info=info
    )
    pci = info["pci"]
    assert isinstance(pci, dict)
    pci["pci-address"] = "changed"
    assert entry["device-info"] == {"type": "pci", "version": "1.1.0", "pci": {"pci-address": "x"}}


def test_an_empty_device_info_adds_nothing() -> None:
    entry = status.build_entry(name="a/b", ifname="net1", result=None, default=True, device_info={})
    assert "device-info" not in entry


# ---------------------------------------------------------------------------------------------
# build_status


def _minimal(name: str, default: bool) -> dict[str, object]:
    return status.build_entry(name=name, ifname="eth0", result=None, default=default)


@pytest.mark.req("STAT-KEYS")
def test_build_status_keeps_order_and_needs_exactly_one_default() -> None:
    entries = [_minimal("net-b", False), _minimal("default", True), _minimal("net-a", False)]
    built = status.build_status(entries)
    assert [e["name"] for e in built] == ["net-b", "default", "net-a"]
    assert built == entries
    assert built[0] is not entries[0]


@pytest.mark.req("STAT-KEYS")
@pytest.mark.parametrize(
    ("defaults", "expected"),
    [((False, False), "found 0"), ((True, True), "found 2 (n0, n1)")],
    ids=["none", "two"],
)
def test_build_status_refuses_zero_or_several_defaults(
    defaults: tuple[bool, ...], expected: str
) -> None:
    entries = [_minimal(f"n{i}", flag) for i, flag in enumerate(defaults)]
    with pytest.raises(errors.InternalError) as info:
        status.build_status(entries)
    assert expected in info.value.msg


def test_build_status_refuses_a_non_boolean_default_or_a_missing_name() -> None:
    entries: list[dict[str, object]] = [
        {"name": "default", "default": True},
        {"name": "x", "default": "false"},
        {"default": False},
    ]
    with pytest.raises(errors.InternalError) as info:
        status.build_status(entries)
    assert "'false'" in info.value.msg
    assert "entry 2 has no name" in info.value.msg


# ---------------------------------------------------------------------------------------------
# load_device_info


@pytest.mark.req("STAT-DEVINFO")
def test_device_info_file_is_loaded_and_lands_in_the_entry(tmp_path: Path) -> None:
    info = {
        "type": "pci",
        "version": "1.1.0",
        "pci": {"pci-address": "0000:18:02.5", "rdma-device": "mlx5_3"},
        "org.example.extra": [1, 2],
    }
    path = tmp_path / "sriov-net-net1.json"
    path.write_text(json.dumps(info), encoding="utf-8")
    problems: list[str] = []
    loaded = status.load_device_info(path, problems=problems)
    assert loaded == info
    assert problems == []
    entry = status.build_entry(
        name="ns/sriov-net", ifname="net1", result=None, default=False, device_info=loaded
    )
    assert entry["device-info"] == info
    assert list(entry)[-1] == "device-info"


def test_a_missing_device_info_file_is_none_without_a_problem(tmp_path: Path) -> None:
    problems: list[str] = []
    assert status.load_device_info(tmp_path / "absent.json", problems=problems) is None
    assert problems == []
    assert status.load_device_info(tmp_path / "no" / "such" / "dir.json") is None


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe\x00garbage", "not valid JSON"),
        (b"[1, 2]", "holds list, not an object"),
        (b'"pci"', "holds str"),
        (b'{"version": "1.1.0"}', "has type None"),
        (b'{"type": 7, "version": "1.1.0"}', "has type 7"),
        (b'{"type": "", "version": "1.1.0"}', "has type ''"),
        (b'{"type": "pci", "version": 1.1}', "has version 1.1"),
        (b"[" * 50_000, "not valid JSON"),
        (b" " * (status.DEVICE_INFO_MAX_BYTES + 1), "larger than"),
    ],
    ids=[
        "not-json",
        "not-utf8",
        "list",
        "string",
        "no-type",
        "type-int",
        "type-empty",
        "version-float",
        "deep-nesting",
        "oversize",
    ],
)
def test_a_malformed_device_info_file_is_skipped_with_a_problem(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    path = tmp_path / "dev.json"
    path.write_bytes(content)
    problems: list[str] = []
    assert status.load_device_info(path, problems=problems) is None
    assert len(problems) == 1
    assert expected in problems[0]
    assert str(path) in problems[0]
    assert status.load_device_info(path) is None  # without a collector: still no exception


def test_an_unreadable_device_info_path_is_skipped_with_a_problem(tmp_path: Path) -> None:
    problems: list[str] = []
    assert status.load_device_info(tmp_path, problems=problems) is None  # a directory
    assert problems
    assert "cannot be read" in problems[0]


# ---------------------------------------------------------------------------------------------
# Properties

Family = Literal[4, 6]


def _prefixed(family: Family) -> st.SearchStrategy[str]:
    bits = 32 if family == 4 else 128
    return st.tuples(st.ip_addresses(v=family), st.integers(0, bits)).map(
        lambda t: f"{t[0]}/{t[1]}"
    )


FAMILIES: tuple[Family, ...] = (4, 6)
addresses = st.sampled_from(FAMILIES).flatmap(_prefixed)
macs = st.sampled_from(("", "02:00:00:00:00:01", "0A:58:0A:F4:00:07"))
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=15)
sandboxes = st.sampled_from(("", "", "/var/run/netns/p", "/proc/1/ns/net"))
# The 1.1.0 fields left at their defaults, as every version carries the interface then:
# builds() draws every field of a NamedTuple it is not given, defaults included.
interfaces = st.builds(
    cni_result.Interface,
    name=names,
    mac=macs,
    sandbox=sandboxes,
    mtu=st.just(0),
    socket_path=st.just(""),
    pci_id=st.just(""),
)
dnses = st.builds(
    cni_result.DNS,
    nameservers=st.lists(st.ip_addresses().map(str), max_size=2).map(tuple),
    domain=st.sampled_from(("", "example.org")),
    search=st.lists(st.sampled_from(("a.example", "b.example")), max_size=2).map(tuple),
    options=st.lists(st.just("ndots:2"), max_size=1).map(tuple),
)


@st.composite
def layered_results(draw: st.DrawFn) -> cni_result.Result040 | cni_result.Result100:
    ifaces = tuple(draw(st.lists(interfaces, max_size=4)))
    index = st.none() | st.integers(-2, len(ifaces) + 1)
    ips = tuple(
        draw(
            st.lists(st.builds(cni_result.IPConfig, address=addresses, interface=index), max_size=6)
        )
    )
    version = draw(st.sampled_from(("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")))
    cls = cni_result.Result040 if version.startswith("0.") else cni_result.Result100
    return cls(cni_version=version, interfaces=ifaces, ips=ips, dns=draw(dnses))


@st.composite
def old_results(draw: st.DrawFn) -> cni_result.Result020:
    ip4 = draw(st.none() | _prefixed(4).map(lambda ip: cni_result.IPv4or6Config(ip=ip)))
    ip6 = draw(st.none() | _prefixed(6).map(lambda ip: cni_result.IPv4or6Config(ip=ip)))
    version = draw(st.sampled_from(("0.1.0", "0.2.0")))
    return cni_result.Result020(cni_version=version, ip4=ip4, ip6=ip6, dns=draw(dnses))


def _model_ips(result: cni_result.Result) -> list[str]:
    """§5.3.3.1 written out once more, as plainly as possible."""
    if isinstance(result, cni_result.Result020):
        return [c.ip for c in (result.ip4, result.ip6) if c is not None]
    sandbox = next((i for i, iface in enumerate(result.interfaces) if iface.sandbox), None)
    if sandbox is None:
        return [ip.address for ip in result.ips if ip.interface is None or ip.interface < 0]
    return [ip.address for ip in result.ips if ip.interface == sandbox]


@pytest.mark.req("STAT-IPS")
@given(result=layered_results() | old_results())
def test_exactly_the_sandbox_interface_ips_appear_with_their_prefixes(
    result: cni_result.Result,
) -> None:
    entry = status.build_entry(name="ns/net", ifname="net1", result=result, default=False)
    expected = _model_ips(result)
    if expected:
        # Verbatim strings: the prefix length and the plugin's spelling survive (STAT-COMPAT).
        assert entry["ips"] == expected
        assert all("/" in ip for ip in expected)
    else:
        assert "ips" not in entry


@pytest.mark.req("STAT-KEYS")
@given(
    result=st.none() | layered_results() | old_results(),
    default=st.booleans(),
    gateways=st.lists(st.ip_addresses().map(str), max_size=2),
)
def test_any_result_gives_a_json_entry_with_keys_in_order(
    result: cni_result.Result | None, default: bool, gateways: list[str]
) -> None:
    entry = status.build_entry(
        name="ns/net", ifname="net1", result=result, default=default, gateways=gateways
    )
    assert json.loads(json.dumps(entry)) == entry
    keys = list(entry)
    assert keys == [k for k in KEY_ORDER if k in entry]
    assert {"name", "interface", "default"} <= set(keys)
    assert entry["default"] is default
    assert "mac" not in entry or entry["interface"]
    dns = entry.get("dns", {})
    assert isinstance(dns, dict)
    assert set(dns) <= {"nameservers", "domain", "search"}
    assert all(dns.values())


@pytest.mark.req("STAT-SRC")
@given(result=layered_results())
def test_interface_and_mac_come_from_the_first_sandbox_interface(
    result: cni_result.Result040 | cni_result.Result100,
) -> None:
    entry = status.build_entry(name="ns/net", ifname="fallback0", result=result, default=False)
    first = next((iface for iface in result.interfaces if iface.sandbox), None)
    if first is None:
        assert entry["interface"] == "fallback0"
        assert "mac" not in entry
    else:
        assert entry["interface"] == first.name
        assert entry.get("mac", "") == first.mac
