"""Reading and checking a CNI result's fields, for `netattach.cni.result` and its conversion.

The decoding helpers read one field each and record what is wrong in a `Problems` instead of
raising, so one error can name every bad field of a result at once (SPEC.md well-known error 6,
"Failed to decode content"). The version checks say which versions carry which optional field,
which layout a version has, and refuse a version a result type does not cover.

Standard library only: the CNI vocabulary must not depend on anything else.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from netattach.cni import errors, spec, version

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, TypeAlias

# The first version whose result carries each optional field; older wire forms have no such key.
# CNI "spec upgrades" for v1.1: interfaces gained mtu, socketPath and pciID, routes gained mtu,
# advmss, priority, table and scope. Before that, interfaces are name/mac/sandbox only.
INTERFACE_SINCE: Final[Mapping[str, str]] = {
    "mtu": "1.1.0",
    "socket_path": "1.1.0",
    "pci_id": "1.1.0",
}
ROUTE_SINCE: Final[Mapping[str, str]] = {
    "mtu": "1.1.0",
    "advmss": "1.1.0",
    "priority": "1.1.0",
    "table": "1.1.0",
    "scope": "1.1.0",
}

# A bad value is quoted in the error message, cut to this length so a huge one cannot flood it.
SHOW_MAX: Final = 80

Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Prefixed: TypeAlias = ipaddress.IPv4Interface | ipaddress.IPv6Interface


# --------------------------------------------------------------------------------------------
# Decoding helpers: each records problems instead of raising, so one error can list them all.


class Problems:
    """Problems found while decoding one object, each `<field path>: <what is wrong>`."""

    __slots__ = ("_items", "_subject")

    def __init__(self, subject: str) -> None:
        self._subject = subject
        self._items: list[str] = []

    def add(self, path: str, message: str) -> None:
        self._items.append(f"{path}: {message}" if path else message)

    def bad(self, path: str, value: object, expected: str) -> None:
        self.add(path, f"{show(value)} is not {expected}")

    def raise_if_any(self) -> None:
        # SPEC.md well-known error 6: "Failed to decode content".
        if self._items:
            raise errors.DecodingFailureError(f"invalid {self._subject}: " + "; ".join(self._items))


def show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHOW_MAX else text[: SHOW_MAX - 3] + "..."


def at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def mapping(value: object, path: str, problems: Problems) -> Mapping[str, object] | None:
    if isinstance(value, Mapping):
        return value
    problems.bad(path, value, "an object")
    return None


def string(
    raw: Mapping[str, object],
    key: str,
    path: str,
    problems: Problems,
    *,
    required: bool = False,
) -> str:
    """The string under `key`; absent or null is "" (Go leaves the field empty), or "missing"."""
    where = at(path, key)
    value = raw.get(key)
    if value is None:
        if required:
            problems.add(where, "missing")
        return ""
    if not isinstance(value, str) or (required and not value):
        problems.bad(where, value, "a non-empty string" if required else "a string")
        return ""
    return value


def uint(raw: Mapping[str, object], key: str, path: str, problems: Problems) -> int | None:
    """The non-negative integer under `key`, or None when absent or null.

    SPEC.md types these `uint`; JSON `true` is not a number to Go's decoder, nor `1.0` an int.
    """
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        problems.bad(at(path, key), value, "a non-negative integer")
        return None
    return value


def items(
    raw: Mapping[str, object], key: str, path: str, problems: Problems
) -> list[tuple[str, object]]:
    """The elements of the list under `key`, each with its path; absent or null is empty."""
    where = at(path, key)
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        problems.bad(where, value, "a list")
        return []
    return [(f"{where}[{index}]", item) for index, item in enumerate(value)]


def strings(raw: Mapping[str, object], key: str, path: str, problems: Problems) -> tuple[str, ...]:
    found: list[str] = []
    for where, item in items(raw, key, path, problems):
        if isinstance(item, str):
            found.append(item)
        else:
            problems.bad(where, item, "a string")
    return tuple(found)


def parse_prefixed(text: str) -> Prefixed | None:
    """`text` as "address/length", the form Go's net.ParseCIDR accepts, else None.

    `ipaddress` alone is laxer than libcni: it takes a bare address as /32, a netmask after the
    slash and an IPv6 zone ("%eth0"), none of which net.ParseCIDR accepts.
    """
    address, slash, length = text.partition("/")
    if not slash or not (length.isascii() and length.isdigit()) or "%" in address:
        return None
    try:
        return ipaddress.ip_interface(text)
    except ValueError:
        return None


def parse_plain(text: str) -> Address | None:
    """`text` as a bare IP address (net.ParseIP: no prefix, no zone), else None."""
    if "%" in text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def prefixed(
    raw: Mapping[str, object],
    key: str,
    path: str,
    problems: Problems,
    *,
    expected: str,
    family: int | None = None,
) -> tuple[str, Prefixed | None]:
    """The required CIDR string under `key` and its parse (None when it is bad)."""
    where = at(path, key)
    value = raw.get(key)
    if value is None:
        problems.add(where, "missing")
        return "", None
    parsed = parse_prefixed(value) if isinstance(value, str) else None
    if parsed is None or not isinstance(value, str):
        problems.bad(where, value, expected)
        return "", None
    if family is not None and parsed.version != family:
        problems.bad(where, value, f"an IPv{family} {expected.removeprefix('an IP ')}")
        return value, None
    return value, parsed


def gateway(
    raw: Mapping[str, object],
    key: str,
    path: str,
    problems: Problems,
    *,
    peer: Prefixed | None,
    peer_key: str,
) -> str:
    """The optional gateway under `key`: a bare IP of the same family as `peer`.

    SPEC.md (IPs): "All IP addresses and gateways provided must be valid for the given version";
    (Routes): "All IP addresses in the routes entry must be the same IP version".
    An empty string is no gateway, as Go's net.IP reads it.
    """
    where = at(path, key)
    value = raw.get(key)
    if value is None or value == "":
        return ""
    parsed = parse_plain(value) if isinstance(value, str) else None
    if parsed is None or not isinstance(value, str):
        problems.bad(where, value, "an IP address")
        return ""
    if peer is not None and parsed.version != peer.version:
        problems.bad(where, value, f"an IPv{peer.version} address like the {peer_key}")
        return ""
    return value


def carries(cni_version: str, since: str) -> bool:
    return version.at_least(cni_version, since)


def check_version(kind: str, cni_version: str, allowed: tuple[str, ...]) -> None:
    if cni_version not in allowed:
        raise errors.IncompatibleVersionError(
            f"{kind} is for CNI versions {', '.join(allowed)}, not {cni_version!r}"
        )


def declared_version(raw: object, allowed: tuple[str, ...], kind: str) -> str:
    if not isinstance(raw, Mapping):
        raise errors.DecodingFailureError(f"invalid result: {show(raw)} is not an object")
    declared = raw.get("cniVersion")
    if not isinstance(declared, str) or declared not in allowed:
        raise errors.IncompatibleVersionError(
            f"{kind} is for CNI versions {', '.join(allowed)}, not cniVersion {show(declared)}"
        )
    return declared


def layout(cni_version: str) -> str:
    """The layout of a version the spec published; a malformed or unknown one is error 1."""
    if cni_version not in spec.VERSIONS:
        version.parse_version(cni_version)  # a malformed version gets parse_version's message
        raise errors.IncompatibleVersionError(
            f"unknown CNI result version {cni_version!r} (known: {', '.join(spec.VERSIONS)})"
        )
    return version.family(cni_version)
