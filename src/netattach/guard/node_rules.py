"""Node-safe defaults: what a delegate config may not take from the node itself (SEC-NODE).

The per-config half of the rules; `pods/node_guard.py` adds what only the node knows at ADD
(its addresses, its default gateways, the addresses live attachments hold). Keys are found
wherever they are written, at any depth, as `check` finds the others:

    mode: passthru      a macvlan that takes its master whole: the master (unset or "": the
                        node's default-route interface) must be in `passthruMaster`
    isGateway, isDefaultGateway, ipMasq
                        a gateway address (and its connected route) put on a host bridge, or
                        the node's NAT for the pods: true only in a bridge plugin whose
                        bridge (unset or "": cni0) is in `gatewayBridge`; in any other object
                        (ptp's `ipMasq`) only when `gatewayBridge` allows anything
    the addresses a config hands out (`claims`), none in `reservedRanges`:
        pod             a static IPAM `addresses[].address`, an `ips` entry (args.cni,
                        runtimeConfig, the selection's `ips`): an address a pod takes
        span            what a host-local range (`subnet`, `rangeStart`, `rangeEnd`) hands out
        host            an address the plugin puts on the node: ptp's host side and a bridge's
                        gateway when `isGateway` (the IPAM `gateway`, else the subnet's first)
        subnet          the connected route a bridge with `isGateway` puts on the node
        route           a `routes[].dst` (refused when inside a range) or `routes[].gw`
    and, whatever the lists say, no pod, span or host address that is loopback, multicast or
    unspecified.

Only CIDRs of `reservedRanges` are judged here; its `node` entry needs the node's facts and is
node_guard's.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping, Sequence

from netattach.guard import delegate_policy, globs, goaddr, keys, refusal
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final, TypeAlias

    Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
    Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

PASSTHRU: Final = "passthru"
# SEC-VALUES, by their `nodeChanges` names.
MACSPOOFCHK: Final = "macspoofchk"
DHCP_SOCKET: Final = "dhcpSocket"
# The dhcp daemon's socket (the dhcp plugin's default), by both its names.
DHCP_SOCKETS: Final = ("/run/cni/dhcp.sock", "/var/run/cni/dhcp.sock")
GATEWAY_FLAGS: Final = ("isGateway", "isDefaultGateway", "ipMasq")
BRIDGE: Final = "bridge"
PTP: Final = "ptp"

# What a claim is, as a refusal says it.
POD: Final = "pod"  # an address a pod takes
SPAN: Final = "span"  # the addresses a range hands out
HOST: Final = "host"  # an address put on the node
SUBNET: Final = "subnet"  # a connected route put on the node
ROUTE_DST: Final = "route"  # a route's destination, in the pod
ROUTE_GW: Final = "route gateway"

_RESERVED_BY: Final = "reserved by"
# Never handed out, whatever the lists say.
_SPECIAL: Final = (
    ("a loopback address", ("127.0.0.0/8", "::1/128")),
    ("a multicast address", ("224.0.0.0/4", "ff00::/8")),
    ("the unspecified address", ("0.0.0.0/32", "::/128")),
    ("the broadcast address", ("255.255.255.255/32",)),
)


class Claim(NamedTuple):
    """An address (or range of them, `first` to `last`) a config hands out: `key` its path in
    the config, `value` the value as written (JSON), `kind` one of POD, SPAN, HOST, SUBNET,
    ROUTE_DST, ROUTE_GW; `bridge` the host bridge a HOST or SUBNET claim goes on ("" for ptp's
    host veth); `gateway` a SPAN's gateway, which the range does not hand out."""

    key: str
    value: str
    kind: str
    first: Address
    last: Address
    bridge: str = ""
    gateway: Address | None = None

    def holds(self, address: Address) -> bool:
        return (
            address.version == self.first.version
            and int(self.first) <= int(address) <= int(self.last)
            and address != self.gateway
        )

    def overlaps(self, network: Network) -> bool:
        if network.version != self.first.version:
            return False
        low, high = int(network.network_address), int(network.broadcast_address)
        if self.kind == ROUTE_DST:  # a route broader than the range loses to the node's own
            return low <= int(self.first) and int(self.last) <= high
        return int(self.first) <= high and low <= int(self.last)

    def shown(self) -> str:
        """The value, and what it hands out when that is a range."""
        if self.kind in (SPAN, SUBNET):
            what = str(self.first) if self.first == self.last else f"{self.first}-{self.last}"
            return f"{self.value} ({self.kind} {what})"
        return self.value

    def relation(self) -> str:
        return "overlaps" if self.kind in (SPAN, SUBNET) else "lies in"


def check_config(
    raw: Mapping[str, Any], rules: delegate_policy.DelegateRules
) -> list[refusal.Refusal]:
    """The SEC-NODE refusals of `raw` that need nothing of the node."""
    refusals: list[refusal.Refusal] = []
    for path, obj in objects(raw):
        _check_passthru(obj, path, rules, refusals)
        _check_gateway_flags(obj, path, rules, refusals)
        _check_node_changes(obj, path, rules, refusals)
    found, unreadable = claims(raw)
    refusals.extend(unreadable)
    ranges = reserved_networks(rules.reserved_ranges)
    rule = f"{rules.source}.reservedRanges [{', '.join(rules.reserved_ranges)}]"
    for claim in found:
        special = _special(claim)
        if special:
            verb = "holds" if claim.kind in (SPAN, SUBNET) else "is"
            why = f"{verb} {special}, which no list can grant; see"
            refusals.append(refusal.Refusal(claim.key, claim.shown(), rule, why))
            continue
        for network in ranges:
            if claim.overlaps(network):
                why = f"{claim.relation()} {network}, {_RESERVED_BY}"
                refusals.append(refusal.Refusal(claim.key, claim.shown(), rule, why))
                break
    return refusals


def _check_passthru(
    obj: Mapping[str, Any],
    path: str,
    rules: delegate_policy.DelegateRules,
    refusals: list[refusal.Refusal],
) -> None:
    if obj.get("mode") != PASSTHRU:
        return
    listed = rules.passthru_master
    rule = f"{rules.source}.passthruMaster {listed}"
    master = obj.get("master")
    if master is None or master == "":
        if not listed.allows_anything:
            value = "unset (the node's default-route interface)"
            why = "is taken whole (mode passthru): only a list that allows anything allows it, not"
            refusals.append(refusal.Refusal(refusal.join(path, "master"), value, rule, why))
    elif isinstance(master, str) and not listed.allows(master):
        why = "is taken whole (mode passthru), which is not allowed by"
        refusals.append(
            refusal.Refusal(refusal.join(path, "master"), refusal.show(master), rule, why)
        )


def _check_gateway_flags(
    obj: Mapping[str, Any],
    path: str,
    rules: delegate_policy.DelegateRules,
    refusals: list[refusal.Refusal],
) -> None:
    listed = rules.gateway_bridge
    rule = f"{rules.source}.gatewayBridge {listed}"
    for flag in GATEWAY_FLAGS:
        if flag not in obj or obj[flag] is False:
            continue
        value = obj[flag]
        where = refusal.join(path, flag)
        if not isinstance(value, bool):
            why = "is not true or false, refused by"
            refusals.append(refusal.Refusal(where, refusal.show(value), rule, why))
        elif obj.get("type") != BRIDGE:
            if not listed.allows_anything:
                why = (
                    "outside a bridge plugin is allowed only by a list that allows anything, not by"
                )
                refusals.append(refusal.Refusal(where, "true", rule, why))
        else:
            bridge = obj.get(BRIDGE) or keys.DEFAULT_BRIDGE_NAME
            if isinstance(bridge, str) and not listed.allows(bridge):
                why = f"on bridge {refusal.show(bridge)} is not allowed by"
                refusals.append(refusal.Refusal(where, "true", rule, why))


def _check_node_changes(
    obj: Mapping[str, Any],
    path: str,
    rules: delegate_policy.DelegateRules,
    refusals: list[refusal.Refusal],
) -> None:
    """SEC-VALUES, what the config alone shows: a change to the node that outlives the pod
    (`guard/effects.py` judges those that need the node's state)."""
    listed = rules.node_changes
    if "macspoofchk" in obj and obj["macspoofchk"] is not False:
        value = obj["macspoofchk"]
        if not isinstance(value, bool):
            why = "is not true or false, refused by"
            rule = f"{rules.source}.nodeChanges {listed}"
            refusals.append(
                refusal.Refusal(refusal.join(path, "macspoofchk"), refusal.show(value), rule, why)
            )
        elif not listed.allows(MACSPOOFCHK):
            refusals.append(
                change_refusal(refusal.join(path, "macspoofchk"), "true", MACSPOOFCHK, rules)
            )
    if "daemonSocketPath" in obj:
        value = obj["daemonSocketPath"]
        normal = globs.normal_path(value) if isinstance(value, str) else None
        if normal not in DHCP_SOCKETS and not listed.allows(DHCP_SOCKET):
            refusals.append(
                change_refusal(
                    refusal.join(path, "daemonSocketPath"), refusal.show(value), DHCP_SOCKET, rules
                )
            )


def change_refusal(
    key: str, value: str, change: str, rules: delegate_policy.DelegateRules, what: str = ""
) -> refusal.Refusal:
    """A refusal of the node change `change` (a `NODE_CHANGES` name) that `nodeChanges` does
    not grant; `what` says it of this node when there is more to say than the name's text."""
    said = what or delegate_policy.NODE_CHANGES[change]
    why = f"makes a node change that outlives the pod ({said}); {change!r} is not granted by"
    return refusal.Refusal(key, value, f"{rules.source}.nodeChanges {rules.node_changes}", why)


def _special(claim: Claim) -> str:
    """What makes an address no pod, range or node address may be, whatever the lists; ""."""
    if claim.kind in (ROUTE_DST, ROUTE_GW):
        return ""
    for what, cidrs in _SPECIAL:
        if any(claim.overlaps(ipaddress.ip_network(cidr)) for cidr in cidrs):
            return what
    return ""


def reserved_networks(entries: Sequence[str]) -> tuple[Network, ...]:
    """The CIDRs of a `reservedRanges` list (its `node` entry aside)."""
    return tuple(
        ipaddress.ip_network(e, strict=False) for e in entries if e != delegate_policy.NODE_RANGE
    )


# --- what a config hands out -------------------------------------------------------------------


def claims(
    raw: Mapping[str, Any], requested: Sequence[str] = ()
) -> tuple[list[Claim], list[refusal.Refusal]]:
    """Every address `raw` hands out (and `requested`, the selection's `ips`), and a refusal
    for each address key whose value is not an address (the plugin would fail, or read it some
    way we did not check)."""
    found: list[Claim] = []
    unreadable: list[refusal.Refusal] = []
    _collect(raw, "", None, found, unreadable)
    for index, text in enumerate(requested):
        _point(f"selection ips[{index}]", text, POD, found, unreadable)
    return found, unreadable


class _Plugin(NamedTuple):
    """The plugin an object belongs to, as far as where its addresses go is concerned."""

    host_side: bool  # its IPAM gateways are put on the node (ptp; bridge with isGateway)
    bridge: str  # a bridge plugin's bridge; "" otherwise


def _plugin_of(obj: Mapping[str, Any]) -> _Plugin:
    kind = obj.get("type")
    if kind == PTP:
        return _Plugin(host_side=True, bridge="")
    if kind == BRIDGE:
        gateway = obj.get("isGateway") is True or obj.get("isDefaultGateway") is True
        bridge = obj.get(BRIDGE)
        name = bridge if isinstance(bridge, str) and bridge else keys.DEFAULT_BRIDGE_NAME
        return _Plugin(host_side=gateway, bridge=name)
    return _Plugin(host_side=False, bridge="")


def _collect(
    node: object,
    path: str,
    plugin: _Plugin | None,
    found: list[Claim],
    unreadable: list[refusal.Refusal],
) -> None:
    if isinstance(node, list):
        for index, item in enumerate(node):
            _collect(item, f"{path}[{index}]", plugin, found, unreadable)
        return
    if not isinstance(node, Mapping):
        return
    if isinstance(node.get("type"), str) and not path.endswith("ipam"):
        plugin = _plugin_of(node)
    host = plugin if plugin is not None and plugin.host_side else None
    if "subnet" in node:
        _range(node, path, host, found, unreadable)
    addresses = node.get("addresses")
    if isinstance(addresses, list):
        for index, item in enumerate(addresses):
            where = f"{refusal.join(path, 'addresses')}[{index}]"
            if isinstance(item, Mapping) and "address" in item:
                _static(item, where, host, found, unreadable)
    routes = node.get("routes")
    if isinstance(routes, list):
        for index, item in enumerate(routes):
            if isinstance(item, Mapping):
                _route(item, f"{refusal.join(path, 'routes')}[{index}]", found, unreadable)
    ips = node.get("ips")
    if isinstance(ips, list):
        for index, item in enumerate(ips):
            _point(f"{refusal.join(path, 'ips')}[{index}]", item, POD, found, unreadable)
    for key, value in node.items():
        if key == "sysctl":
            continue
        _collect(value, refusal.join(path, str(key)), plugin, found, unreadable)


def _range(
    obj: Mapping[str, Any],
    path: str,
    host: _Plugin | None,
    found: list[Claim],
    unreadable: list[refusal.Refusal],
) -> None:
    """A host-local range: what it hands out, and its gateway where the plugin puts it."""
    subnet = _network(obj["subnet"], refusal.join(path, "subnet"), unreadable)
    if subnet is None:
        return
    first, last = _usable(subnet)
    bounds = []
    for key, default in (("rangeStart", first), ("rangeEnd", last)):
        if key not in obj:
            bounds.append(default)
            continue
        address = _address(obj[key], refusal.join(path, key), unreadable)
        if address is None:
            return
        if address not in subnet:  # host-local refuses it too; judged, it would mislead
            unreadable.append(
                _unreadable(refusal.join(path, key), obj[key], f"an address of {subnet}")
            )
            return
        bounds.append(address)
    gateway = _gateway(obj, path, subnet, unreadable)
    where = refusal.join(path, "subnet")
    shown = refusal.show(obj["subnet"])
    found.append(Claim(where, shown, SPAN, bounds[0], bounds[1], gateway=gateway))
    if host is not None:
        _host(host, path, obj, subnet, gateway=gateway, found=found)


def _static(
    item: Mapping[str, Any],
    path: str,
    host: _Plugin | None,
    found: list[Claim],
    unreadable: list[refusal.Refusal],
) -> None:
    """A static IPAM address: the pod's, and its gateway where the plugin puts it."""
    where = refusal.join(path, "address")
    value = item["address"]
    cidr = _cidr(value, where, "an address with its prefix (10.1.0.5/24)", unreadable)
    if cidr is None:
        return
    found.append(Claim(where, refusal.show(value), POD, cidr.ip, cidr.ip))
    if host is not None:
        gateway = _gateway(item, path, cidr.network, unreadable)
        _host(host, path, item, cidr.network, gateway=gateway, found=found)


def _host(
    host: _Plugin,
    path: str,
    obj: Mapping[str, Any],
    network: Network,
    *,
    gateway: Address | None,
    found: list[Claim],
) -> None:
    if gateway is None:
        return
    where = refusal.join(path, "gateway")
    shown = _shown(obj["gateway"], gateway) if "gateway" in obj else f'unset ("{gateway}")'
    found.append(Claim(where, shown, HOST, gateway, gateway, bridge=host.bridge))
    if host.bridge:  # the bridge gets the gateway with the subnet's prefix: a route to it all
        subnet = refusal.show(str(network))
        found.append(
            Claim(where, subnet, SUBNET, network.network_address, network[-1], bridge=host.bridge)
        )


def _gateway(
    obj: Mapping[str, Any], path: str, network: Network, unreadable: list[refusal.Refusal]
) -> Address | None:
    """The IPAM `gateway` of `obj`, else the first address of `network` (as host-local and the
    bridge plugin choose one)."""
    if "gateway" not in obj:
        return network.network_address + 1 if network.num_addresses > 2 else None
    return _address(obj["gateway"], refusal.join(path, "gateway"), unreadable)


def _route(
    item: Mapping[str, Any], path: str, found: list[Claim], unreadable: list[refusal.Refusal]
) -> None:
    if "dst" in item:
        dst = _network(item["dst"], refusal.join(path, "dst"), unreadable)
        if dst is not None:
            shown = refusal.show(item["dst"])
            found.append(
                Claim(refusal.join(path, "dst"), shown, ROUTE_DST, dst.network_address, dst[-1])
            )
    if "gw" in item:
        _point(refusal.join(path, "gw"), item["gw"], ROUTE_GW, found, unreadable)


def _point(
    path: str,
    value: object,
    kind: str,
    found: list[Claim],
    unreadable: list[refusal.Refusal],
) -> None:
    """One address (`10.1.0.5`, or `10.1.0.5/24` as `ips` entries are written)."""
    if isinstance(value, str) and "/" in value:
        cidr = _cidr(value, path, "an address", unreadable)
        address = cidr.ip if cidr is not None else None
    else:
        address = _address(value, path, unreadable)
    if address is not None:
        found.append(Claim(path, _shown(value, address), kind, address, address))


def _address(value: object, path: str, unreadable: list[refusal.Refusal]) -> Address | None:
    """An address as the plugin acts on it (SEC-VALUES: `::ffff:a.b.c.d` is IPv4)."""
    address = goaddr.read_ip(value)
    if address is None:
        unreadable.append(_unreadable(path, value, "an address as Go reads one"))
    return address


def _cidr(
    value: object, path: str, what: str, unreadable: list[refusal.Refusal]
) -> goaddr.GoCIDR | None:
    """A CIDR as the plugin reads it; refused when Go would not, or when its prefix means
    something else to the plugin than it says (an IPv4-mapped IPv6 CIDR)."""
    cidr = goaddr.read_cidr(value)
    if cidr is None:
        unreadable.append(_unreadable(path, value, f"{what} as Go reads one"))
        return None
    if cidr.mapped:
        unreadable.append(
            refusal.Refusal(
                path,
                refusal.show(value),
                "SEC-VALUES (docs/security.md)",
                f"{goaddr.MAPPED_CIDR}, refused by",
            )
        )
        return None
    return cidr


def _network(value: object, path: str, unreadable: list[refusal.Refusal]) -> Network | None:
    cidr = _cidr(value, path, "a CIDR", unreadable)
    return cidr.network if cidr is not None else None


def _usable(network: Network) -> tuple[Address, Address]:
    """The addresses host-local hands out of `network` by default: all but the network's own
    and (IPv4) its broadcast, when there are such."""
    if network.num_addresses <= 2:
        return network.network_address, network[-1]
    last = network[-2] if network.version == 4 else network[-1]
    return network.network_address + 1, last


def _unreadable(path: str, value: object, what: str) -> refusal.Refusal:
    return refusal.Refusal(
        path, refusal.show(value), "SEC-NODE (docs/security.md)", f"is not {what}, refused by"
    )


def objects(node: object, path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every object of the config with its path, outer first (sysctl maps aside)."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from objects(item, f"{path}[{index}]")
    elif isinstance(node, Mapping):
        yield path, node
        for key, value in node.items():
            if key != "sysctl":
                yield from objects(value, refusal.join(path, str(key)))


def _shown(value: object, address: Address) -> str:
    """The value as written, and the address a Go plugin reads it as when that differs."""
    if goaddr.is_mapped(value):
        return f"{refusal.show(value)} (IPv4 {address} to a Go plugin)"
    return refusal.show(value)
