"""Addresses as the plugins read them, against a Go oracle (SEC-VALUES).

A reference plugin reads an address with Go's `net.ParseIP` and a CIDR with CNI's
`types.ParseCIDR`, and acts on what they return: an IPv4-mapped IPv6 spelling
(`::ffff:169.254.169.254`, `::ffff:a9fe:a9fe`) is the IPv4 address, a zone or a netmask prefix
is refused, and so on. `netattach.guard.goaddr` says how Go reads a text; the guard judges that
reading. tests/go/cnidecode's `-addr` mode is the oracle: the plugins' own parsers, in Go.

Two properties over generated spellings (IPv4 with leading zeros, 3 or 5 parts, octets over 255;
IPv6 full, compressed anywhere, upper case, 5-digit groups, with an embedded IPv4, IPv4-mapped
in dotted and hex forms, IPv4-compatible; zones, whitespace, Unicode digits, empty texts; CIDRs
with padded, signed, spaced, netmask, oversized and mapped prefixes):

    values    `goaddr.read_ip` and `goaddr.read_cidr` read every text as Go does: None exactly
              where Go refuses, else the same address, family, prefix and mask size.
    configs   configs that hand out addresses (static IPAM, ptp's host side, host-local ranges
              and gateways, a bridge's gateway, routes, `args.cni.ips`), written with spellings
              of the node's address and gateway, loopback, the metadata address and a reserved
              range: every config in which Go reads a protected address where the plugin would
              take it is refused by `check.check_config` with
              `node_guard.judge_config`, and in every config the guard accepts, the addresses it
              judged (`node_rules.claims`) are Go's readings of the values.
"""

from __future__ import annotations

import ipaddress
import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeAlias

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from netattach.guard import check, delegate_policy, goaddr, node_rules, node_state, refusal
from netattach.pods import node_guard
from tests.go_decoder import AddrQuery, Decoder, Reading, checked_mix

pytestmark = pytest.mark.req("SEC-VALUES")

Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

A = ipaddress.ip_address
N = ipaddress.ip_network

# --- the node and the policy the configs are judged by ----------------------------------------

NODE_ADDRESS = A("10.77.0.2")
NODE_ADDRESS_6 = A("fd00:77::2")
NODE_GATEWAY = A("10.77.0.1")
NODE_UPLINK = "na-up"
FACTS = node_state.NodeFacts(
    addresses=((NODE_UPLINK, NODE_ADDRESS), (NODE_UPLINK, NODE_ADDRESS_6)),
    gateways=(NODE_GATEWAY,),
)
RESERVED = ("node", "169.254.169.254/32", "fd00:ec2::254/128", "10.96.0.0/12")
BRIDGE = "na-br0"


def _policy() -> delegate_policy.DelegatePolicy:
    problems: list[str] = []
    raw = {"gatewayBridge": ["na-br*"], "reservedRanges": list(RESERVED)}
    policy = delegate_policy.parse_policy(raw, "delegatePolicy", problems)
    assert policy is not None, problems
    return policy


RULES = _policy().rules
# Where no pod, range or node-side address may be, as the policy and the node say.
PROTECTED_NETWORKS: tuple[Network, ...] = (
    N("127.0.0.0/8"),
    N("::1/128"),
    *(N(r) for r in RESERVED if r != "node"),
    *(N(a) for _, a in FACTS.addresses),
    *(N(g) for g in FACTS.gateways),
)
# The addresses the configs are written around: protected ones, and some a pod may take.
PROTECTED = (
    NODE_ADDRESS,
    NODE_GATEWAY,
    NODE_ADDRESS_6,
    A("127.0.0.1"),
    A("169.254.169.254"),
    A("fd00:ec2::254"),
    A("10.96.0.10"),
    A("::1"),
)
BENIGN = (A("10.1.0.5"), A("192.0.2.10"), A("2001:db8::5"), A("10.77.0.50"), A("fd00:77::50"))


def is_protected(address: Address) -> bool:
    return any(address in network for network in PROTECTED_NETWORKS)


# --- spellings -------------------------------------------------------------------------------

UNICODE_ZERO = (0xFF10, 0x0660, 0x0966, 0x1D7CE)  # fullwidth, Arabic-Indic, Devanagari, bold
ZONES = ("%eth0", "%1", "%", "%25eth0", "%na-up")
MAPPED_PREFIXES = (
    "::ffff:",
    "::FFFF:",
    "0:0:0:0:0:ffff:",
    "0000:0000:0000:0000:0000:FFFF:",
    "0::ffff:",
    "::0:ffff:",
    "0:0:0::ffff:",
)
OTHER_V4_IN_V6 = ("::", "::0:", "64:ff9b::", "::ffff:0:", "0:0:0:0:0:0:", "::fffe:", "::1:ffff:")


def _hex(draw: st.DrawFn, value: int) -> str:
    """One IPv6 group: lower, upper or mixed case, padded with zeros to 0-5 digits."""
    text = f"{value:x}"
    width = draw(st.sampled_from((0,) * 12 + (4,) * 8 + (1, 2, 3) * 3 + (5,)))
    text = text.rjust(width, "0")
    case = draw(st.sampled_from(("lower", "lower", "upper", "mixed")))
    if case == "upper":
        return text.upper()
    if case == "mixed":
        return "".join(c.upper() if i % 2 else c for i, c in enumerate(text))
    return text


def _octet(draw: st.DrawFn, value: int) -> str:
    form = draw(st.sampled_from(("plain",) * 40 + ("padded", "padded3", "over")))
    if form == "padded":
        return f"0{value}"
    if form == "padded3":
        return f"{value:03d}"
    if form == "over":
        return str(value + 256)
    return str(value)


def _dotted(draw: st.DrawFn, octets: Sequence[int]) -> str:
    parts = [_octet(draw, o) for o in octets]
    shape = draw(st.sampled_from(("four",) * 30 + ("three", "five", "merged")))
    if shape == "three":
        del parts[draw(st.integers(0, 3))]
    elif shape == "five":
        parts.insert(draw(st.integers(0, 4)), _octet(draw, draw(st.integers(0, 255))))
    elif shape == "merged":  # inet_aton's 10.77.2: the last part the low 16 bits
        parts = [parts[0], parts[1], str(octets[2] * 256 + octets[3])]
    return ".".join(parts)


@st.composite
def v6_spelling(draw: st.DrawFn, value: int) -> str:
    """An IPv6 spelling of the 128-bit `value`: groups padded or not, any run of zero groups
    (or none, or not the longest, or a non-zero one) compressed, maybe an IPv4 tail."""
    groups = [(value >> (112 - 16 * i)) & 0xFFFF for i in range(8)]
    tail = draw(st.booleans()) and draw(st.booleans())
    hex_groups = groups[:6] if tail else groups
    texts = [_hex(draw, g) for g in hex_groups]
    runs = [
        (i, j)
        for i in range(len(hex_groups))
        for j in range(i + 1, len(hex_groups) + 1)
        if all(g == 0 for g in hex_groups[i:j])
    ]
    choice = draw(st.sampled_from(("none", "zero-run", "zero-run", "zero-run", "any-run")))
    if choice == "zero-run" and runs:
        i, j = draw(st.sampled_from(runs))
    elif choice == "any-run":
        i = draw(st.integers(0, len(hex_groups) - 1))
        j = draw(st.integers(i + 1, len(hex_groups)))
    else:
        i = j = -1
    if i >= 0:
        head, rest = ":".join(texts[:i]), ":".join(texts[j:])
        text = f"{head}::{rest}"
        if tail and j == len(hex_groups):
            text = f"{head}::"
    else:
        text = ":".join(texts)
    if tail:
        v4 = _dotted(draw, [(groups[6] >> 8), groups[6] & 0xFF, groups[7] >> 8, groups[7] & 0xFF])
        text = f"{text}{v4}" if text.endswith("::") else f"{text}:{v4}"
    return text


@st.composite
def ip_spelling(draw: st.DrawFn, address: Address) -> str:
    """A spelling of `address` Go may or may not read as it: see the module's docstring."""
    if isinstance(address, ipaddress.IPv4Address):
        octets = list(address.packed)
        form = draw(
            st.sampled_from(
                ("dotted",) * 4 + ("mapped", "mapped", "mapped-hex", "mapped-v6", "v4-in-v6")
            )
        )
        if form == "dotted":
            text = _dotted(draw, octets)
        elif form == "mapped":
            text = draw(st.sampled_from(MAPPED_PREFIXES)) + _dotted(draw, octets)
        elif form == "mapped-hex":
            high, low = int(address) >> 16, int(address) & 0xFFFF
            text = draw(st.sampled_from(MAPPED_PREFIXES)) + f"{_hex(draw, high)}:{_hex(draw, low)}"
        elif form == "mapped-v6":
            text = draw(v6_spelling(0xFFFF << 32 | int(address)))
        else:  # IPv4-compatible, NAT64, SIIT...: other IPv6 addresses
            text = draw(st.sampled_from(OTHER_V4_IN_V6)) + _dotted(draw, octets)
    else:
        text = draw(v6_spelling(int(address)))
    return draw(_mutated(text))


@st.composite
def _mutated(draw: st.DrawFn, text: str) -> str:
    """`text`, or it with whitespace, a zone, a Unicode digit, upper case, cut or emptied."""
    how = draw(
        st.sampled_from(
            ("as is",) * 40 + ("space", "zone", "unicode digit", "upper", "cut", "empty", "junk")
        )
    )
    if how == "space":
        pad = draw(st.sampled_from((" ", "\t", "\n", "\u00a0", "\u3000")))
        return draw(st.sampled_from((pad + text, text + pad)))
    if how == "zone":
        return text + draw(st.sampled_from(ZONES))
    if how == "unicode digit":
        digits = [i for i, c in enumerate(text) if c.isdigit()]
        if not digits:
            return text
        i = draw(st.sampled_from(digits))
        zero = draw(st.sampled_from(UNICODE_ZERO))
        return text[:i] + chr(zero + int(text[i])) + text[i + 1 :]
    if how == "upper":
        return text.upper()
    if how == "cut":
        return text[: draw(st.integers(0, max(0, len(text) - 1)))]
    if how == "empty":
        return ""
    if how == "junk":
        i = draw(st.integers(0, len(text)))
        return (
            text[:i]
            + draw(st.sampled_from((":", ".", "::", "x", "0", "/", "%", "\u0000")))
            + text[i:]
        )
    return text


def _netmask(prefix: int, bits: int) -> str:
    if bits == 32:
        return str(N(f"0.0.0.0/{prefix}").netmask)
    return str(N(f"::/{prefix}").netmask)


@st.composite
def prefix_spelling(draw: st.DrawFn, prefix: int, bits: int) -> str:
    form = draw(
        st.sampled_from(
            ("plain",) * 30
            + ("padded", "netmask", "hostmask", "over", "huge", "signed", "spaced", "hex")
            + ("unicode", "empty", "slash")
        )
    )
    if form == "padded":
        return "0" * draw(st.integers(1, 12)) + str(prefix)
    if form == "netmask":
        return _netmask(prefix, bits)
    if form == "hostmask":
        return str(N(f"0.0.0.0/{min(prefix, 32)}").hostmask)
    if form == "over":
        return str(draw(st.sampled_from((bits + 1, 33, 64, 129, 255, 256 + prefix))))
    if form == "huge":
        return str(draw(st.sampled_from((2**32 + prefix, 2**64 + prefix, 0xFFFFFF, 10**30))))
    if form == "signed":
        return draw(st.sampled_from(("+", "-"))) + str(prefix)
    if form == "spaced":
        return draw(st.sampled_from((f" {prefix}", f"{prefix} ", f"{prefix}\n")))
    if form == "hex":
        return f"0x{prefix:x}"
    if form == "unicode":
        zero = draw(st.sampled_from(UNICODE_ZERO))
        return "".join(chr(zero + int(c)) for c in str(prefix))
    if form == "empty":
        return ""
    if form == "slash":
        return f"{prefix}/{prefix}"
    return str(prefix)


@st.composite
def cidr_spelling(draw: st.DrawFn, address: Address, prefix: int) -> str:
    """A CIDR spelling of `address` with `prefix` (IPv6 bits when the spelling is IPv6)."""
    text = draw(ip_spelling(address))
    bits = 128 if ":" in text else 32
    if ":" in text and address.version == 4:
        prefix = 96 + prefix  # a mapped CIDR: what the writer would mean
    return f"{text}/{draw(prefix_spelling(min(prefix, bits), bits))}"


ADDRESSES = st.sampled_from((*PROTECTED, *BENIGN, A("0.0.0.0"), A("255.255.255.255"), A("::")))
# Texts with no address in them at all, a few.
JUNK = st.text(alphabet="0123456789abcdefABCDEF:.%/ x", max_size=24)


@st.composite
def query(draw: st.DrawFn) -> AddrQuery:
    if draw(st.integers(0, 19)) == 0:
        return draw(st.sampled_from(("ip", "cidr"))), draw(JUNK)
    address = draw(ADDRESSES)
    if draw(st.booleans()):
        return "ip", draw(ip_spelling(address))
    prefix = draw(st.sampled_from((0, 8, 12, 16, 24, 30, 31, 32)))
    if address.version == 6:
        prefix = draw(st.sampled_from((0, 48, 64, 96, 120, 127, 128)))
    return "cidr", draw(cidr_spelling(address, prefix))


# --- the oracle's reading --------------------------------------------------------------------


class GoRead(NamedTuple):
    """What Go reads of one text: None when it refuses it."""

    ip: Address | None
    prefix: int = 0
    bits: int = 0

    @property
    def mapped(self) -> bool:
        return self.ip is not None and self.ip.version == 4 and self.bits == 128

    @property
    def network(self) -> Network:
        assert self.ip is not None
        assert not self.mapped
        return N(f"{self.ip}/{self.prefix}", strict=False)


def go_read(answer: Reading) -> GoRead:
    if not answer["ok"]:
        return GoRead(None)
    ip = A(answer["ip"])
    assert (ip.version == 4) == answer["v4"], answer
    return GoRead(ip, answer["prefix"], answer["bits"])


def differences(queries: Sequence[AddrQuery], answers: Sequence[Reading]) -> list[str]:
    """Each query goaddr reads otherwise than Go, said precisely."""
    found = []
    for (kind, text), answer in zip(queries, answers, strict=True):
        go = go_read(answer)
        if kind == "ip":
            ours = goaddr.read_ip(text)
            if (ours, type(ours)) != (go.ip, type(go.ip)):
                found.append(f"read_ip({text!r}): Go reads {go.ip}, goaddr {ours}")
            continue
        cidr = goaddr.read_cidr(text)
        ours_read = GoRead(None) if cidr is None else GoRead(cidr.ip, cidr.prefix, cidr.bits)
        if ours_read != go or (cidr is not None and cidr.mapped != go.mapped):
            found.append(f"read_cidr({text!r}): Go reads {go}, goaddr {cidr}")
    return found


# --- values ----------------------------------------------------------------------------------

# Spellings worth naming: each is a way Go and Python's ipaddress differ, or might.
NAMED: tuple[AddrQuery, ...] = (
    ("ip", "::ffff:192.0.2.10"),
    ("ip", "::ffff:c000:20a"),
    ("ip", "::FFFF:C000:020A"),
    ("ip", "0:0:0:0:0:ffff:169.254.169.254"),
    ("ip", "::ffff:a9fe:a9fe"),
    ("ip", "::1.2.3.4"),
    ("ip", "::ffff:0:1.2.3.4"),
    ("ip", "64:ff9b::1.2.3.4"),
    ("ip", "fe80::1%eth0"),
    ("ip", "1.2.3.4%eth0"),
    ("ip", "010.77.0.2"),
    ("ip", "10.77.2"),
    ("ip", "10.77.0.2.0"),
    ("ip", "10.77.0.258"),
    ("ip", "::ffff:010.77.0.2"),
    ("ip", "1::2:3:4:5:6:7:8"),
    ("ip", "1:2:3:4:5:6:7::"),
    ("ip", "::0ffff:1.2.3.4"),
    ("ip", " 10.77.0.2"),
    ("ip", "10.77.0.2 "),
    ("ip", "\uff110.77.0.2"),  # a fullwidth 1
    ("ip", "fd00:77::\uff12"),
    ("ip", ""),
    ("cidr", "1.2.3.4/032"),
    ("cidr", "1.2.3.4/0000000000000000000024"),
    ("cidr", "10.0.0.0/255.255.0.0"),
    ("cidr", "10.0.0.0/33"),
    ("cidr", "10.0.0.0/4294967320"),
    ("cidr", "10.0.0.0/+8"),
    ("cidr", "10.0.0.0/ 8"),
    ("cidr", "10.0.0.0/\uff18"),
    ("cidr", "10.0.0.0/"),
    ("cidr", "10.0.0.0"),
    ("cidr", "::ffff:10.77.0.0/120"),
    ("cidr", "::ffff:10.77.0.2/24"),
    ("cidr", "::ffff:a4d:2/128"),
    ("cidr", "::10.77.0.2/128"),
    ("cidr", "fe80::1%eth0/64"),
    ("cidr", "fd00:77::2/064"),
    ("cidr", "fd00:77::2/129"),
)


def test_the_named_spellings_are_read_as_go_reads_them(cnidecode: Decoder) -> None:
    answers = cnidecode.addresses(NAMED)
    assert not differences(NAMED, answers)
    # The oracle is the one the module's docstring describes.
    readings = {text: go_read(a) for (_, text), a in zip(NAMED, answers, strict=True)}
    assert readings["::ffff:c000:20a"] == GoRead(A("192.0.2.10"))
    assert readings["::1.2.3.4"] == GoRead(A("::102:304"))
    assert readings["fe80::1%eth0"] == GoRead(None)
    assert readings["::ffff:10.77.0.0/120"] == GoRead(A("10.77.0.0"), 120, 128)
    assert readings["1.2.3.4/032"] == GoRead(A("1.2.3.4"), 32, 32)


VALUE_BATCH = 200
VALUE_BATCHES = 25  # 5,000 texts a run


@pytest.fixture
def value_mix() -> Iterator[Counter[str]]:
    """What the generated texts were, checked after the property to be a healthy mix."""

    def healthy(seen: Counter[str], total: int) -> None:
        kinds = ("go reads", "go refuses", "mapped ip", "mapped cidr", "v6 read", "v4 cidr read")
        for kind in kinds:
            assert seen[kind] >= total // 50, seen

    yield from checked_mix(("go reads", "go refuses"), VALUE_BATCH * VALUE_BATCHES, healthy)


@settings(
    max_examples=VALUE_BATCHES,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a failure names every text
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(queries=st.lists(query(), min_size=VALUE_BATCH, max_size=VALUE_BATCH))
def test_goaddr_reads_every_address_and_cidr_as_go_does(
    cnidecode: Decoder, value_mix: Counter[str], queries: list[AddrQuery]
) -> None:
    answers = cnidecode.addresses(queries)
    for (kind, text), answer in zip(queries, answers, strict=True):
        go = go_read(answer)
        value_mix["go reads" if go.ip is not None else "go refuses"] += 1
        if go.ip is not None and ":" in text.partition("/")[0] and go.ip.version == 4:
            value_mix[f"mapped {kind}"] += 1
        elif go.ip is not None and go.ip.version == 6:
            value_mix["v6 read"] += 1
        elif go.ip is not None and kind == "cidr":
            value_mix["v4 cidr read"] += 1
    found = differences(queries, answers)
    value_mix["failed"] += bool(found)
    assert not found, "\n".join(found)


# --- configs ---------------------------------------------------------------------------------

# What a value is to the plugin that takes it.
POD = "pod"  # an address the pod takes (static IPAM, ips)
HOST = "host"  # an address the plugin puts on the node (ptp's host side, a bridge's gateway)
RANGE = "range"  # a host-local range's subnet, rangeStart, rangeEnd, gateway
ROUTE = "route"  # a route's dst or gw, in the pod
POD_GATEWAY = "pod gateway"  # a static address's gateway the pod routes through (not on the node)


class Slot(NamedTuple):
    """One address value of a config: its path, how Go parses it, what it is, its text."""

    path: str
    kind: str  # "ip" or "cidr"
    role: str
    text: str


class Config(NamedTuple):
    template: str
    raw: dict[str, Any]
    slots: tuple[Slot, ...]
    ranges: tuple[str, ...]  # the paths of its host-local range objects
    gateway_bridge: bool  # a bridge with isGateway: its range's gateway and subnet go on the node


def _set(raw: dict[str, Any], path: str, value: object) -> None:
    """Set `value` at `path` (`ipam.ranges[0][0].subnet`) in `raw`, which has the containers."""
    node: Any = raw
    parts = path.replace("[", ".[").split(".")
    for part in parts[:-1]:
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    last = parts[-1]
    if last.startswith("["):
        node[int(last[1:-1])] = value
    else:
        node[last] = value


@st.composite
def config(draw: st.DrawFn) -> Config:
    """A config written around one address (protected or not), each value spelled anew."""
    center = draw(st.sampled_from((*PROTECTED, *BENIGN, *BENIGN)))
    prefix = 24 if center.version == 4 else 64
    net = N(f"{center}/{prefix}", strict=False)
    # The addresses a value may name: mostly the center, else the subnet's first or another of
    # its addresses, or a protected address (of either family: then mostly outside the subnet).
    other = draw(st.sampled_from(PROTECTED))
    near = st.sampled_from((center,) * 4 + (net[1], net[7], other))

    # Half the values written plainly, so that many configs are readable throughout.
    def ip(path: str, role: str) -> Slot:
        address = draw(near)
        text = str(address) if draw(st.booleans()) else draw(ip_spelling(address))
        return Slot(path, "ip", role, text)

    def cidr(path: str, role: str, plen: int = prefix, address: Address | None = None) -> Slot:
        address = draw(near) if address is None else address
        plain = f"{address}/{plen}"
        text = plain if draw(st.booleans()) else draw(cidr_spelling(address, plen))
        return Slot(path, "cidr", role, text)

    def subnet(path: str) -> Slot:
        address = draw(st.sampled_from((net.network_address, net.network_address, center)))
        return cidr(path, RANGE, prefix, address)

    def host_local(at: str, *, optional: bool = True) -> list[Slot]:
        slots = [subnet(f"{at}.subnet")]
        for key in ("rangeStart", "rangeEnd", "gateway"):
            if not optional or draw(st.booleans()) or draw(st.booleans()):
                slots.append(ip(f"{at}.{key}", RANGE))
        return slots

    def routes(at: str) -> list[Slot]:
        if not draw(st.booleans()):
            return []
        return [
            cidr(f"{at}[0].dst", ROUTE, draw(st.sampled_from((32, 24, 16, 0)))),
            ip(f"{at}[0].gw", ROUTE),
        ]

    template = draw(
        st.sampled_from(
            ("static-macvlan", "static-ptp", "host-local-ptp", "bridge-gateway", "bridge", "ips")
        )
    )
    base: dict[str, Any] = {"cniVersion": "1.0.0", "name": "net"}
    ranges: list[str] = []
    gateway_bridge = False
    if template == "static-macvlan":
        raw = {**base, "type": "macvlan", "master": "na-m1", "ipam": {"type": "static"}}
        raw["ipam"]["addresses"] = [{}]
        raw["ipam"]["routes"] = [{}]
        slots = [
            cidr("ipam.addresses[0].address", POD),
            ip("ipam.addresses[0].gateway", POD_GATEWAY),
        ]
        slots += routes("ipam.routes")
    elif template == "static-ptp":
        raw = {**base, "type": "ptp", "ipam": {"type": "static", "addresses": [{}], "routes": [{}]}}
        slots = [cidr("ipam.addresses[0].address", POD), ip("ipam.addresses[0].gateway", HOST)]
        slots += routes("ipam.routes")
    elif template == "host-local-ptp":
        raw = {**base, "type": "ptp", "ipam": {"type": "host-local", "routes": [{}]}}
        slots = host_local("ipam", optional=False) + routes("ipam.routes")
        ranges.append("ipam")
    elif template in ("bridge-gateway", "bridge"):
        raw = {**base, "type": "bridge", "bridge": BRIDGE}
        raw["ipam"] = {"type": "host-local", "ranges": [[{}]], "routes": [{}]}
        if template == "bridge-gateway":
            raw["isGateway"] = True
            gateway_bridge = True
        slots = host_local("ipam.ranges[0][0]") + routes("ipam.routes")
        ranges.append("ipam.ranges[0][0]")
    else:
        raw = {**base, "type": "macvlan", "master": "na-m1", "ipam": {"type": "static"}}
        raw["args"] = {"cni": {"ips": [None]}}
        as_cidr = draw(st.booleans())
        slots = [cidr("args.cni.ips[0]", POD) if as_cidr else ip("args.cni.ips[0]", POD)]
    for slot in slots:
        _set(raw, slot.path, slot.text)
    for key in ("routes",):  # drop the placeholders no slot filled
        ipam = raw.get("ipam", {})
        if key in ipam and ipam[key] == [{}]:
            del ipam[key]
    if raw.get("ipam", {}).get("addresses") == [{}]:
        del raw["ipam"]["addresses"]
    return Config(template, raw, tuple(slots), tuple(ranges), gateway_bridge)


def guard(raw: Mapping[str, Any]) -> list[refusal.Refusal]:
    """Everything the guard refuses of `raw` on the node of FACTS: the config alone, then what
    the node knows."""
    found = check.check_config(raw, RULES)
    return found or node_guard.judge_config(raw, RULES, FACTS, live=node_state.LiveAttachments())


def must_refuse(cfg: Config, go: Mapping[str, GoRead]) -> list[str]:
    """Why Go's reading of `cfg` takes a protected address where the plugin would take it (the
    pod's address, the node side of ptp or of a gateway bridge, or what a range hands out);
    empty when it does not, or when the plugin would fail on what Go reads."""
    why: list[str] = []
    for slot in cfg.slots:
        read = go[slot.path]
        if read.ip is None:
            continue
        host_side = cfg.template == "static-ptp" and slot.role == HOST
        if (slot.role == POD or host_side) and is_protected(read.ip):
            why.append(f"{slot.path} {slot.text!r} is {read.ip}")
    for at in cfg.ranges:
        why.extend(_range_takes(cfg, at, go))
    return why


def _range_takes(cfg: Config, at: str, go: Mapping[str, GoRead]) -> Iterator[str]:
    """What a host-local range hands out (and, on ptp or a gateway bridge, puts on the node)
    that is protected, as Go reads it. A range host-local would refuse (a bound outside its
    subnet) takes nothing."""
    subnet = go[f"{at}.subnet"]
    if subnet.ip is None or subnet.mapped:
        return
    network = subnet.network
    read: dict[str, Address | None] = {}
    for key in ("rangeStart", "rangeEnd", "gateway"):
        path = f"{at}.{key}"
        if path in go:
            value = go[path].ip
            if value is None or value not in network:
                return
            read[key] = value
    if network.num_addresses <= 2:
        return
    gateway = read.get("gateway", network.network_address + 1)
    first = read.get("rangeStart", network.network_address + 1)
    last = read.get("rangeEnd", network[-2] if network.version == 4 else network[-1])
    assert first is not None
    assert last is not None
    for address in PROTECTED:
        same = address.version == network.version
        if same and int(first) <= int(address) <= int(last) and address != gateway:
            yield f"{at} hands out {address} ({first}-{last})"
    node_side = cfg.template == "host-local-ptp" or cfg.gateway_bridge
    if node_side and gateway is not None and is_protected(gateway):
        yield f"{at}.gateway is {gateway}, put on the node"
    routed = cfg.gateway_bridge and gateway is not None  # the bridge's address, with the prefix
    if routed and any(network.overlaps(p) for p in PROTECTED_NETWORKS):
        yield f"{at}.subnet {network} is routed on the node over a protected address"


def claims_differ(cfg: Config, go: Mapping[str, GoRead]) -> list[str]:
    """Where the addresses the guard judged (`node_rules.claims`) are not Go's readings."""
    found, unreadable = node_rules.claims(cfg.raw)
    if unreadable:
        return [f"accepted, yet claims() found values unreadable: {unreadable}"]
    by_key: dict[tuple[str, str], node_rules.Claim] = {}
    for claim in found:
        by_key.setdefault((claim.key, claim.kind), claim)
    problems: list[str] = []

    def expect(key: str, kind: str, first: object, last: object, **more: object) -> None:
        claim = by_key.get((key, kind))
        got = (
            None if claim is None else (claim.first, claim.last, *(getattr(claim, k) for k in more))
        )
        want = (first, last, *more.values())
        if got != want:
            problems.append(f"claim {kind} at {key}: guard {got}, Go {want}")

    for slot in cfg.slots:
        read = go[slot.path]
        if slot.role == POD_GATEWAY:
            continue  # the pod's own route: not judged, not claimed
        if read.ip is None or (slot.kind == "cidr" and read.mapped):
            problems.append(f"accepted {slot.path} {slot.text!r}, which Go reads as {read}")
        elif slot.role in (POD, HOST):
            kind = node_rules.POD if slot.role == POD else node_rules.HOST
            expect(slot.path, kind, read.ip, read.ip)
        elif slot.role == ROUTE and slot.path.endswith(".dst"):
            expect(slot.path, node_rules.ROUTE_DST, read.network.network_address, read.network[-1])
        elif slot.role == ROUTE:
            expect(slot.path, node_rules.ROUTE_GW, read.ip, read.ip)
    for at in cfg.ranges:
        network = go[f"{at}.subnet"].network
        usable = (network.network_address + 1, network[-2] if network.version == 4 else network[-1])
        if network.num_addresses <= 2:
            usable = (network.network_address, network[-1])
        bounds = [
            go[f"{at}.{key}"].ip if f"{at}.{key}" in go else default
            for key, default in (("rangeStart", usable[0]), ("rangeEnd", usable[1]))
        ]
        if f"{at}.gateway" in go:
            gateway = go[f"{at}.gateway"].ip
        else:
            gateway = network.network_address + 1 if network.num_addresses > 2 else None
        expect(f"{at}.subnet", node_rules.SPAN, *bounds, gateway=gateway)
        node_side = cfg.template == "host-local-ptp" or cfg.gateway_bridge
        if node_side and gateway is not None:
            expect(f"{at}.gateway", node_rules.HOST, gateway, gateway)
        if cfg.gateway_bridge and gateway is not None:
            expect(f"{at}.gateway", node_rules.SUBNET, network.network_address, network[-1])
    return problems


CONFIG_BATCH = 40
CONFIG_BATCHES = 40  # 1,600 configs a run


@pytest.fixture
def config_mix() -> Iterator[Counter[str]]:
    def healthy(seen: Counter[str], total: int) -> None:
        assert seen["accepted"] >= total // 20, seen
        assert seen["Go reads a protected address"] >= total // 10, seen
        assert seen["accepted with a spelling Go reads otherwise"] > 0, seen
        for template in ("static-macvlan", "static-ptp", "host-local-ptp", "bridge-gateway", "ips"):
            assert seen[f"accepted {template}"] > 0, seen

    yield from checked_mix(("accepted", "refused"), CONFIG_BATCH * CONFIG_BATCHES, healthy)


@settings(
    max_examples=CONFIG_BATCHES,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(configs=st.lists(config(), min_size=CONFIG_BATCH, max_size=CONFIG_BATCH))
def test_the_guard_refuses_what_go_reads_as_protected_and_judges_what_go_reads(
    cnidecode: Decoder, config_mix: Counter[str], configs: list[Config]
) -> None:
    queries = [(slot.kind, slot.text) for cfg in configs for slot in cfg.slots]
    answers = iter(cnidecode.addresses(queries))
    failures = []
    for cfg in configs:
        go = {slot.path: go_read(next(answers)) for slot in cfg.slots}
        refusals = guard(cfg.raw)
        takes = must_refuse(cfg, go)
        config_mix["refused" if refusals else "accepted"] += 1
        if takes:
            config_mix["Go reads a protected address"] += 1
        shown = json.dumps(cfg.raw, ensure_ascii=False)
        if takes and not refusals:
            failures.append(f"accepted {shown}\n  Go reads: {'; '.join(takes)}")
        if not refusals:
            config_mix[f"accepted {cfg.template}"] += 1
            if any(_reads_otherwise(slot.text, go[slot.path]) for slot in cfg.slots):
                config_mix["accepted with a spelling Go reads otherwise"] += 1
            problems = claims_differ(cfg, go)
            if problems:
                failures.append(f"accepted {shown}\n  " + "\n  ".join(problems))
    config_mix["failed"] += bool(failures)
    assert not failures, "\n".join(failures)


def _reads_otherwise(text: str, read: GoRead) -> bool:
    """Does Go read `text` as an address written otherwise (mapped, padded prefix, ...)?"""
    if read.ip is None:
        return False
    head, _, prefix = text.partition("/")
    return head != str(read.ip) or (prefix != "" and prefix != str(read.prefix))


def test_a_config_refused_for_a_mapped_metadata_address(cnidecode: Decoder) -> None:
    """The attack the property generalises: a static pod address spelled as IPv4-mapped IPv6
    hex, which Go reads as the metadata service's address."""
    text = "::ffff:a9fe:a9fe"
    [answer] = cnidecode.addresses([("ip", text)])
    assert go_read(answer) == GoRead(A("169.254.169.254"))
    raw = {
        "cniVersion": "1.0.0",
        "name": "net",
        "type": "macvlan",
        "master": "na-m1",
        "ipam": {"type": "static"},
        "args": {"cni": {"ips": [text]}},
    }
    assert guard(raw)
