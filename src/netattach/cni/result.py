"""CNI results: the Success object of every spec version, read, checked and written.

This module owns the result a plugin prints for ADD (SPEC.md "Result" up to 0.4.0, "Section 5:
Result Types" from 1.0.0) in its three layouts:

    Result020   0.1.0, 0.2.0          `ip4` / `ip6`, each with its own `routes`; `dns`
    Result040   0.3.0, 0.3.1, 0.4.0   `interfaces`, `ips` (with "version"), `routes`, `dns`
    Result100   1.0.0, 1.1.0          as 0.4.0 but `ips` without "version"; 1.1.0 adds
                                      interface `mtu`/`socketPath`/`pciID` and route
                                      `mtu`/`advmss`/`priority`/`table`/`scope`

`parse_result` reads a plugin's output, picking the layout from `cniVersion` and reporting every
malformed field at once (the field readers are in `result_fields`); `result_convert.convert`
moves a result between any two versions the way libcni's converters do (pkg/types/020, 040,
100); each type's `to_raw` writes exactly the wire form of its version, so
`X.from_raw(x.to_raw()) == x`.

Choices worth knowing:
  * Addresses are validated with `ipaddress` but kept as the plugin wrote them (no
    canonicalisation), so what a plugin reported is what the runtime and the status see.
  * Keys a version does not define are ignored on input and never written on output.
  * An `interface` index past the end of `interfaces` is accepted, as libcni's decoders accept it
    (only the plugins' `ipam.ConfigureIface` rejects it); consumers look it up defensively.

Standard library only: the CNI vocabulary must not depend on anything else.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping

from netattach import values
from netattach.cni import errors, spec, version
from netattach.cni import result_fields as fields
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar, Final, Self, TypeAlias, TypeVar

# The versions of each layout, oldest first (version.family names a layout by its newest member).
_V020: Final = tuple(v for v in spec.VERSIONS if version.family(v) == "0.2.0")
_V040: Final = tuple(v for v in spec.VERSIONS if version.family(v) == "0.4.0")
_V100: Final = tuple(v for v in spec.VERSIONS if version.family(v) == "1.0.0")


# --------------------------------------------------------------------------------------------
# Fields a version cannot carry (which version carries which: result_fields.*_SINCE).


def _unsupported(obj: Interface | Route, since: Mapping[str, str], cni_version: str) -> list[str]:
    """The optional fields of `obj` that are set although `cni_version` has no key for them."""
    defaults = obj._field_defaults
    return [
        name
        for name, first in since.items()
        if not fields.carries(cni_version, first) and getattr(obj, name) != defaults[name]
    ]


def _check_fields(
    cni_version: str,
    interfaces: tuple[Interface, ...],
    routes: tuple[Route, ...],
    path_of_route: str = "routes",
) -> None:
    """Refuse a result holding a field its version cannot carry: `to_raw` could not write it."""
    problems: list[str] = []
    for index, interface in enumerate(interfaces):
        names = _unsupported(interface, fields.INTERFACE_SINCE, cni_version)
        problems.extend(f"interfaces[{index}].{name}" for name in names)
    for index, route in enumerate(routes):
        names = _unsupported(route, fields.ROUTE_SINCE, cni_version)
        problems.extend(f"{path_of_route}[{index}].{name}" for name in names)
    if problems:
        raise errors.IncompatibleVersionError(
            f"a {cni_version} result cannot carry {', '.join(problems)}; convert it instead"
        )


# --------------------------------------------------------------------------------------------
# The well-known structures (SPEC.md "Well-known Structures" / "Section 5").


if TYPE_CHECKING:
    _T = TypeVar("_T")


def _whole(label: str, decode: Callable[[fields.Problems], _T | None]) -> _T:
    """Decode one top-level value, raising every problem found in one error."""
    problems = fields.Problems(label)
    decoded = decode(problems)
    problems.raise_if_any()
    assert decoded is not None  # no problems means it decoded
    return decoded


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class Interface(NamedTuple):
    """An entry of `interfaces` (0.3.0+); `sandbox` is empty for a host-side interface."""

    name: str
    mac: str = ""
    mtu: int = 0  # 0 is "not reported" (libcni: `json:"mtu,omitempty"`)
    sandbox: str = ""
    socket_path: str = ""
    pci_id: str = ""

    @classmethod
    def from_raw(
        cls, raw: Mapping[str, object], *, cni_version: str = spec.CURRENT_VERSION
    ) -> Self:
        """The interface as `cni_version` writes it; keys that version lacks are ignored."""
        return _whole("interface", lambda problems: cls._decode(raw, "", problems, cni_version))

    @classmethod
    def _decode(
        cls, item: object, path: str, problems: fields.Problems, cni_version: str
    ) -> Self | None:
        raw = fields.mapping(item, path, problems)
        if raw is None:
            return None
        # Read in wire-key order so the problems are listed in that order too.
        name = fields.string(raw, "name", path, problems, required=True)
        mac = fields.string(raw, "mac", path, problems)
        mtu: int | None = None
        if fields.carries(cni_version, fields.INTERFACE_SINCE["mtu"]):
            mtu = fields.uint(raw, "mtu", path, problems)
        sandbox = fields.string(raw, "sandbox", path, problems)
        socket_path = pci_id = ""
        if fields.carries(cni_version, fields.INTERFACE_SINCE["socket_path"]):
            socket_path = fields.string(raw, "socketPath", path, problems)
        if fields.carries(cni_version, fields.INTERFACE_SINCE["pci_id"]):
            pci_id = fields.string(raw, "pciID", path, problems)
        return cls(
            name=name,
            mac=mac,
            mtu=mtu or 0,
            sandbox=sandbox,
            socket_path=socket_path,
            pci_id=pci_id,
        )

    def to_raw(self, *, cni_version: str = spec.CURRENT_VERSION) -> dict[str, object]:
        # `name` is always written (libcni: `json:"name"`), the rest only when set.
        raw: dict[str, object] = {"name": self.name}
        if self.mac:
            raw["mac"] = self.mac
        if self.mtu and fields.carries(cni_version, fields.INTERFACE_SINCE["mtu"]):
            raw["mtu"] = self.mtu
        if self.sandbox:
            raw["sandbox"] = self.sandbox
        if self.socket_path and fields.carries(cni_version, fields.INTERFACE_SINCE["socket_path"]):
            raw["socketPath"] = self.socket_path
        if self.pci_id and fields.carries(cni_version, fields.INTERFACE_SINCE["pci_id"]):
            raw["pciID"] = self.pci_id
        return raw


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class IPConfig(NamedTuple):
    """An entry of `ips` (0.3.0+): `address` in CIDR form, `interface` an index into interfaces."""

    address: str
    gateway: str = ""
    interface: int | None = None

    @property
    def version(self) -> str:
        """ "4" or "6", the family of `address` (the 0.3.x/0.4.0 `version` key; 1.0 dropped it)."""
        return str(ipaddress.ip_interface(self.address).version)

    @classmethod
    def from_raw(
        cls, raw: Mapping[str, object], *, cni_version: str = spec.CURRENT_VERSION
    ) -> Self:
        return _whole(
            "IP configuration", lambda problems: cls._decode(raw, "", problems, cni_version)
        )

    @classmethod
    def _decode(
        cls, item: object, path: str, problems: fields.Problems, cni_version: str
    ) -> Self | None:
        raw = fields.mapping(item, path, problems)
        if raw is None:
            return None
        address, parsed = fields.prefixed(
            raw, "address", path, problems, expected="an IP address with prefix"
        )
        gateway = fields.gateway(raw, "gateway", path, problems, peer=parsed, peer_key="address")
        interface = fields.uint(raw, "interface", path, problems)
        if version.family(cni_version) == "0.4.0":
            # 0.3.x/0.4.0 `version`: "either "4" or "6" and corresponds to the IP version of the
            # addresses in the entry". libcni tolerates it absent, so only a present one is checked.
            declared = raw.get("version")
            where = fields.at(path, "version")
            if declared is not None and declared not in ("4", "6"):
                problems.bad(where, declared, '"4" or "6"')
            elif declared is not None and parsed is not None and declared != str(parsed.version):
                problems.add(
                    where, f"{fields.show(declared)} does not match the address {address!r}"
                )
        return cls(address=address, gateway=gateway, interface=interface)

    def to_raw(self, *, cni_version: str = spec.CURRENT_VERSION) -> dict[str, object]:
        raw: dict[str, object] = {}
        if version.family(cni_version) == "0.4.0":
            raw["version"] = self.version
        raw["address"] = self.address
        if self.gateway:
            raw["gateway"] = self.gateway
        if self.interface is not None:
            raw["interface"] = self.interface
        return raw


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class Route(NamedTuple):
    """A route: `dst` in CIDR form, optional next hop `gw`; the rest are 1.1.0 attributes.

    `mtu`, `advmss` and `priority` use 0 for "not set" (libcni `omitempty` ints); `table` and
    `scope` are pointers in libcni, as 0 is a meaningful value for both (scope 0 is "universe").
    """

    dst: str
    gw: str = ""
    mtu: int = 0
    advmss: int = 0
    priority: int = 0
    table: int | None = None
    scope: int | None = None

    @classmethod
    def from_raw(
        cls, raw: Mapping[str, object], *, cni_version: str = spec.CURRENT_VERSION
    ) -> Self:
        return _whole("route", lambda problems: cls._decode(raw, "", problems, cni_version))

    @classmethod
    def _decode(
        cls,
        item: object,
        path: str,
        problems: fields.Problems,
        cni_version: str,
        family: int | None = None,
    ) -> Self | None:
        raw = fields.mapping(item, path, problems)
        if raw is None:
            return None
        dst, parsed = fields.prefixed(
            raw, "dst", path, problems, expected="an IP prefix in CIDR notation", family=family
        )
        extra: dict[str, int | None] = dict.fromkeys(fields.ROUTE_SINCE)
        for name, first in fields.ROUTE_SINCE.items():
            if fields.carries(cni_version, first):
                extra[name] = fields.uint(raw, name, path, problems)
        return cls(
            dst=dst,
            gw=fields.gateway(raw, "gw", path, problems, peer=parsed, peer_key="dst"),
            mtu=extra["mtu"] or 0,
            advmss=extra["advmss"] or 0,
            priority=extra["priority"] or 0,
            table=extra["table"],
            scope=extra["scope"],
        )

    def to_raw(self, *, cni_version: str = spec.CURRENT_VERSION) -> dict[str, object]:
        raw: dict[str, object] = {"dst": self.dst}
        if self.gw:
            raw["gw"] = self.gw
        # 0 is "unset" for the first three (omitempty ints), None for table and scope.
        for key, value in (("mtu", self.mtu), ("advmss", self.advmss), ("priority", self.priority)):
            if value and fields.carries(cni_version, fields.ROUTE_SINCE[key]):
                raw[key] = value
        for key, maybe in (("table", self.table), ("scope", self.scope)):
            if maybe is not None and fields.carries(cni_version, fields.ROUTE_SINCE[key]):
                raw[key] = maybe
        return raw


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class DNS(NamedTuple):
    """The `dns` object, the same in every version."""

    nameservers: tuple[str, ...] = ()
    domain: str = ""
    search: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.nameservers or self.domain or self.search or self.options)

    @classmethod
    def from_raw(cls, raw: Mapping[str, object]) -> Self:
        return _whole("DNS", lambda problems: cls._decode(raw, "", problems))

    @classmethod
    def _decode(cls, item: object, path: str, problems: fields.Problems) -> Self:
        if item is None:
            return cls()
        raw = fields.mapping(item, path, problems)
        if raw is None:
            return cls()
        return cls(
            nameservers=fields.strings(raw, "nameservers", path, problems),
            domain=fields.string(raw, "domain", path, problems),
            search=fields.strings(raw, "search", path, problems),
            options=fields.strings(raw, "options", path, problems),
        )

    def to_raw(self) -> dict[str, object]:
        raw: dict[str, object] = {}
        if self.nameservers:
            raw["nameservers"] = list(self.nameservers)
        if self.domain:
            raw["domain"] = self.domain
        if self.search:
            raw["search"] = list(self.search)
        if self.options:
            raw["options"] = list(self.options)
        return raw


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class IPv4or6Config(NamedTuple):
    """The 0.1.0/0.2.0 `ip4` or `ip6` object: `ip` in CIDR form, its gateway and its routes."""

    ip: str
    gateway: str = ""
    routes: tuple[Route, ...] = ()

    @classmethod
    def from_raw(cls, raw: Mapping[str, object]) -> Self:
        return _whole("IP configuration", lambda problems: cls._decode(raw, "", problems, None))

    @classmethod
    def _decode(
        cls, item: object, path: str, problems: fields.Problems, family: int | None
    ) -> Self | None:
        raw = fields.mapping(item, path, problems)
        if raw is None:
            return None
        ip, parsed = fields.prefixed(
            raw, "ip", path, problems, expected="an IP address with prefix", family=family
        )
        gateway = fields.gateway(raw, "gateway", path, problems, peer=parsed, peer_key="ip")
        # 0.2.0 SPEC.md: `ip4` holds "<list-of-ipv4-routes>", `ip6` "<list-of-ipv6-routes>".
        route_family = parsed.version if parsed is not None else family
        routes = tuple(
            route
            for where, entry in fields.items(raw, "routes", path, problems)
            if (route := Route._decode(entry, where, problems, "0.2.0", route_family)) is not None
        )
        return cls(ip=ip, gateway=gateway, routes=routes)

    def to_raw(self) -> dict[str, object]:
        raw: dict[str, object] = {"ip": self.ip}
        if self.gateway:
            raw["gateway"] = self.gateway
        if self.routes:
            raw["routes"] = [route.to_raw(cni_version="0.2.0") for route in self.routes]
        return raw


# --------------------------------------------------------------------------------------------
# The three result layouts.


# The results derive from values.Frozen, not a frozen dataclass: they check themselves on
# creation, the 0.3+ layouts share a base, and the thin plugin creates these classes on every
# exec (see values.py for what a dataclass would cost).
class Result020(values.Frozen):
    """A 0.1.0 or 0.2.0 result: at most one IPv4 and one IPv6 configuration."""

    _FIELDS: ClassVar[tuple[str, ...]] = ("cni_version", "ip4", "ip6", "dns")
    __slots__ = _FIELDS
    _VERSIONS: ClassVar[tuple[str, ...]] = _V020

    cni_version: str
    ip4: IPv4or6Config | None
    ip6: IPv4or6Config | None
    dns: DNS

    def __init__(
        self,
        *,
        cni_version: str,
        ip4: IPv4or6Config | None = None,
        ip6: IPv4or6Config | None = None,
        dns: DNS = DNS(),  # noqa: B008 (immutable: a NamedTuple)
    ) -> None:
        fields.check_version("Result020", cni_version, self._VERSIONS)
        for key, config in (("ip4", ip4), ("ip6", ip6)):
            if config is not None:
                _check_fields(cni_version, (), config.routes, f"{key}.routes")
        self._init(cni_version=cni_version, ip4=ip4, ip6=ip6, dns=dns)

    @classmethod
    def from_raw(cls, raw: Mapping[str, object]) -> Self:
        return cls._decode(raw, fields.declared_version(raw, cls._VERSIONS, "Result020"))

    @classmethod
    def _decode(cls, raw: Mapping[str, object], cni_version: str) -> Self:
        problems = fields.Problems("result")
        ip4 = ip6 = None
        if raw.get("ip4") is not None:
            ip4 = IPv4or6Config._decode(raw["ip4"], "ip4", problems, 4)
        if raw.get("ip6") is not None:
            ip6 = IPv4or6Config._decode(raw["ip6"], "ip6", problems, 6)
        dns = DNS._decode(raw.get("dns"), "dns", problems)
        problems.raise_if_any()
        return cls(cni_version=cni_version, ip4=ip4, ip6=ip6, dns=dns)

    def to_raw(self) -> dict[str, object]:
        raw: dict[str, object] = {"cniVersion": self.cni_version}
        if self.ip4 is not None:
            raw["ip4"] = self.ip4.to_raw()
        if self.ip6 is not None:
            raw["ip6"] = self.ip6.to_raw()
        if not self.dns.is_empty:
            raw["dns"] = self.dns.to_raw()
        return raw


def _decode_layered(
    raw: Mapping[str, object], cni_version: str
) -> tuple[tuple[Interface, ...], tuple[IPConfig, ...], tuple[Route, ...], DNS]:
    """The four parts shared by the 0.3.0+ layouts, every problem of all of them reported."""
    problems = fields.Problems("result")
    interfaces = tuple(
        interface
        for where, item in fields.items(raw, "interfaces", "", problems)
        if (interface := Interface._decode(item, where, problems, cni_version)) is not None
    )
    ips = tuple(
        ip
        for where, item in fields.items(raw, "ips", "", problems)
        if (ip := IPConfig._decode(item, where, problems, cni_version)) is not None
    )
    routes = tuple(
        route
        for where, item in fields.items(raw, "routes", "", problems)
        if (route := Route._decode(item, where, problems, cni_version)) is not None
    )
    dns = DNS._decode(raw.get("dns"), "dns", problems)
    problems.raise_if_any()
    return interfaces, ips, routes, dns


def _encode_layered(result: _LayeredResult) -> dict[str, object]:
    # Key order follows libcni's struct; empty lists and an empty dns are left out (omitempty,
    # and 1.x's Result.MarshalJSON drops an empty dns).
    cni_version = result.cni_version
    raw: dict[str, object] = {"cniVersion": cni_version}
    if result.interfaces:
        raw["interfaces"] = [i.to_raw(cni_version=cni_version) for i in result.interfaces]
    if result.ips:
        raw["ips"] = [ip.to_raw(cni_version=cni_version) for ip in result.ips]
    if result.routes:
        raw["routes"] = [route.to_raw(cni_version=cni_version) for route in result.routes]
    if not result.dns.is_empty:
        raw["dns"] = result.dns.to_raw()
    return raw


class _LayeredResult(values.Frozen):
    """What the 0.3.0+ layouts share; each subclass names the versions it covers."""

    _FIELDS: ClassVar[tuple[str, ...]] = ("cni_version", "interfaces", "ips", "routes", "dns")
    __slots__ = _FIELDS
    _VERSIONS: ClassVar[tuple[str, ...]] = ()

    cni_version: str
    interfaces: tuple[Interface, ...]
    ips: tuple[IPConfig, ...]
    routes: tuple[Route, ...]
    dns: DNS

    def __init__(
        self,
        *,
        cni_version: str,
        interfaces: tuple[Interface, ...] = (),
        ips: tuple[IPConfig, ...] = (),
        routes: tuple[Route, ...] = (),
        dns: DNS = DNS(),  # noqa: B008 (immutable: a NamedTuple)
    ) -> None:
        fields.check_version(type(self).__name__, cni_version, self._VERSIONS)
        _check_fields(cni_version, interfaces, routes)
        self._init(cni_version=cni_version, interfaces=interfaces, ips=ips, routes=routes, dns=dns)

    @classmethod
    def from_raw(cls, raw: Mapping[str, object]) -> Self:
        return cls._decode(raw, fields.declared_version(raw, cls._VERSIONS, cls.__name__))

    @classmethod
    def _decode(cls, raw: Mapping[str, object], cni_version: str) -> Self:
        interfaces, ips, routes, dns = _decode_layered(raw, cni_version)
        return cls(cni_version=cni_version, interfaces=interfaces, ips=ips, routes=routes, dns=dns)

    def to_raw(self) -> dict[str, object]:
        return _encode_layered(self)


class Result040(_LayeredResult):
    """A 0.3.0, 0.3.1 or 0.4.0 result."""

    __slots__ = ()
    _VERSIONS: ClassVar[tuple[str, ...]] = _V040


class Result100(_LayeredResult):
    """A 1.0.0 or 1.1.0 result (libcni: "the types did not change between v1.0 and v1.1")."""

    __slots__ = ()
    _VERSIONS: ClassVar[tuple[str, ...]] = _V100


Result: TypeAlias = Result020 | Result040 | Result100


def parse_result(raw: object, *, default_version: str) -> Result:
    """The result a plugin printed, as the type of its `cniVersion`.

    A result without `cniVersion` (or with null or "") is taken to be of `default_version`, the
    version of the config the plugin ran with: libcni's `fixupResultVersion` does the same. A
    `cniVersion` that is not a string, is malformed or is unknown raises IncompatibleVersionError;
    any malformed field raises one DecodingFailureError naming every bad field and its value.
    """
    if not isinstance(raw, Mapping):
        raise errors.DecodingFailureError(f"invalid result: {fields.show(raw)} is not an object")
    declared = raw.get("cniVersion")
    if declared is None or declared == "":
        cni_version = default_version
    elif isinstance(declared, str):
        cni_version = declared
    else:
        raise errors.IncompatibleVersionError(
            f"invalid result: cniVersion {fields.show(declared)} is not a version string"
        )
    layout = fields.layout(cni_version)
    if layout == "0.2.0":
        return Result020._decode(raw, cni_version)
    if layout == "0.4.0":
        return Result040._decode(raw, cni_version)
    return Result100._decode(raw, cni_version)


def first_sandbox_interface(result: Result040 | Result100) -> tuple[int, Interface] | None:
    """The index and entry of the first interface inside a sandbox (non-empty `sandbox`)."""
    for index, interface in enumerate(result.interfaces):
        if interface.sandbox:
            return index, interface
    return None
