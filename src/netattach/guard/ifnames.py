"""Host interface names as the kernel reads them (SEC-VALUES).

A plugin hands a `master`, `bridge` or `device` to netlink (`LinkByName`, `LinkAdd`), and the
kernel does not read the name as the NAD's string:

    a NUL byte          netlink sends the name NUL-terminated and the kernel copies it up to
                        the first NUL: "cni0\\u0000x" is cni0
    over 15 bytes       IFNAMSIZ is 16 with the NUL: a longer name is refused by the kernel's
                        attribute policy, or cut to 15 bytes by kernels that copy without it
    an alternative      `ip link property add dev eth0 altname uplink`: the kernel answers a
    name (altname)      lookup of `uplink` with eth0 (altnames are up to 127 bytes)
    not UTF-8           Go's JSON decoder turns a lone surrogate escape into U+FFFD; Python
                        keeps it: two readings of one string
    a '%'               a name the kernel makes from a pattern when it creates the link
                        ("br%d" becomes br0, the first free number): the bridge plugin makes a
                        link of another name, and a failed ADD leaves it on the node
    "", ".", "..", a '/', ':' or a space
                        names the kernel never gives an interface (dev_valid_name): a lookup
                        finds nothing and a create fails, so the plugin acts on nothing we
                        can judge

`problem(name)` says which of those a string is ("" when the kernel reads it as written); a
name with a problem is refused outright. Alternative names need the node's links: the node
guard refuses a name that is one (`pods/node_guard.py`).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

# The kernel's buffer for an interface name, with its NUL.
IFNAMSIZ: Final = 16
_INVALID: Final = frozenset("/: \t\n\r\v\f")


def problem(name: str) -> str:
    """Why the kernel would read `name` otherwise than written (or never as a link); ""."""
    if "\0" in name:
        head = name.partition("\0")[0]
        return f"holds a NUL byte: the kernel reads it up to the NUL, as {head!r}"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8 (a lone surrogate): a Go plugin reads another name"
    if size >= IFNAMSIZ:
        cut = name.encode("utf-8")[: IFNAMSIZ - 1].decode("utf-8", "replace")
        return (
            f"is {size} bytes: the kernel reads at most {IFNAMSIZ - 1} of an interface name "
            f"(cut, {cut!r}, or refused)"
        )
    if "%" in name:
        return (
            "holds a '%': the kernel makes another name of it when it creates the link "
            "(br%d is br0)"
        )
    if name in ("", ".", "..") or any(c in _INVALID for c in name):
        return "is no name the kernel gives an interface (no '/', ':' or space; not '.' or '..')"
    return ""
