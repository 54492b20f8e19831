"""The value checks of the network selection annotation (`netattach.attach.selection`).

Each check takes one value of a selection and its path in the annotation, and either returns it
or appends a problem quoting it to `problems`, so the parser can report every bad value at once:
strings and JSON objects, integers in a range (ports, bandwidth), DNS-1123 labels and names,
interface names, IP addresses as Go's net.ParseIP and net.ParseCIDR read them, and hardware
addresses as Go's net.ParseMAC reads them. `show` quotes a bad value for an error message.
"""

from __future__ import annotations

import ipaddress
import json
import re

from netattach import names
from netattach.cni import env

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeGuard

# Bad values are quoted in errors, cut to this many characters.
_SHOW_CHARS = 80

# Patterns as text: `re` compiles each on first use and caches it, so a start of the thin
# plugin compiles only those its call needs.

# Go's net.ParseMAC forms: hex pairs joined by ':' or '-', or hex quads joined by '.'.
_HEX_PAIRS = r"[0-9a-fA-F]{2}([:-])[0-9a-fA-F]{2}(?:\1[0-9a-fA-F]{2})*"
_HEX_QUADS = r"[0-9a-fA-F]{4}(?:\.[0-9a-fA-F]{4})*"
_PREFIX_LENGTH = r"0|[1-9][0-9]{0,2}"


def check_str(value: object, path: str, problems: list[str]) -> TypeGuard[str]:
    if isinstance(value, str):
        return True
    problems.append(f"{path}: {show(value)} is not a string")
    return False


def check_object(
    value: object, path: str, keys: tuple[str, ...], problems: list[str]
) -> TypeGuard[dict[str, object]]:
    """Whether `value` is a JSON object; its keys outside `keys` are reported."""
    if not isinstance(value, dict):
        problems.append(f"{path}: {show(value)} is not a JSON object")
        return False
    for key in value:
        if key not in keys:
            problems.append(f"{path}: unknown key {show(key)} (expected {', '.join(keys)})")
    return True


def check_int(value: object, path: str, low: int, high: int, problems: list[str]) -> int | None:
    if value is None:
        return None
    # bool is an int subclass in Python, but `true` is not a number in JSON.
    if not isinstance(value, int) or isinstance(value, bool):
        problems.append(f"{path}: {show(value)} is not an integer")
        return None
    if not low <= value <= high:
        problems.append(f"{path}: {show(value)} is not between {low} and {high}")
        return None
    return value


def check_label(value: str, path: str, problems: list[str]) -> str:
    # Standard §3.3: a NAD's name and namespace are DNS-1123 labels.
    if not names.is_label(value):
        problems.append(f"{path}: {show(value)} is not a DNS-1123 label ({names.LABEL_RULE})")
        return ""
    return value


def check_subdomain(value: str, path: str, problems: list[str]) -> str:
    # An IPAMClaim is named like any Kubernetes object: a DNS-1123 subdomain.
    if not names.is_subdomain(value):
        problems.append(f"{path}: {show(value)} is not a DNS-1123 name ({names.SUBDOMAIN_RULE})")
        return ""
    return value


def check_interface(value: str, path: str, problems: list[str]) -> str:
    problem = env.interface_name_problem(value)
    if problem is not None:
        problems.append(f"{path}: {show(value)} is not a valid interface name: {problem}")
        return ""
    return value


def parse_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`text` as an IP address, accepting what Go's net.ParseIP accepts (no `%zone`)."""
    if not text.isascii() or "%" in text or "/" in text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def parse_address_or_cidr(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address of `a.b.c.d` or `a.b.c.d/len` (host bits may be set, as in Go's ParseCIDR)."""
    text, slash, prefix = text.partition("/")
    address = parse_address(text)
    if address is None or not slash:
        return address
    # Python would also take a netmask after the '/'; Go's ParseCIDR takes a length only.
    if not re.fullmatch(_PREFIX_LENGTH, prefix) or int(prefix) > address.max_prefixlen:
        return None
    return address


def is_ipv4_mapped(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None


def hardware_address_bytes(text: str) -> int | None:
    """How many bytes `text` spells in one of Go's net.ParseMAC forms, or None."""
    if re.fullmatch(_HEX_PAIRS, text):
        return (len(text) + 1) // 3
    if re.fullmatch(_HEX_QUADS, text):
        return 2 * (len(text) + 1) // 5
    return None


def show(value: object) -> str:
    """`value` quoted for an error message: repr for a string, JSON otherwise; cut when long."""
    if isinstance(value, str):
        shown = repr(value[: _SHOW_CHARS + 1])  # a 10 MB value is not copied to be cut
    else:
        try:
            shown = json.dumps(value)
        except (TypeError, ValueError):
            shown = repr(value)
    if len(shown) > _SHOW_CHARS:
        return shown[:_SHOW_CHARS] + "..."
    return shown
