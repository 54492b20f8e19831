"""The addresses and default gateways of the namespace this process runs in: the node's, for a
daemon in the host network namespace (SEC-NODE reads them at ADD).

Synchronous (pyroute2): async code calls `read_addresses` through `asyncio.to_thread`. A dump
of addresses, links and the main table's default routes costs ~3 ms.
"""

import socket

from pyroute2 import IPRoute

_MAIN_TABLE = 254


def read_addresses() -> tuple[list[tuple[str, str]], list[str]]:
    """(interface name, address) of every address here, and every default route's gateway."""
    with IPRoute() as ipr:
        names = {int(link["index"]): str(link.get_attr("IFLA_IFNAME")) for link in ipr.get_links()}
        addresses = [
            (names.get(int(addr["index"]), ""), str(addr.get_attr("IFA_ADDRESS")))
            for addr in ipr.get_addr()
            if addr.get_attr("IFA_ADDRESS") is not None
        ]
        gateways: list[str] = []
        for family in (socket.AF_INET, socket.AF_INET6):
            for route in ipr.get_routes(family=family, table=_MAIN_TABLE):
                gateway = route.get_attr("RTA_GATEWAY")
                if route["dst_len"] == 0 and gateway is not None:
                    gateways.append(str(gateway))
                for hop in route.get_attr("RTA_MULTIPATH") or ():
                    via = hop.get_attr("RTA_GATEWAY")
                    if route["dst_len"] == 0 and via is not None:
                        gateways.append(str(via))
    return addresses, gateways
