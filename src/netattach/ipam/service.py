"""The orchestrator's port to netattach's IPAM: a plan's `"ipam": {"type": "netattach"}` turned
into the `static` plugin's addresses before any plugin runs, and a container's addresses freed
at its DEL (IPAM-UNIQUE, IPAM-NOLEAK, IPAM-BAD).

Why `static`, not an IPAM plugin the delegate execs: the daemon holds the ledgers, so the address
is chosen here in-process, with no exec and no second socket round trip; the delegate is given an
ordinary IPAM config every reference plugin understands, and the pod record keeps it, so the DEL
of the delegate needs nothing of ours. `static` hands back the address, gateway, routes and dns
in an ordinary result.

An ADD's addresses are all taken, or none: a failure part-way frees what it took.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from netattach import ipam, loggers
from netattach.attach import delegate
from netattach.cni import errors
from netattach.ipam import allocator, config, sources
from netattach.ipam import blocks as blocks_mod
from netattach.ipam import ledger as ledger_mod
from netattach.ipam.ledger import Holder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol, Self, TypeVar

    from netattach.cni import conf
    from netattach.ipam.claims import ClaimAddresses
    from netattach.ipam.config import Address
    from netattach.ipam.sources import BlockSource, Claimed

    class Planned(Protocol):
        """An attachment of a plan, as this module reads it (pods/plan.py's PlannedAttachment)."""

        @property
        def status_name(self) -> str: ...
        @property
        def ifname(self) -> str: ...
        @property
        def network(self) -> conf.NetworkConfigList: ...
        @property
        def ips(self) -> tuple[str, ...]: ...
        @property
        def claim(self) -> str: ...
        def _replace(self, *, network: conf.NetworkConfigList) -> Self: ...

    P = TypeVar("P", bound=Planned)

log = loggers.get("netattach.ipam")


class Addresses:
    """The pools of this node: a ledger each (loaded at start), and the block source."""

    def __init__(
        self,
        directory: Path,
        source: BlockSource,
        *,
        claims: ClaimAddresses | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self.source = source
        self.claims = claims  # IPAMClaims' addresses (the Kubernetes feed only)
        self.clock = clock
        self.ledgers: dict[str, ledger_mod.Ledger] = {}
        self._claiming: dict[str, asyncio.Lock] = {}
        self._configs: dict[str, config.PoolConfig] = {}  # as the last ADD saw each pool

    async def start(self) -> None:
        self.ledgers = {ledger.pool: ledger for ledger in ledger_mod.load_all(self.directory)}
        await self.source.start(list(self.ledgers.values()), self._ledger)

    async def close(self) -> None:
        await self.source.close()

    async def assign(
        self, plan: Sequence[P], *, container_id: str, pod: str = "", uid: str = ""
    ) -> list[P]:
        """`plan` with every netattach IPAM replaced by `static` with the addresses taken for
        it (`pod`: namespace/name, and its `uid`, for people to read); on any failure nothing of
        this call is kept."""
        assigned = []
        try:
            for planned in plan:
                indexes = _netattach_plugins(planned)
                if not indexes:
                    assigned.append(planned)
                    continue
                holder = Holder(container_id, planned.ifname, pod, uid)
                given: dict[int, dict[str, Any]] = {}
                for index in indexes:
                    raw = planned.network.plugins[index].raw["ipam"]
                    source = f"NetworkAttachmentDefinition {planned.status_name}"
                    pool = config.parse_pool(raw, planned.network.name, source=source)
                    if planned.claim:
                        addresses = await self._claimed(pool, planned, pod, source)
                    else:
                        addresses = await self._take(pool, planned, holder, source)
                    given[index] = _static(pool, addresses)
                assigned.append(
                    planned._replace(network=delegate.with_ipam(planned.network, given))
                )
        except BaseException:
            self.release(container_id)
            raise
        return assigned

    def release(self, container_id: str) -> None:
        """Every address `container_id` holds, freed (DEL, or an ADD undone)."""
        now = self.clock()
        for ledger in self.ledgers.values():
            gone = allocator.release(ledger, container_id, now)
            if gone:
                ledger.save()
                self.source.changed(ledger, {blocks_mod.block_of(a) for a in gone})
                log.debug("freed %s of container %s", ", ".join(map(str, gone)), container_id[:12])

    def usage(self, recorded: Collection[str]) -> tuple[list[dict[str, Any]], list[str]]:
        """Each pool's use on this node (`netattach status`): its blocks and how many addresses
        are held, free and waiting out `reuseDelay` (free counted with the pool's config as the
        last ADD saw it; before any, as 16 a block); and a problem for each address a container
        with no record holds (`recorded`: the containers with one), which the sweep frees."""
        pools, problems = [], []
        for name, ledger in sorted(self.ledgers.items()):
            cfg = self._configs.get(name)
            given = sum(
                len(blocks_mod.given_in(b, cfg)) if cfg else blocks_mod.BLOCK_ADDRESSES
                for b in ledger.blocks
            )
            waiting = len(ledger.freed)
            pools.append({
                "pool": name,
                "blocks": sorted(str(b) for b in ledger.blocks),
                "held": len(ledger.held),
                "free": max(0, given - len(ledger.held) - waiting),
                "waiting": waiting,
            })  # fmt: skip
            for address, holder in sorted(ledger.held.items(), key=lambda i: int(i[0])):
                if holder.container_id not in recorded:
                    problems.append(
                        f"address {address} of pool {name!r} is held by "
                        f"{allocator.describe(holder)}, which has no record: the daemon's sweep "
                        "frees it"
                    )
        return pools, problems

    def containers(self) -> set[str]:
        """Every container that holds an address of a pool."""
        return {h.container_id for ledger in self.ledgers.values() for h in ledger.held.values()}

    async def _claimed(
        self, pool: config.PoolConfig, planned: Planned, pod: str, source: str
    ) -> list[tuple[int, Address]]:
        """IPAM-CLAIM: the addresses of the IPAMClaim the selection names (never this node's
        ledger: the claim keeps them past this pod)."""
        if self.claims is None:
            raise errors.InvalidSelectionError(
                f"{source}: ipam-claim-reference {planned.claim!r} with ipam type {ipam.TYPE!r} "
                "needs the daemon on the Kubernetes feed (IPAMClaims are objects of the API)"
            )
        namespace = pod.partition("/")[0]
        return await self.claims.assign(pool, namespace, planned.claim, planned.ifname, source)

    async def _take(
        self,
        pool: config.PoolConfig,
        planned: Planned,
        holder: Holder,
        source: str,
    ) -> list[tuple[int, Address]]:
        """An address of each range set of `pool` (the one the selection asks for where it asks),
        noted in the ledger."""
        ledger = self._ledger(pool.pool)
        self._configs[pool.pool] = pool
        requested = _requested(planned.ips, pool, source)
        taken: list[tuple[int, Address]] = []
        for set_index in range(len(pool.range_sets)):
            wanted = requested.get(set_index)
            if wanted is not None:
                address = await self._take_named(ledger, pool, wanted, holder, source)
            else:
                address = await self._pick(ledger, pool, set_index, holder, source)
            taken.append((set_index, address))
        ledger.save()
        self.source.changed(ledger, {blocks_mod.block_of(a) for _, a in taken})
        return taken

    async def _pick(
        self,
        ledger: ledger_mod.Ledger,
        pool: config.PoolConfig,
        set_index: int,
        holder: Holder,
        source: str,
    ) -> Address:
        while True:
            usable = self.source.usable
            address = allocator.pick(ledger, pool, set_index, holder, self.clock(), usable=usable)
            if address is not None:
                return address
            async with self._lock(pool.pool):
                # Another ADD may have claimed a block while this one waited.
                if allocator.free_count(ledger, pool, set_index, self.clock(), usable=usable):
                    continue
                candidates = allocator.unheld_blocks(pool, set_index, ledger.blocks)
                claimed = await self.source.claim(pool.pool, candidates)
                if claimed.block is None:
                    raise _exhausted(ledger, pool, set_index, source, claimed)
                ledger.blocks.add(claimed.block)
                ledger.save()
                log.info("pool %r: block %s claimed", pool.pool, claimed.block)

    async def _take_named(
        self,
        ledger: ledger_mod.Ledger,
        pool: config.PoolConfig,
        address: Address,
        holder: Holder,
        source: str,
    ) -> Address:
        block = blocks_mod.block_of(address)
        if block not in ledger.blocks and pool.given(address):
            async with self._lock(pool.pool):
                if block not in ledger.blocks:
                    claimed = await self.source.claim_exact(pool.pool, block)
                    if claimed.block is None:
                        why = (
                            f"it is in block {block}, held by another node"
                            if claimed.others
                            else sources.overlap_text(claimed.overlaps, pool.pool)
                        )
                        raise errors.InvalidSelectionError(
                            f"{source}: the requested address {address} cannot be given: {why}"
                        )
                    ledger.blocks.add(block)
        if block in ledger.blocks and not self.source.usable(block):
            raise errors.TryAgainLaterError(
                f"{source}: the requested address {address} is in block {block}, whose lease "
                "this node has not renewed in time (the API unreachable)"
            )
        why = allocator.take(ledger, pool, address, holder)
        if why:
            raise errors.InvalidSelectionError(
                f"{source}: the requested address {address} cannot be given: {why}"
            )
        return address

    def _ledger(self, pool: str) -> ledger_mod.Ledger:
        found = self.ledgers.get(pool)
        if found is None:
            found = self.ledgers[pool] = ledger_mod.Ledger.load(self.directory, pool)
        return found

    def _lock(self, pool: str) -> asyncio.Lock:
        return self._claiming.setdefault(pool, asyncio.Lock())


def _netattach_plugins(planned: Planned) -> list[int]:
    return [
        index
        for index, plugin in enumerate(planned.network.plugins)
        if ipam.is_netattach(plugin.raw.get("ipam"))
    ]


def _requested(ips: Sequence[str], pool: config.PoolConfig, source: str) -> dict[int, Address]:
    """The selection's `ips`, each by the range set it falls in; an address in none, or two in
    one set, refused."""
    import ipaddress

    found: dict[int, Address] = {}
    for text in ips:
        address = ipaddress.ip_interface(text).ip
        where = pool.range_of(address)
        if where is None or not pool.given(address):
            raise errors.InvalidSelectionError(
                f"{source}: the requested address {text!r} is not one the pool {pool.pool!r} "
                f"hands out ({'; '.join(str(r) for s in pool.range_sets for r in s)})"
            )
        if where[0] in found:
            raise errors.InvalidSelectionError(
                f"{source}: two requested addresses ({found[where[0]]}, {address}) in one range"
            )
        found[where[0]] = address
    return found


def _static(pool: config.PoolConfig, taken: list[tuple[int, Address]]) -> dict[str, Any]:
    """The `static` IPAM config that gives the pod `taken`."""
    addresses = []
    for _set_index, address in taken:
        where = pool.range_of(address)
        assert where is not None  # taken from the pool
        r = where[1]
        addresses.append({"address": f"{address}/{r.subnet.prefixlen}", "gateway": str(r.gateway)})
    static: dict[str, Any] = {"type": "static", "addresses": addresses}
    if pool.routes:
        static["routes"] = [dict(route) for route in pool.routes]
    if pool.dns is not None:
        static["dns"] = dict(pool.dns)
    return static


def _exhausted(
    ledger: ledger_mod.Ledger,
    pool: config.PoolConfig,
    set_index: int,
    source: str,
    claimed: Claimed,
) -> errors.CNIError:
    ranges = "; ".join(str(r) for r in pool.range_sets[set_index])
    held = sum(1 for a in ledger.held if (pool.range_of(a) or (-1,))[0] == set_index)
    others, overlaps = claimed.others, claimed.overlaps
    if overlaps and not others:
        return errors.InvalidNetworkConfigError(
            f"{source}: {sources.overlap_text(overlaps, pool.pool)}"
        )
    return errors.AddressesExhaustedError(
        f"{source}: pool {pool.pool!r} has no free address in {ranges}",
        f"{held} held on this node, {others} blocks of 16 held by other nodes"
        + (
            f", {len(ledger.freed)} freed and waiting reuseDelay {pool.reuse_delay:g}s"
            if ledger.freed
            else ""
        ),
    )
