"""A pool cut into blocks: aligned runs of `BLOCK_ADDRESSES` addresses, the unit a node holds.

Every pool of every network uses the same block size, so a block is known by its CIDR alone: two
pools whose ranges overlap meet on the same block name in the API, and the second is refused
there (IPAM-BAD) even where no node saw both NADs. A node holds as many blocks as its pods need.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from netattach.ipam import config

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

    from netattach.ipam.config import Address, Network

BLOCK_ADDRESSES: Final = 16
_HOST_BITS: Final = 4  # log2(BLOCK_ADDRESSES)


def block_of(address: Address) -> Network:
    """The block `address` is in."""
    bits = address.max_prefixlen - _HOST_BITS
    return ipaddress.ip_network(f"{address}/{bits}", strict=False)


def blocks_of(ranges: tuple[config.AddressRange, ...]) -> Iterator[Network]:
    """The blocks a range set's addresses fall in, in address order, each once."""
    seen: set[Network] = set()
    for r in ranges:
        kind = type(r.first)
        start = int(block_of(r.first).network_address)
        for at in range(start, int(r.last) + 1, BLOCK_ADDRESSES):
            block = block_of(kind(at))
            if block not in seen:
                seen.add(block)
                yield block


def meets(block: Network, r: config.AddressRange) -> bool:
    """Does `block` hold any address of range `r`?"""
    return block.version == r.first.version and (
        int(block.network_address) <= int(r.last) and int(block.broadcast_address) >= int(r.first)
    )


def given_in(block: Network, pool: config.PoolConfig) -> list[Address]:
    """The addresses of `block` the pool hands out, in order."""
    return [address for address in block if pool.given(address)]


def name_of(block: Network) -> str:
    """The block's object name in the API (a DNS subdomain): `v4-10.70.0.16-28`,
    `v6-fd00-0000-...-0010-124` (IPv6 written out whole: no `::` to start or double a dash)."""
    if block.version == 4:
        return f"v4-{block.network_address}-{block.prefixlen}"
    groups = block.network_address.exploded.replace(":", "-")
    return f"v6-{groups}-{block.prefixlen}"


def parse_name(name: str) -> Network | None:
    """The block a `name_of` name is of; None for any other name."""
    family, _, rest = name.partition("-")
    address, _, prefix = rest.rpartition("-")
    try:
        if family == "v4":
            return ipaddress.IPv4Network(f"{address}/{prefix}")
        if family == "v6":
            return ipaddress.IPv6Network(f"{address.replace('-', ':')}/{prefix}")
    except ValueError:
        return None
    return None
