"""Converting a CNI result between spec versions, as libcni's converters do.

libcni registers conversions 0.2.0 <-> 0.4.0 <-> 1.x (pkg/types/020, 040, 100), going through
0.4.0 between the ends; within a layout only `cniVersion` (and fields the target lacks) change.
`convert` moves a `netattach.cni.result` result between any two versions of spec.VERSIONS.

Standard library only: the CNI vocabulary must not depend on anything else.
"""

from __future__ import annotations

import ipaddress

from netattach.cni import errors, result_fields
from netattach.cni.result import (
    Interface,
    IPConfig,
    IPv4or6Config,
    Result,
    Result020,
    Result040,
    Result100,
    Route,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeVar


def _strip_interface(interface: Interface, cni_version: str) -> Interface:
    """`interface` without the fields `cni_version` has no key for."""

    def kept(name: str) -> bool:
        return result_fields.carries(cni_version, result_fields.INTERFACE_SINCE[name])

    return Interface(
        name=interface.name,
        mac=interface.mac,
        mtu=interface.mtu if kept("mtu") else 0,
        sandbox=interface.sandbox,
        socket_path=interface.socket_path if kept("socket_path") else "",
        pci_id=interface.pci_id if kept("pci_id") else "",
    )


def _strip_route(route: Route, cni_version: str) -> Route:
    """`route` without the attributes `cni_version` has no key for."""

    def kept(name: str) -> bool:
        return result_fields.carries(cni_version, result_fields.ROUTE_SINCE[name])

    return Route(
        dst=route.dst,
        gw=route.gw,
        mtu=route.mtu if kept("mtu") else 0,
        advmss=route.advmss if kept("advmss") else 0,
        priority=route.priority if kept("priority") else 0,
        table=route.table if kept("table") else None,
        scope=route.scope if kept("scope") else None,
    )


def _up_from_020(result: Result020, to_version: str) -> Result040:
    # libcni types040.convertFrom02x: ip4 then ip6 become `ips` without an interface index (0.2.0
    # has no interfaces), and their routes are concatenated in the same order.
    ips: list[IPConfig] = []
    routes: list[Route] = []
    for config in (result.ip4, result.ip6):
        if config is not None:
            ips.append(IPConfig(address=config.ip, gateway=config.gateway))
            routes.extend(config.routes)
    return Result040(cni_version=to_version, ips=tuple(ips), routes=tuple(routes), dns=result.dns)


def _down_to_020(result: Result040, to_version: str, from_version: str) -> Result020:
    # libcni types040.convertTo02x: 0.2.0 holds one address per family, so the first IPv4 and
    # the first IPv6 entry are kept (address and gateway); each route goes to the configuration
    # of its dst's family, or is dropped when there is none; interfaces have no 0.2.0 form.
    first: dict[int, IPConfig] = {}
    for ip in result.ips:
        first.setdefault(ipaddress.ip_interface(ip.address).version, ip)
    if not first:
        raise errors.IncompatibleVersionError(
            f"cannot convert result from {from_version} to {to_version}: no IP addresses"
        )
    routes: dict[int, list[Route]] = {4: [], 6: []}
    for route in result.routes:
        routes[ipaddress.ip_interface(route.dst).version].append(Route(dst=route.dst, gw=route.gw))
    configs = {
        family: IPv4or6Config(ip=ip.address, gateway=ip.gateway, routes=tuple(routes[family]))
        for family, ip in first.items()
    }
    return Result020(cni_version=to_version, ip4=configs.get(4), ip6=configs.get(6), dns=result.dns)


if TYPE_CHECKING:
    _L = TypeVar("_L", Result040, Result100)


def _relayout(result: Result040 | Result100, layout: type[_L], to_version: str) -> _L:
    """`result` in another 0.3+ layout or version: the same lists, less what `to_version` lacks.

    libcni's converters between 0.4.0 and 1.x keep name/mac/sandbox of each interface and the
    `ips` (`version` is implied by each address); going down also drops the interface and route
    fields the older version has no key for, so the result stays writable in its own version.
    """
    return layout(
        cni_version=to_version,
        interfaces=tuple(_strip_interface(i, to_version) for i in result.interfaces),
        ips=result.ips,
        routes=tuple(_strip_route(route, to_version) for route in result.routes),
        dns=result.dns,
    )


def convert(result: Result, to_version: str) -> Result:
    """`result` as a result of `to_version` (any two versions of spec.VERSIONS, both ways).

    Going down loses what the older layout cannot hold (see the `_down_*` functions); converting
    a result without any IP address to 0.1.0/0.2.0 is impossible and raises
    IncompatibleVersionError, as in libcni. An unknown `to_version` raises it too.
    """
    target = result_fields.layout(to_version)
    if result.cni_version == to_version:
        return result
    if isinstance(result, Result020):
        if target == "0.2.0":
            return result.replace(cni_version=to_version)
        if target == "0.4.0":
            return _up_from_020(result, to_version)
        return _relayout(_up_from_020(result, "0.4.0"), Result100, to_version)
    if isinstance(result, Result040):
        if target == "0.2.0":
            return _down_to_020(result, to_version, result.cni_version)
        if target == "0.4.0":
            return result.replace(cni_version=to_version)
        return _relayout(result, Result100, to_version)
    if target == "0.2.0":
        return _down_to_020(_relayout(result, Result040, "0.4.0"), to_version, result.cni_version)
    if target == "0.4.0":
        return _relayout(result, Result040, to_version)
    return _relayout(result, Result100, to_version)
