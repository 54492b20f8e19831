"""The pod's default route, changed inside the pod's namespace only (SEL-DEFROUTE)."""

import ipaddress
import socket
from collections.abc import Sequence

from pyroute2 import NetNS

_MAIN_TABLE = 254


def apply_default_route(netns_path: str, ifname: str, gateways: Sequence[str]) -> None:
    """Make each gateway the default route of its family, via `ifname`, dropping the others.

    Standard v1.1 `default-route`: the selected attachment's gateway becomes the pod's default
    route and the default network's default route is removed. Families with no gateway given
    keep their routes. Synchronous (pyroute2): call from async code through asyncio.to_thread.
    """
    with NetNS(netns_path) as ns:
        index = ns.link_lookup(ifname=ifname)
        if not index:
            raise LookupError(f"no interface {ifname!r} in {netns_path}")
        for gateway in gateways:
            family = (
                socket.AF_INET if ipaddress.ip_address(gateway).version == 4 else socket.AF_INET6
            )
            for route in ns.get_routes(family=family, table=_MAIN_TABLE):
                if route["dst_len"] == 0:
                    ns.route("del", **_identity(route, family))
            dst = "0.0.0.0/0" if family == socket.AF_INET else "::/0"
            ns.route("add", dst=dst, gateway=gateway, oif=index[0], family=family)


def _identity(route: object, family: int) -> dict[str, object]:
    get = route.get_attr  # type: ignore[attr-defined]
    identity: dict[str, object] = {"family": family, "dst_len": 0, "table": _MAIN_TABLE}
    gateway = get("RTA_GATEWAY")
    if gateway is not None:
        identity["gateway"] = gateway
    oif = get("RTA_OIF")
    if oif is not None:
        identity["oif"] = oif
    return identity
