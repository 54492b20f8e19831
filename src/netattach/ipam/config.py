"""A NAD's `"ipam": {"type": "netattach", ...}`, parsed once and checked (IPAM-BAD).

The keys are host-local's where they mean the same, so a spanning network moves from host-local
by changing `type` alone:

    ranges      a list of range sets; each set gives the attachment one address, from the first
                of its ranges with room (dual stack: one IPv4 set, one IPv6 set). A range is
                `subnet` (required, no host bits), `rangeStart`, `rangeEnd` (inside the subnet;
                by default its first address after the network's, and its last before the
                broadcast for IPv4, its last for IPv6), `gateway` (default: the subnet's first
                address; never handed out)
    subnet, rangeStart, rangeEnd, gateway
                host-local's shorthand for a single range
    exclude     CIDRs never handed out (whereabouts' key)
    routes, dns given to the pod as written (the `static` plugin's keys)
    reuseDelay  seconds an address freed at DEL waits before it is handed out again (neighbour
                caches still point at the old pod's MAC): default 30

Networks of one `name` share one pool, whatever their NADs. Every problem is reported at once,
each naming the key and quoting the value; IPv4-mapped IPv6 spellings are refused (a Go plugin
reads them as IPv4: `guard/goaddr.py`).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence

from netattach import ipam
from netattach.cni import errors
from netattach.guard import goaddr
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final, TypeAlias

    Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
    Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

TYPE: Final = ipam.TYPE
DEFAULT_REUSE_DELAY: Final = 30.0
# The smallest subnets a range may have: host-local's (/30 leaves two addresses, one the gateway).
MAX_PREFIX: Final = {4: 30, 6: 126}
_KEYS: Final = frozenset(
    {"type", "ranges", "subnet", "rangeStart", "rangeEnd", "gateway", "exclude", "routes", "dns",
     "reuseDelay"}
)  # fmt: skip


class AddressRange(NamedTuple):
    """One range of a set: the addresses `first`..`last` of `subnet`, `gateway` never given."""

    subnet: Network
    first: Address
    last: Address
    gateway: Address

    def holds(self, address: Address) -> bool:
        return address.version == self.first.version and int(self.first) <= int(address) <= int(
            self.last
        )

    def __str__(self) -> str:
        return f"{self.subnet} ({self.first}-{self.last})"


class PoolConfig(NamedTuple):
    """The pool a network's attachments take addresses from."""

    pool: str
    range_sets: tuple[tuple[AddressRange, ...], ...]
    exclude: tuple[Network, ...] = ()
    routes: tuple[Mapping[str, Any], ...] = ()
    dns: Mapping[str, Any] | None = None
    reuse_delay: float = DEFAULT_REUSE_DELAY

    def given(self, address: Address) -> bool:
        """May the pool hand `address` out at all (in a range, not a gateway, not excluded)?"""
        if any(address in net for net in self.exclude if net.version == address.version):
            return False
        for ranges in self.range_sets:
            for r in ranges:
                if r.holds(address):
                    return address != r.gateway and not _is_broadcast(r.subnet, address)
        return False

    def range_of(self, address: Address) -> tuple[int, AddressRange] | None:
        """The set index and range that hold `address`; None when no range does."""
        for index, ranges in enumerate(self.range_sets):
            for r in ranges:
                if r.holds(address):
                    return index, r
        return None


def parse_pool(ipam: Mapping[str, Any], pool: str, *, source: str) -> PoolConfig:
    """`ipam` checked whole; `errors.InvalidNetworkConfigError` naming `source` (the NAD) and
    listing every problem, each bad value quoted."""
    problems: list[str] = []
    unknown = sorted(set(ipam) - _KEYS)
    if unknown:
        problems.append(f"unknown keys {', '.join(_show(k) for k in unknown)}")
    raw_sets = _raw_range_sets(ipam, problems)
    range_sets: list[tuple[AddressRange, ...]] = []
    for i, raw_set in enumerate(raw_sets):
        ranges = [
            r
            for j, raw in enumerate(raw_set)
            if (r := _parse_range(raw, f"ranges[{i}][{j}]", problems)) is not None
        ]
        if ranges:
            range_sets.append(tuple(ranges))
    _check_overlaps(range_sets, problems)
    exclude = _parse_exclude(ipam.get("exclude", []), problems)
    routes = ipam.get("routes", [])
    if not isinstance(routes, list) or not all(isinstance(r, Mapping) for r in routes):
        problems.append(f"routes must be a list of objects, got {_show(routes)}")
        routes = []
    dns = ipam.get("dns")
    if dns is not None and not isinstance(dns, Mapping):
        problems.append(f"dns must be an object, got {_show(dns)}")
        dns = None
    delay = ipam.get("reuseDelay", DEFAULT_REUSE_DELAY)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= 86400:
        problems.append(f"reuseDelay must be seconds from 0 to 86400, got {_show(delay)}")
        delay = DEFAULT_REUSE_DELAY
    if not pool:
        problems.append("the network has no name (its pool is named after it)")
    if not problems and not range_sets:
        problems.append("no range: give `ranges` or `subnet`")
    if problems:
        raise errors.InvalidNetworkConfigError(
            f"{source}: ipam of type {TYPE!r} is invalid: {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
            "; ".join(problems),
        )
    return PoolConfig(
        pool=pool,
        range_sets=tuple(range_sets),
        exclude=tuple(exclude),
        routes=tuple(routes),
        dns=dns,
        reuse_delay=float(delay),
    )


def _raw_range_sets(ipam: Mapping[str, Any], problems: list[str]) -> list[list[Any]]:
    shorthand = {k: ipam[k] for k in ("subnet", "rangeStart", "rangeEnd", "gateway") if k in ipam}
    ranges = ipam.get("ranges")
    if ranges is not None and shorthand:
        problems.append(f"give `ranges` or `subnet`, not both (got {', '.join(shorthand)})")
        return []
    if ranges is None:
        return [[shorthand]] if shorthand else []
    if not isinstance(ranges, list) or not all(isinstance(s, list) and s for s in ranges):
        problems.append(f"ranges must be a list of non-empty lists of ranges, got {_show(ranges)}")
        return []
    return ranges


def _parse_range(raw: object, key: str, problems: list[str]) -> AddressRange | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{key} must be an object, got {_show(raw)}")
        return None
    text = raw.get("subnet")
    subnet = _network(text, f"{key}.subnet", problems, strict=True)
    if subnet is None:
        return None
    if subnet.prefixlen > MAX_PREFIX[subnet.version]:
        problems.append(f"{key}.subnet {_show(text)} is too small to hand out addresses from")
        return None
    last_default = subnet.broadcast_address - 1 if subnet.version == 4 else subnet[-1]
    first = _address(raw.get("rangeStart"), f"{key}.rangeStart", problems, subnet[1])
    last = _address(raw.get("rangeEnd"), f"{key}.rangeEnd", problems, last_default)
    gateway = _address(raw.get("gateway"), f"{key}.gateway", problems, subnet[1])
    bad = False
    for name, value in (("rangeStart", first), ("rangeEnd", last), ("gateway", gateway)):
        if value is not None and value not in subnet:
            problems.append(f"{key}.{name} {_show(raw.get(name))} is not in the subnet {subnet}")
            bad = True
    if first is None or last is None or gateway is None or bad:
        return None
    if int(first) > int(last):
        problems.append(f"{key}: rangeStart {first} is after rangeEnd {last}")
        return None
    return AddressRange(subnet=subnet, first=first, last=last, gateway=gateway)


def _check_overlaps(range_sets: Sequence[tuple[AddressRange, ...]], problems: list[str]) -> None:
    flat = [(i, r) for i, ranges in enumerate(range_sets) for r in ranges]
    for a, (i, first) in enumerate(flat):
        for _j, second in flat[a + 1 :]:
            if first.first.version == second.first.version and (
                int(first.first) <= int(second.last) and int(second.first) <= int(first.last)
            ):
                problems.append(f"ranges {first} and {second} overlap")
        if any(r.first.version != first.first.version for r in range_sets[i]):
            problems.append(f"range set {i} mixes IPv4 and IPv6 (give each family a set)")
            break


def _parse_exclude(raw: object, problems: list[str]) -> list[Network]:
    if not isinstance(raw, list):
        problems.append(f"exclude must be a list of CIDRs, got {_show(raw)}")
        return []
    found = []
    for i, text in enumerate(raw):
        net = _network(text, f"exclude[{i}]", problems, strict=False)
        if net is not None:
            found.append(net)
    return found


def _network(text: object, key: str, problems: list[str], *, strict: bool) -> Network | None:
    if not isinstance(text, str) or goaddr.is_mapped(text.partition("/")[0]):
        problems.append(f"{key} must be a CIDR (IPv4 written as IPv4), got {_show(text)}")
        return None
    if goaddr.read_cidr(text) is None:
        problems.append(f"{key} is not a CIDR a Go plugin reads, got {_show(text)}")
        return None
    try:
        return ipaddress.ip_network(text, strict=strict)
    except ValueError:
        problems.append(f"{key} {_show(text)} has host bits set")
        return None


def _address(text: object, key: str, problems: list[str], default: Address) -> Address | None:
    if text is None:
        return default
    if goaddr.is_mapped(text):
        problems.append(f"{key} must be an address (IPv4 written as IPv4), got {_show(text)}")
        return None
    found = goaddr.read_ip(text)
    if found is None:
        problems.append(f"{key} is not an address, got {_show(text)}")
    return found


def _is_broadcast(subnet: Network, address: Address) -> bool:
    return subnet.version == 4 and address == subnet.broadcast_address


def _show(value: object) -> str:
    return json.dumps(value)[:120]
