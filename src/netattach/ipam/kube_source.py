"""Blocks kept in the Kubernetes API: each an IPBlock object, held by one node under a lease
(IPAM-UNIQUE, IPAM-NOLEAK, IPAM-FAST).

    claim           a candidate block no object names yet, made with a create (the API's 409
                    tells the second node, or pool, it lost); a block held by another node is
                    passed over, one of another pool's refused (overlapping ranges); nodes
                    claiming at once start at different free blocks (of the first SPREAD, by a
                    hash of the node's name), so they seldom meet on one
    changed         the ledger's allocations of those blocks, written to their objects by a
                    background writer (who holds each address, for people and for a node whose
                    disk is lost), never on the ADD's path
    renewal         every `RENEW_EVERY` the writer writes each held block's `status.renewTime`,
                    so another node can tell a live holder from a gone one
    reclaim         a block whose node's Node object is gone, seen unchanged for a whole
                    `LEASE` by this node's own clock (no clock is compared with another's), is
                    deleted with that resourceVersion as precondition: its addresses go back to
                    the pool (the node is gone, and so are its pods)
    start           the node's ledgers checked against the API: a block the ledger holds and the
                    API does not is made again; a block of this node's in the API that the
                    ledger lacks (the node's disk lost) is taken back with its allocations; a
                    block another node holds now is dropped from the ledger

An ADD makes an API request only when the node's blocks of the pool are full (a claim).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import time
import zlib
from collections.abc import Callable, Iterable
from typing import Any, Final

from netattach import loggers
from netattach.cluster import kube_blocks
from netattach.cni import errors
from netattach.ipam import blocks as blocks_mod
from netattach.ipam import claims as claims_mod
from netattach.ipam import ledger as ledger_mod
from netattach.ipam.sources import Claimed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from netattach.ipam.claims import ClaimAddresses
    from netattach.ipam.config import Network

log = loggers.get("netattach.ipam")

LEASE: Final = 90.0
RENEW_EVERY: Final = 20.0
FLUSH_DELAY: Final = 0.5  # allocations gathered this long before one write per block
# A claim tries the first SPREAD free blocks starting at one its node's name picks
SPREAD: Final = 16


class KubeBlockSource:
    def __init__(
        self,
        objects: kube_blocks.BlockObjects,
        *,
        node: str,
        lease: float = LEASE,
        renew_every: float = RENEW_EVERY,
    ) -> None:
        self.objects = objects
        self.node = node
        self.lease = lease
        self.renew_every = renew_every
        self._ledgers: dict[str, ledger_mod.Ledger] = {}
        self._dirty: dict[str, set[Network]] = {}
        self._wake = asyncio.Event()
        self._flushing = asyncio.Lock()
        self._writer: asyncio.Task[None] | None = None
        self._seen: dict[str, tuple[str, float]] = {}  # block name -> (resourceVersion, since)
        self._ledger_for: Callable[[str], ledger_mod.Ledger] = _no_ledger
        self._reconciled = False
        self._renewed: dict[Network, float] = {}  # block -> when its last renewal began
        self.claims: ClaimAddresses | None = None  # their blocks swept at each renewal

    # -- the port ---------------------------------------------------------------------------

    async def start(
        self,
        ledgers: Iterable[ledger_mod.Ledger],
        ledger_for: Callable[[str], ledger_mod.Ledger],
    ) -> None:
        self._ledgers = {ledger.pool: ledger for ledger in ledgers}
        self._ledger_for = ledger_for
        try:
            await self._ensure_reconciled()
            self._mark_all_dirty()
            await self._flush()  # every lease renewed before the first ADD
        except errors.CNIError as exc:
            log.warning("IPBlocks not checked against the API at start (%s); again later", exc)
        self._writer = asyncio.create_task(self._write_forever(), name="ipam-blocks")

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        try:
            async with asyncio.timeout(5):
                await self._flush()
        except (TimeoutError, errors.CNIError) as exc:
            log.warning("IPBlock allocations not all written at shutdown: %s", exc)

    async def claim(self, pool: str, candidates: Iterable[Network]) -> Claimed:
        # Never a claim before the ledgers agree with the API: a node whose disk was lost would
        # take back its own block empty, and hand out what its pods still hold.
        await self._ensure_reconciled()
        existing = {item["metadata"]["name"]: item for item in await self.objects.list()}
        others = 0
        free: list[Network] = []
        pending = iter(candidates)
        while True:
            # The next blocks no object names, SPREAD at most; those held are judged on the way
            for block in pending:
                found = existing.get(blocks_mod.name_of(block))
                if found is None:
                    free.append(block)
                    if len(free) == SPREAD:
                        break
                    continue
                verdict = self._judge(pool, block, found)
                if verdict is not None:
                    return verdict
                others += 1
            if not free:
                return Claimed(None, others=others)
            # Nodes that need a block at once start at different ones of those: few meet on one
            start = zlib.crc32(self.node.encode()) % len(free)
            for block in free[start:] + free[:start]:
                name = blocks_mod.name_of(block)
                began = time.monotonic()
                if await self.objects.create(name, self._spec(pool, block)) is not None:
                    self._renewed[block] = began
                    return Claimed(block)
                found = await self.objects.get(name)  # another node, or pool, was first
                if found is None:
                    continue
                verdict = self._judge(pool, block, found)
                if verdict is not None:
                    return verdict
                others += 1
            free = []

    def _judge(self, pool: str, block: Network, found: dict[str, Any]) -> Claimed | None:
        """What an object of `block` means for a claim of `pool`: another pool's (overlapping
        ranges: refused), this node's already (taken back with what the API says it holds), or
        another node's (None: on to the next)."""
        spec = found.get("spec") or {}
        if spec.get("pool") != pool:
            return Claimed(None, overlaps={blocks_mod.name_of(block): str(spec.get("pool"))})
        if spec.get("node") == self.node:
            self._adopt(self._ledgers.get(pool) or self._ledger_for(pool), block, found)
            return Claimed(block)
        return None

    async def claim_exact(self, pool: str, block: Network) -> Claimed:
        return await self.claim(pool, [block])

    def usable(self, block: Network) -> bool:
        """Fencing: a block is handed out from only while this node's last renewal of it began
        less than a lease ago. Another node deletes a block only after seeing it unchanged for a
        lease (and its Node gone), so a node cut off from the API stops before its block can
        change hands."""
        return time.monotonic() - self._renewed.get(block, float("-inf")) < self.lease

    def changed(self, ledger: ledger_mod.Ledger, blocks: Iterable[Network]) -> None:
        self._ledgers[ledger.pool] = ledger
        self._dirty.setdefault(ledger.pool, set()).update(blocks)
        self._wake.set()

    # -- the background writer ----------------------------------------------------------------

    async def _write_forever(self) -> None:
        renewed = time.monotonic()
        while True:
            try:
                async with asyncio.timeout(self.renew_every):
                    await self._wake.wait()
                await asyncio.sleep(FLUSH_DELAY)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self._ensure_reconciled()
                if time.monotonic() - renewed >= self.renew_every:
                    self._mark_all_dirty()
                    renewed = time.monotonic()
                    items = await self._reclaim()
                    if self.claims is not None:
                        await self.claims.sweep(items)
                await self._flush()
            except errors.CNIError as exc:
                log.warning("IPBlocks: %s; again in %gs", exc, self.renew_every)

    def _mark_all_dirty(self) -> None:
        for pool, ledger in self._ledgers.items():
            self._dirty.setdefault(pool, set()).update(ledger.blocks)

    async def _flush(self) -> None:
        """Every dirty block written. A block is clean from the start of its write (a change
        during the write marks it again); a write cut short, by an error or by shutdown, leaves
        it dirty. One flush at a time: two at once could send a block's older status after its
        newer one, and the API would keep the older."""
        async with self._flushing:
            await self._flush_dirty()

    async def _flush_dirty(self) -> None:
        for pool in list(self._dirty):
            ledger = self._ledgers[pool]
            pending = list(self._dirty.pop(pool, ()))
            for index, block in enumerate(pending):
                try:
                    if block in ledger.blocks:
                        await self._write_block(ledger, block)
                except BaseException:
                    self._dirty.setdefault(pool, set()).update(pending[index:])
                    raise

    async def _write_block(self, ledger: ledger_mod.Ledger, block: Network) -> None:
        name = blocks_mod.name_of(block)
        status = {
            "renewTime": _now(),
            "allocations": {
                str(address): holder.to_raw()
                for address, holder in ledger.holders_in(block).items()
            },
        }
        started = time.monotonic()
        try:
            written = await self.objects.patch_status(name, status, node=self.node)
        except errors.IOFailureError as exc:
            # A refusal: the patch's test (the block another node's now), or one that passes (an
            # API server just restarted answers 403 until its RBAC cache fills). Only the block
            # read again says which; the block is dropped only when it is another's.
            found = await self.objects.get(name)
            holder = ((found or {}).get("spec") or {}).get("node")
            if found is not None and holder == self.node:
                raise errors.TryAgainLaterError(f"IPBlock {name}: {exc.msg}", exc.details) from exc
            if found is not None:
                log.error("IPBlock %s is node %s's now; dropped from %r", name, holder, ledger.pool)
                self._drop(ledger, block)
                return
            written = None
        if written is not None:
            self._renewed[block] = started
            return
        # deleted (this node was thought gone): made again if still free
        made = await self.objects.create(name, self._spec(ledger.pool, block))
        if made is None:
            log.error("IPBlock %s is another node's now; dropped from %r", name, ledger.pool)
            self._drop(ledger, block)
        else:
            self._renewed[block] = started
            self._dirty.setdefault(ledger.pool, set()).add(block)

    def _drop(self, ledger: ledger_mod.Ledger, block: Network) -> None:
        ledger.blocks.discard(block)
        for address in ledger.holders_in(block):
            log.error(
                "address %s of %s is in block %s, which this node lost",
                address,
                ledger.held[address].pod or ledger.held[address].container_id,
                block,
            )
        ledger.save()

    # -- reclaim and reconcile ----------------------------------------------------------------

    async def _reclaim(self) -> list[dict[str, Any]]:
        """Blocks of Nodes that are gone, unchanged for a whole lease, deleted. The blocks as
        listed are returned."""
        now = time.monotonic()
        seen: dict[str, tuple[str, float]] = {}
        gone_nodes: dict[str, bool] = {}
        items = await self.objects.list()
        for item in items:
            meta, spec = item.get("metadata") or {}, item.get("spec") or {}
            node, name = str(spec.get("node", "")), str(meta.get("name", ""))
            if node in (self.node, claims_mod.CLAIMS_NODE) or not name:
                continue
            if node not in gone_nodes:
                gone_nodes[node] = not await self.objects.node_exists(node)
            if not gone_nodes[node]:
                continue
            version = str(meta.get("resourceVersion", ""))
            first = self._seen.get(name)
            since = first[1] if first is not None and first[0] == version else now
            seen[name] = (version, since)
            if now - since >= self.lease and await self.objects.delete(name, version):
                log.info("IPBlock %s of node %s (gone) freed", name, node)
                seen.pop(name)
        self._seen = seen
        return items

    async def _reconcile(self) -> None:
        mine = {}
        for item in await self.objects.list():
            spec = item.get("spec") or {}
            block = blocks_mod.parse_name(str((item.get("metadata") or {}).get("name", "")))
            if block is not None and spec.get("node") == self.node:
                mine[block] = item
        for ledger in list(self._ledgers.values()):
            for block in sorted(ledger.blocks - set(mine), key=str):
                made = await self.objects.create(
                    blocks_mod.name_of(block), self._spec(ledger.pool, block)
                )
                if made is None:
                    log.error("IPBlock %s is another node's now", blocks_mod.name_of(block))
                    self._drop(ledger, block)
        for block, item in mine.items():
            pool = str((item.get("spec") or {}).get("pool", ""))
            ledger = self._ledgers.get(pool) or self._ledger_for(pool)
            self._ledgers[pool] = ledger
            self._adopt(ledger, block, item)

    async def _ensure_reconciled(self) -> None:
        if not self._reconciled:
            await self._reconcile()
            self._reconciled = True

    def _adopt(self, ledger: ledger_mod.Ledger, block: Network, item: dict[str, Any]) -> None:
        """`block`, this node's in the API but not in the ledger (its disk lost), taken back
        with the allocations its object shows."""
        if block in ledger.blocks:
            return
        ledger.blocks.add(block)
        for address, raw in ((item.get("status") or {}).get("allocations") or {}).items():
            try:
                holder = ledger_mod.Holder.from_raw(raw)
                ledger.held.setdefault(ipaddress.ip_address(address), holder)
            except (ValueError, KeyError, TypeError):
                continue
        ledger.save()
        log.warning("IPBlock %s of pool %r taken back from the API", block, ledger.pool)

    def _spec(self, pool: str, block: Network) -> dict[str, Any]:
        return {"pool": pool, "cidr": str(block), "node": self.node}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _no_ledger(pool: str) -> ledger_mod.Ledger:
    raise errors.InternalError(f"no ledger for pool {pool!r} before start")
