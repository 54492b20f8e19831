"""Where a node's blocks come from: the port, and the source of one machine.

    BlockSource     claim a block among candidates, claim one block by name, hear of the
                    allocations that changed (to publish them off the ADD path), say whether a
                    block may still be handed out from (its lease), start and stop
    LocalSource     the embedded default (the directory feed, `netattach demo`): one machine,
                    so every block is this node's; the pools' ledgers say which pool has which

The Kubernetes source (`ipam/kube_blocks.py`) keeps each block as an object of the API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from netattach.ipam import blocks as blocks_mod
from netattach.ipam import ledger as ledger_mod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from netattach.ipam.config import Network

    class BlockSource(Protocol):
        async def claim(self, pool: str, candidates: Iterable[Network]) -> Claimed: ...
        async def claim_exact(self, pool: str, block: Network) -> Claimed: ...
        def changed(self, ledger: ledger_mod.Ledger, blocks: Iterable[Network]) -> None: ...
        def usable(self, block: Network) -> bool: ...
        async def start(
            self,
            ledgers: Iterable[ledger_mod.Ledger],
            ledger_for: Callable[[str], ledger_mod.Ledger],
        ) -> None: ...
        async def close(self) -> None: ...


class Claimed:
    """What a claim came to: the block now the node's, or None and why not (every candidate
    another node's, or one another pool's: overlapping ranges, refused at the first)."""

    __slots__ = ("block", "others", "overlaps")

    def __init__(
        self, block: Network | None, *, others: int = 0, overlaps: dict[str, str] | None = None
    ) -> None:
        self.block = block
        self.others = others  # candidates held by other nodes
        self.overlaps = overlaps or {}  # block name -> the other pool that holds it


def overlap_text(overlaps: dict[str, str], pool: str) -> str:
    """Why a network's ranges are refused: a block of theirs is another network's pool's."""
    name, other = next(iter(overlaps.items()))
    return (
        f"its ranges overlap those of network {other!r} (block {name} is that pool's): "
        f"networks of different names may not share addresses with network {pool!r}"
    )


class LocalSource:
    """One machine: a block is this node's unless another pool's ledger holds it."""

    def __init__(self) -> None:
        self._owners: dict[Network, str] = {}

    async def start(
        self,
        ledgers: Iterable[ledger_mod.Ledger],
        ledger_for: Callable[[str], ledger_mod.Ledger],
    ) -> None:
        for ledger in ledgers:
            for block in ledger.blocks:
                self._owners.setdefault(block, ledger.pool)

    async def claim(self, pool: str, candidates: Iterable[Network]) -> Claimed:
        for block in candidates:
            owner = self._owners.setdefault(block, pool)
            if owner != pool:  # ranges of two networks overlap: refused, not worked around
                return Claimed(None, overlaps={blocks_mod.name_of(block): owner})
            return Claimed(block)
        return Claimed(None)

    async def claim_exact(self, pool: str, block: Network) -> Claimed:
        return await self.claim(pool, [block])

    def changed(self, ledger: ledger_mod.Ledger, blocks: Iterable[Network]) -> None:
        """Nothing to publish: the ledger is all there is."""

    def usable(self, block: Network) -> bool:
        return True  # no lease: nobody else could take it

    async def close(self) -> None:
        return None
