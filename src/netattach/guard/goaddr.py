"""Addresses as a Go plugin reads them (SEC-VALUES): `net.ParseIP` and `net.ParseCIDR`.

The delegate guard judges the address a plugin will act on, not the string a NAD wrote. Python's
`ipaddress` and Go's `net` read the same strings differently in a few places, each a way to slip
a protected address past a guard that compares what Python read:

    "::ffff:192.0.2.10"     Go: IPv4 192.0.2.10 (`To4()` is non-nil for every IPv4-mapped IPv6
    "::ffff:c000:20a"       address, whatever its spelling); Python: an IPv6 address. The plugin
                            and netlink act on the IPv4 address: read here as IPv4.
    "::ffff:10.0.0.5/120"   Go: an IPv4 address with a 128-bit mask, which netlink and the
                            plugins turn into prefixes nobody can predict (/0 was seen): such a
                            CIDR is refused (`MAPPED_CIDR`), never judged.
    "fe80::1%eth0"          Go refuses a zone in both; Python 3.9+ takes it: refused.
    "10.0.0.0/255.255.0.0"  Go's prefix is decimal digits only; Python takes a netmask (and a
                            hostmask): refused.
    "1.2.3.4/032"           both read 32 (Go's `dtoi` takes leading zeros).

Everything else Go takes, Python takes the same way (IPv4 without leading zeros, IPv6 with at
most four hex digits a group, an embedded IPv4 last); tests/unit/test_values_oracle.py proves
it against a Go program that parses with the plugins' own `net` and CNI types.
"""

from __future__ import annotations

import ipaddress

from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, TypeAlias

    Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
    Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

# What a refusal says of a value Go reads otherwise than it is written.
MAPPED_CIDR: Final = (
    "is an IPv4-mapped IPv6 CIDR: a Go plugin reads the address as IPv4 and the prefix as IPv6 "
    "bits, which the node would apply unpredictably; write it as IPv4"
)
_DIGITS: Final = frozenset("0123456789")


class GoCIDR(NamedTuple):
    """A CIDR as `net.ParseCIDR` reads it: `ip` the address (IPv4 when Go's `To4()` is non-nil),
    `prefix` and `bits` as the mask's `Size()` answers (32 or 128 bits: 128 for any IPv6
    spelling, the IPv4-mapped ones included), `mapped` when the address was written as an
    IPv4-mapped IPv6 one."""

    ip: Address
    prefix: int
    bits: int
    mapped: bool

    @property
    def network(self) -> Network:
        """The network the plugin means (only when not `mapped`: then it is not known)."""
        return ipaddress.ip_network(f"{self.ip}/{self.prefix}", strict=False)


def read_ip(text: object) -> Address | None:
    """`text` as `net.ParseIP` reads it and a plugin then acts on it (an IPv4-mapped IPv6
    spelling is IPv4); None where Go refuses it."""
    if not isinstance(text, str) or "%" in text:
        return None  # Go has no zones in net.IP; ipaddress would take one
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_mapped(text: object) -> bool:
    """Is `text` an IPv6 spelling Go reads as an IPv4 address?"""
    if not isinstance(text, str) or "%" in text:
        return False
    try:
        address = ipaddress.ip_address(text.partition("/")[0])
    except ValueError:
        return False
    return isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None


def read_cidr(text: object) -> GoCIDR | None:
    """`text` as `net.ParseCIDR` reads it; None where Go refuses it."""
    if not isinstance(text, str):
        return None
    address_text, slash, prefix_text = text.partition("/")
    if not slash or not prefix_text or not set(prefix_text) <= _DIGITS:
        return None  # Go takes decimal digits only: no netmask, no sign, no space
    ip = read_ip(address_text)
    if ip is None:
        return None
    mapped = ":" in address_text and ip.version == 4
    bits = 32 if ":" not in address_text else 128
    prefix = int(prefix_text)
    if prefix > bits:
        return None
    return GoCIDR(ip=ip, prefix=prefix, bits=bits, mapped=mapped)
