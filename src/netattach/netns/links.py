"""Links and addresses inside a namespace, read and changed through a netns-bound socket.

These functions are synchronous. pyroute2's synchronous sockets drive an event loop of their
own, so async code calls them through `asyncio.to_thread`, never directly from a coroutine.
"""

import dataclasses
import errno
import ipaddress
import secrets
import subprocess
from typing import Any

from pyroute2 import NetNS
from pyroute2.netlink.exceptions import NetlinkError

from netattach.netns import namespace


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InterfaceState:
    """What the kernel says of one interface in a namespace."""

    name: str
    index: int
    mac: str
    mtu: int
    up: bool
    kind: str
    addresses: tuple[str, ...]  # CIDR, e.g. "10.1.0.5/24"


def _attr(msg: Any, name: str) -> Any:
    return msg.get_attr(name)


def _kind(link: Any) -> str:
    info = _attr(link, "IFLA_LINKINFO")
    if info is None:
        return ""
    return str(info.get_attr("IFLA_INFO_KIND") or "")


def read_interfaces(netns_path: str) -> dict[str, InterfaceState]:
    """Every interface of the namespace at `netns_path`, by name, with its addresses."""
    with NetNS(netns_path) as ns:
        links = list(ns.get_links())
        addrs = list(ns.get_addr())
    by_index: dict[int, list[str]] = {}
    for addr in addrs:
        text = f"{_attr(addr, 'IFA_ADDRESS')}/{addr['prefixlen']}"
        by_index.setdefault(addr["index"], []).append(text)
    states: dict[str, InterfaceState] = {}
    for link in links:
        name = str(_attr(link, "IFLA_IFNAME"))
        states[name] = InterfaceState(
            name=name,
            index=int(link["index"]),
            mac=str(_attr(link, "IFLA_ADDRESS") or ""),
            mtu=int(_attr(link, "IFLA_MTU") or 0),
            up=bool(link["flags"] & 1),
            kind=_kind(link),
            addresses=tuple(by_index.get(int(link["index"]), [])),
        )
    return states


def read_routes(netns_path: str, family: int = 2) -> list[tuple[str, str]]:
    """The main table's routes as (destination CIDR, gateway or "")."""
    out: list[tuple[str, str]] = []
    with NetNS(netns_path) as ns:
        for route in ns.get_routes(family=family, table=254):
            dst = _attr(route, "RTA_DST")
            prefix = route["dst_len"]
            if dst is None:
                dst = "0.0.0.0" if family == 2 else "::"  # noqa: S104 (a route prefix, not a bind)
            gateway = _attr(route, "RTA_GATEWAY") or ""
            out.append((str(ipaddress.ip_network(f"{dst}/{prefix}", strict=False)), str(gateway)))
    return out


def add_veth_pair(netns_path: str, name: str, peer: str, *, up: bool = True) -> None:
    """A veth pair with both ends in the namespace (for example a macvlan master)."""
    with NetNS(netns_path) as ns:
        ns.link("add", ifname=name, kind="veth", peer={"ifname": peer})
        if up:
            for ifname in (name, peer):
                ns.link("set", index=ns.link_lookup(ifname=ifname)[0], state="up")


def set_up(netns_path: str, ifname: str) -> None:
    with NetNS(netns_path) as ns:
        ns.link("set", index=ns.link_lookup(ifname=ifname)[0], state="up")


def set_node_forwarding(netns_path: str) -> None:
    """Switch IPv4 and IPv6 forwarding on in the namespace, as a Kubernetes node has them (the
    kube-proxy and every default network need them): a namespace standing for a node. IPv6 only
    where the namespace has it."""
    script = (
        "echo 1 > /proc/sys/net/ipv4/ip_forward && "
        "{ ! test -e /proc/sys/net/ipv6 || echo 1 > /proc/sys/net/ipv6/conf/all/forwarding; }"
    )
    subprocess.run(
        ["nsenter", f"--net={netns_path}", "--", "sh", "-c", script],
        check=True,
        capture_output=True,
        timeout=10,
    )


def delete_link(netns_path: str, ifname: str) -> bool:
    """Delete `ifname`; False when there was no such link."""
    with NetNS(netns_path) as ns:
        found = ns.link_lookup(ifname=ifname)
        if not found:
            return False
        ns.link("del", index=found[0])
    return True


def link_kind_supported(kind: str) -> bool:
    """Whether this kernel can make links of `kind` (probed in a scratch namespace)."""
    scratch = f"na-probe-{secrets.token_hex(3)}"
    path = namespace.create(scratch)
    try:
        with NetNS(path) as ns:
            ns.link("add", ifname="na-host", kind="veth", peer={"ifname": "na-peer"})
            spec: dict[str, Any] = {"ifname": "na-probe", "kind": kind}
            if kind in ("macvlan", "ipvlan", "vlan", "macvtap"):
                spec["link"] = ns.link_lookup(ifname="na-host")[0]
            if kind == "vlan":
                spec["vlan_id"] = 10
            try:
                ns.link("add", **spec)
            except NetlinkError as exc:
                if exc.code in (errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL):
                    return False
                raise
        return True
    finally:
        namespace.remove(scratch)
