"""Addresses picked, held and freed inside the blocks a node holds: pure code over a `Ledger`
(IPAM-UNIQUE, IPAM-NOLEAK). No API request and no await: under the daemon's event loop no two
ADDs interleave between a pick and its note in the ledger.

Never twice: an address is handed out only from a block the ledger holds, and only when no
holder has it; a freed address waits the pool's `reuseDelay` (neighbour caches) unless a pod
asks for it by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from netattach.ipam import blocks as blocks_mod
from netattach.ipam import config
from netattach.ipam.ledger import Holder, Ledger

TYPE_CHECKING = False
if TYPE_CHECKING:
    from netattach.ipam.config import Address, Network


def _any_block(block: Network) -> bool:
    return True


def pick(
    ledger: Ledger,
    pool: config.PoolConfig,
    set_index: int,
    holder: Holder,
    now: float,
    *,
    usable: Callable[[Network], bool] = _any_block,
) -> Address | None:
    """An address of range set `set_index` from the ledger's `usable` blocks, now `holder`'s;
    None when those blocks have no free address."""
    forget_freed(ledger, pool, now)
    for block in filter(usable, pool_blocks(ledger, pool, set_index)):
        for address in blocks_mod.given_in(block, pool):
            if address not in ledger.held and address not in ledger.freed:
                ledger.held[address] = holder
                return address
    return None


def take(ledger: Ledger, pool: config.PoolConfig, address: Address, holder: Holder) -> str:
    """`address` (asked for by name) now `holder`'s; "" when so, else why not. Its block must be
    the ledger's."""
    if not pool.given(address):
        return f"{address} is not an address the pool {pool.pool!r} hands out"
    if blocks_mod.block_of(address) not in ledger.blocks:
        return (
            f"{address} is in block {blocks_mod.block_of(address)}, which this node does not hold"
        )
    current = ledger.held.get(address)
    if current is not None and current[:2] != holder[:2]:
        return f"{address} is held by {describe(current)}"
    ledger.freed.pop(address, None)
    ledger.held[address] = holder
    return ""


def release(ledger: Ledger, container_id: str, now: float) -> list[Address]:
    """Every address `container_id` holds, freed (its reuse delay starts)."""
    gone = [a for a, h in ledger.held.items() if h.container_id == container_id]
    for address in gone:
        del ledger.held[address]
        ledger.freed[address] = now
    return gone


def forget_freed(ledger: Ledger, pool: config.PoolConfig, now: float) -> None:
    """Freed addresses whose reuse delay has passed are free like any other."""
    for address in [a for a, at in ledger.freed.items() if now - at >= pool.reuse_delay]:
        del ledger.freed[address]


def pool_blocks(ledger: Ledger, pool: config.PoolConfig, set_index: int) -> list[Network]:
    """The ledger's blocks that range set `set_index` has addresses in, in address order."""
    ranges = pool.range_sets[set_index]
    return sorted(
        (b for b in ledger.blocks if any(blocks_mod.meets(b, r) for r in ranges)),
        key=lambda b: int(b.network_address),
    )


def unheld_blocks(
    pool: config.PoolConfig, set_index: int, held: Iterable[Network]
) -> Iterator[Network]:
    """The blocks of range set `set_index` that hand out addresses and that `held` lacks, in
    address order, lazily: the ones to ask for next (an IPv6 /64 has 2**60 blocks: never
    listed whole; the source reads on until it has one)."""
    taken = set(held)
    return (
        b
        for b in blocks_mod.blocks_of(pool.range_sets[set_index])
        if b not in taken and blocks_mod.given_in(b, pool)
    )


def free_count(
    ledger: Ledger,
    pool: config.PoolConfig,
    set_index: int,
    now: float,
    *,
    usable: Callable[[Network], bool] = _any_block,
) -> int:
    """How many addresses the ledger's `usable` blocks of set `set_index` can still hand out."""
    forget_freed(ledger, pool, now)
    return sum(
        1
        for block in filter(usable, pool_blocks(ledger, pool, set_index))
        for a in blocks_mod.given_in(block, pool)
        if a not in ledger.held and a not in ledger.freed
    )


def describe(holder: Holder) -> str:
    who = f"pod {holder.pod}" if holder.pod else "container"
    return f"{who} (container {holder.container_id[:12]}, {holder.ifname})"
