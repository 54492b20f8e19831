"""Property tests of netattach.cni.result: round trips, lossless and lossy conversions, robustness.

Strategies build valid results of each version (IPv4 and IPv6 alike); the lossy properties check
against a small reference model written here that what a conversion drops is exactly what the
CNI spec and libcni document, and nothing else.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.cni import errors, spec, version
from netattach.cni import result as cni_result
from netattach.cni.result_convert import convert

V020 = ("0.1.0", "0.2.0")
V040 = ("0.3.0", "0.3.1", "0.4.0")
V100 = ("1.0.0", "1.1.0")

# ---------------------------------------------------------------------------------------------
# Strategies

Family = Literal[4, 6]
FAMILIES: tuple[Family, ...] = (4, 6)
families: st.SearchStrategy[Family] = st.sampled_from(FAMILIES)
texts = st.text(max_size=10)
uints = st.integers(min_value=0, max_value=2**31)


def prefixed(family: Family) -> st.SearchStrategy[str]:
    """An address with a prefix length of `family`, as plugins write it ("10.1.0.5/16")."""
    bits = 32 if family == 4 else 128
    return st.tuples(st.ip_addresses(v=family), st.integers(0, bits)).map(
        lambda t: f"{t[0]}/{t[1]}"
    )


def plain(family: Family) -> st.SearchStrategy[str]:
    return st.ip_addresses(v=family).map(str)


def gateways(family: Family) -> st.SearchStrategy[str]:
    return st.one_of(st.just(""), plain(family))


def routes(cni_version: str, family: Family | None = None) -> st.SearchStrategy[cni_result.Route]:
    extra = version.at_least(cni_version, "1.1.0")
    zero: st.SearchStrategy[int] = st.just(0)
    none: st.SearchStrategy[int | None] = st.none()

    def of(fam: Family) -> st.SearchStrategy[cni_result.Route]:
        return st.builds(
            cni_result.Route,
            dst=prefixed(fam),
            gw=gateways(fam),
            mtu=uints if extra else zero,
            advmss=uints if extra else zero,
            priority=uints if extra else zero,
            table=st.none() | uints if extra else none,
            scope=st.none() | uints if extra else none,
        )

    return families.flatmap(of) if family is None else of(family)


def interfaces(cni_version: str) -> st.SearchStrategy[cni_result.Interface]:
    # mtu, socketPath and pciID all arrived with 1.1.0 (CNI "spec upgrades").
    has_11 = version.at_least(cni_version, "1.1.0")
    return st.builds(
        cni_result.Interface,
        name=st.text(min_size=1, max_size=15),
        mac=st.one_of(st.just(""), st.just("00:11:22:33:44:55"), texts),
        mtu=uints if has_11 else st.just(0),
        sandbox=st.one_of(st.just(""), st.just("/var/run/netns/blue"), texts),
        socket_path=texts if has_11 else st.just(""),
        pci_id=texts if has_11 else st.just(""),
    )


def ip_configs() -> st.SearchStrategy[cni_result.IPConfig]:
    # Indexes may point past `interfaces`: libcni accepts that and so must every property.
    return families.flatmap(
        lambda fam: st.builds(
            cni_result.IPConfig,
            address=prefixed(fam),
            gateway=gateways(fam),
            interface=st.none() | st.integers(0, 5),
        )
    )


def dnses() -> st.SearchStrategy[cni_result.DNS]:
    return st.builds(
        cni_result.DNS,
        nameservers=st.lists(st.ip_addresses().map(str), max_size=3).map(tuple),
        domain=texts,
        search=st.lists(texts, max_size=3).map(tuple),
        options=st.lists(texts, max_size=2).map(tuple),
    )


def results040(versions: tuple[str, ...] = V040) -> st.SearchStrategy[cni_result.Result040]:
    def at(v: str) -> st.SearchStrategy[cni_result.Result040]:
        return st.builds(
            cni_result.Result040,
            cni_version=st.just(v),
            interfaces=st.lists(interfaces(v), max_size=3).map(tuple),
            ips=st.lists(ip_configs(), max_size=4).map(tuple),
            routes=st.lists(routes(v), max_size=4).map(tuple),
            dns=dnses(),
        )

    return st.sampled_from(versions).flatmap(at)


def results100(
    versions: tuple[str, ...] = V100, *, fields_of: str | None = None
) -> st.SearchStrategy[cni_result.Result100]:
    """1.x results; `fields_of` limits interfaces and routes to what that version carries."""

    def at(v: str) -> st.SearchStrategy[cni_result.Result100]:
        fields = fields_of or v
        return st.builds(
            cni_result.Result100,
            cni_version=st.just(v),
            interfaces=st.lists(interfaces(fields), max_size=3).map(tuple),
            ips=st.lists(ip_configs(), max_size=4).map(tuple),
            routes=st.lists(routes(fields), max_size=4).map(tuple),
            dns=dnses(),
        )

    return st.sampled_from(versions).flatmap(at)


def ip_slot(family: Family) -> st.SearchStrategy[cni_result.IPv4or6Config]:
    return st.builds(
        cni_result.IPv4or6Config,
        ip=prefixed(family),
        gateway=gateways(family),
        routes=st.lists(routes("0.2.0", family), max_size=3).map(tuple),
    )


def results020(*, with_ip: bool = True) -> st.SearchStrategy[cni_result.Result020]:
    """0.1.0/0.2.0 results, each slot with routes of its family; `with_ip` needs ip4 or ip6."""
    built = st.builds(
        cni_result.Result020,
        cni_version=st.sampled_from(V020),
        ip4=st.none() | ip_slot(4),
        ip6=st.none() | ip_slot(6),
        dns=dnses(),
    )
    return built.filter(lambda r: r.ip4 is not None or r.ip6 is not None) if with_ip else built


any_result: st.SearchStrategy[cni_result.Result] = st.one_of(
    results020(with_ip=False), results040(), results100()
)


# ---------------------------------------------------------------------------------------------
# Reference model of the lossy directions (SPEC.md result layouts; libcni convertTo04x/To02x)


def _family(cidr: str) -> int:
    return ipaddress.ip_interface(cidr).version


def _route_0x(route: cni_result.Route) -> cni_result.Route:
    return cni_result.Route(dst=route.dst, gw=route.gw)


def _interface_0x(interface: cni_result.Interface) -> cni_result.Interface:
    return cni_result.Interface(name=interface.name, mac=interface.mac, sandbox=interface.sandbox)


def expected_020(
    result: cni_result.Result040 | cni_result.Result100, target: str
) -> cni_result.Result020 | None:
    """None when there is no address to keep (the conversion must then fail)."""
    slots: dict[int, cni_result.IPv4or6Config] = {}
    for fam in FAMILIES:
        first = next((ip for ip in result.ips if _family(ip.address) == fam), None)
        if first is not None:
            kept = tuple(_route_0x(r) for r in result.routes if _family(r.dst) == fam)
            slots[fam] = cni_result.IPv4or6Config(
                ip=first.address, gateway=first.gateway, routes=kept
            )
    if not slots:
        return None
    return cni_result.Result020(
        cni_version=target, ip4=slots.get(4), ip6=slots.get(6), dns=result.dns
    )


# ---------------------------------------------------------------------------------------------
# Writing and reading back


@given(any_result)
def test_from_raw_of_to_raw_is_the_result(result: cni_result.Result) -> None:
    raw = result.to_raw()
    assert type(result).from_raw(raw) == result
    # ...also through JSON text, and through cni_result.parse_result that picks the class itself.
    text = json.dumps(raw)
    assert cni_result.parse_result(json.loads(text), default_version="0.0.1") == result


@given(interfaces("1.1.0"), ip_configs(), routes("1.1.0"), dnses(), families.flatmap(ip_slot))
def test_components_read_back_what_they_write(
    interface: cni_result.Interface,
    ip: cni_result.IPConfig,
    route: cni_result.Route,
    dns: cni_result.DNS,
    slot: cni_result.IPv4or6Config,
) -> None:
    assert cni_result.Interface.from_raw(interface.to_raw()) == interface
    assert cni_result.IPConfig.from_raw(ip.to_raw()) == ip
    assert cni_result.IPConfig.from_raw(ip.to_raw(cni_version="0.4.0"), cni_version="0.4.0") == ip
    assert cni_result.Route.from_raw(route.to_raw()) == route
    assert cni_result.DNS.from_raw(dns.to_raw()) == dns
    assert cni_result.IPv4or6Config.from_raw(slot.to_raw()) == slot


_TOP_KEYS = {
    "0.2.0": {"cniVersion", "ip4", "ip6", "dns"},
    "0.4.0": {"cniVersion", "interfaces", "ips", "routes", "dns"},
    "1.0.0": {"cniVersion", "interfaces", "ips", "routes", "dns"},
}


def _interface_keys(v: str) -> set[str]:
    keys = {"name", "mac", "sandbox"}
    if version.at_least(v, "1.1.0"):
        keys |= {"mtu", "socketPath", "pciID"}
    return keys


def _route_keys(v: str) -> set[str]:
    extra = {"mtu", "advmss", "priority", "table", "scope"}
    return {"dst", "gw"} | (extra if version.at_least(v, "1.1.0") else set())


@pytest.mark.req("CNI-CONVERT")
@given(any_result, st.sampled_from(spec.VERSIONS))
def test_every_conversion_writes_exactly_the_wire_shape_of_its_version(
    result: cni_result.Result, target: str
) -> None:
    try:
        converted = convert(result, target)
    except errors.IncompatibleVersionError:
        assert version.family(target) == "0.2.0"
        return
    raw = converted.to_raw()
    layout = version.family(target)
    assert raw["cniVersion"] == target
    assert set(raw) <= _TOP_KEYS[layout]
    if layout == "0.2.0":
        for slot in ("ip4", "ip6"):
            entry = raw.get(slot)
            if entry is not None:
                assert isinstance(entry, dict)
                assert set(entry) <= {"ip", "gateway", "routes"}
                assert all(set(r) <= _route_keys(target) for r in _entries(entry, "routes"))
        return
    for ip in _entries(raw, "ips"):
        assert ("version" in ip) == (layout == "0.4.0")
        assert set(ip) <= {"version", "address", "gateway", "interface"}
    for interface in _entries(raw, "interfaces"):
        assert "name" in interface
        assert set(interface) <= _interface_keys(target)
    for route in _entries(raw, "routes"):
        assert set(route) <= _route_keys(target)
    # Empty lists and an empty dns are left out (omitempty), never written empty.
    for key in ("interfaces", "ips", "routes", "dns"):
        assert raw.get(key, "absent") not in ([], {}, None)


def _entries(raw: dict[str, object], key: str) -> list[dict[str, object]]:
    """The list of objects under `key` of written JSON (empty when the key is left out)."""
    value = raw.get(key, [])
    assert isinstance(value, list)
    assert all(isinstance(item, dict) for item in value)
    return value


# ---------------------------------------------------------------------------------------------
# Lossless round trips


@pytest.mark.req("CNI-CONVERT")
@given(results040(), st.sampled_from(V040))
def test_0_3_and_0_4_versions_convert_into_each_other_changing_only_cniversion(
    result: cni_result.Result040, other: str
) -> None:
    there = convert(result, other)
    assert there == result.replace(cni_version=other)
    assert convert(there, result.cni_version) == result


@pytest.mark.req("CNI-CONVERT")
@given(results020(with_ip=False), st.sampled_from(V020))
def test_0_1_and_0_2_convert_into_each_other_changing_only_cniversion(
    result: cni_result.Result020, other: str
) -> None:
    there = convert(result, other)
    assert there == result.replace(cni_version=other)
    assert convert(there, result.cni_version) == result


@pytest.mark.req("CNI-CONVERT")
@given(results100(("1.0.0",)))
def test_1_0_to_1_1_and_back_is_lossless(result: cni_result.Result100) -> None:
    up = convert(result, "1.1.0")
    assert up == result.replace(cni_version="1.1.0")
    assert convert(up, "1.0.0") == result


@pytest.mark.req("CNI-CONVERT")
@given(results100(("1.1.0",), fields_of="1.0.0"))
def test_1_1_without_1_1_fields_to_1_0_and_back_is_lossless(result: cni_result.Result100) -> None:
    assert convert(convert(result, "1.0.0"), "1.1.0") == result


@pytest.mark.req("CNI-CONVERT")
@given(results100(("1.0.0",)), st.sampled_from(V040))
def test_1_0_to_0_4_and_back_is_lossless(result: cni_result.Result100, down: str) -> None:
    # 1.0.0 interfaces and routes carry the same keys as 0.4.0 ones: nothing is dropped.
    there = convert(result, down)
    assert there == cni_result.Result040(
        cni_version=down,
        interfaces=result.interfaces,
        ips=result.ips,
        routes=result.routes,
        dns=result.dns,
    )
    assert convert(there, "1.0.0") == result


@pytest.mark.req("CNI-CONVERT")
@given(results040(), st.sampled_from(V100))
def test_0_4_to_1_x_and_back_is_lossless(result: cni_result.Result040, up: str) -> None:
    there = convert(result, up)
    assert isinstance(there, cni_result.Result100)
    assert (there.interfaces, there.ips, there.routes, there.dns) == (
        result.interfaces,
        result.ips,
        result.routes,
        result.dns,
    )
    assert convert(there, result.cni_version) == result


@pytest.mark.req("CNI-CONVERT")
@given(results100(fields_of="0.4.0"), st.sampled_from(V040))
def test_1_x_without_1_x_fields_to_0_4_and_back_is_lossless(
    result: cni_result.Result100, down: str
) -> None:
    assert convert(convert(result, down), result.cni_version) == result


@pytest.mark.req("CNI-CONVERT")
@given(results020(), st.sampled_from(V040 + V100))
def test_0_2_up_and_back_is_lossless(result: cni_result.Result020, up: str) -> None:
    there = convert(result, up)
    assert isinstance(there, cni_result.Result040 | cni_result.Result100)
    # libcni convertFrom02x: ip4 then ip6, no interface index; routes of ip4 then of ip6.
    slots = [s for s in (result.ip4, result.ip6) if s is not None]
    assert there.interfaces == ()
    assert there.ips == tuple(cni_result.IPConfig(address=s.ip, gateway=s.gateway) for s in slots)
    assert there.routes == tuple(r for s in slots for r in s.routes)
    assert there.dns == result.dns
    assert convert(there, result.cni_version) == result


# ---------------------------------------------------------------------------------------------
# Lossy directions: exactly the documented fields go


@pytest.mark.req("CNI-CONVERT")
@given(results100(("1.1.0",)))
def test_1_1_to_1_0_drops_exactly_interface_mtu_socketpath_pciid_and_route_attributes(
    result: cni_result.Result100,
) -> None:
    assert convert(result, "1.0.0") == cni_result.Result100(
        cni_version="1.0.0",
        interfaces=tuple(i._replace(mtu=0, socket_path="", pci_id="") for i in result.interfaces),
        ips=result.ips,
        routes=tuple(_route_0x(r) for r in result.routes),
        dns=result.dns,
    )


@pytest.mark.req("CNI-CONVERT")
@given(results100(), st.sampled_from(V040))
def test_1_x_to_0_4_drops_exactly_the_1_x_interface_and_route_fields(
    result: cni_result.Result100, down: str
) -> None:
    assert convert(result, down) == cni_result.Result040(
        cni_version=down,
        interfaces=tuple(_interface_0x(i) for i in result.interfaces),
        ips=result.ips,
        routes=tuple(_route_0x(r) for r in result.routes),
        dns=result.dns,
    )


@pytest.mark.req("CNI-CONVERT")
@given(st.one_of(results040(), results100()), st.sampled_from(V020))
def test_down_to_0_2_keeps_first_address_per_family_and_routes_by_dst_family(
    result: cni_result.Result040 | cni_result.Result100, down: str
) -> None:
    expected = expected_020(result, down)
    if expected is None:
        with pytest.raises(errors.IncompatibleVersionError, match="no IP addresses"):
            convert(result, down)
    else:
        assert convert(result, down) == expected


@pytest.mark.req("CNI-CONVERT")
@given(any_result, st.sampled_from(spec.VERSIONS), st.sampled_from(spec.VERSIONS))
def test_conversion_chains_agree_with_direct_conversion(
    result: cni_result.Result, mid: str, end: str
) -> None:
    # What a version can hold only grows with the version, so a detour through `mid` loses
    # nothing more than the direct conversion when `mid` is at least the older of the two ends
    # (libcni itself goes through 0.4.0 between 0.2.0 and 1.x).
    try:
        direct = convert(result, end)
        via = convert(convert(result, mid), end)
    except errors.IncompatibleVersionError:
        return
    if version.parse_version(mid) >= min(
        version.parse_version(result.cni_version), version.parse_version(end)
    ):
        assert via == direct


# ---------------------------------------------------------------------------------------------
# Robustness: any JSON a plugin prints gives a result or a CNI error, never a crash

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


def _paths(value: object, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def _replaced(value: object, path: tuple[str | int, ...], new: object) -> object:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict) and isinstance(head, str):
        return {**value, head: _replaced(value[head], rest, new)}
    assert isinstance(value, list)
    assert isinstance(head, int)
    return [_replaced(item, rest, new) if i == head else item for i, item in enumerate(value)]


def _parse_or_cni_error(raw: object) -> None:
    try:
        result = cni_result.parse_result(raw, default_version="1.0.0")
    except (errors.DecodingFailureError, errors.IncompatibleVersionError):
        return
    assert type(result).from_raw(result.to_raw()) == result


@given(json_values)
def test_arbitrary_json_gives_a_result_or_a_cni_error(raw: object) -> None:
    _parse_or_cni_error(raw)


@given(any_result, st.data())
def test_a_result_with_one_value_replaced_gives_a_result_or_a_cni_error(
    result: cni_result.Result, data: st.DataObject
) -> None:
    raw = result.to_raw()
    path = data.draw(st.sampled_from(list(_paths(raw))))
    _parse_or_cni_error(_replaced(raw, path, data.draw(json_values)))
