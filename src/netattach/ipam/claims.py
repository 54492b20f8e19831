"""Addresses that outlive a pod: an IPAMClaim's (`ipam-claim-reference`, IPAM-CLAIM).

A pod's selection names an IPAMClaim of its namespace; the claim's addresses are given to
whichever pod names it, on whichever node, until the claim is deleted. So they cannot live in a
node's blocks (the next pod may start on another node): they live in blocks of the pool that no
node holds (`spec.node` ""), each address written to its block's allocations with the claim
(`namespace/name/uid`) as its holder, by a merge patch carrying the block's resourceVersion.
The API's optimistic concurrency is the only arbiter, as for the nodes' blocks: a second writer
gets 409 and reads again. A pod naming a claim costs its ADD a few API requests (the claim, the
blocks, and at the first a write or two); pods naming none pay nothing.

    assign      the claim read (it must exist, and be for this network); its addresses found in
                the claims' blocks, else taken there (a block made when none has room); the
                claim's `status.ips` written
    sweep       in each node's renewal tick, once the claims' blocks hold anything: the
                addresses of claims that are gone (by uid) dropped, a block left empty deleted
                (back to the pool)

A pod's DEL leaves its claim's addresses alone: they are the claim's.
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
from typing import Any, Final

from netattach import loggers
from netattach.cni import errors
from netattach.ipam import allocator, sources
from netattach.ipam import blocks as blocks_mod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from netattach.cluster.kube_blocks import BlockObjects
    from netattach.cluster.kube_claims import ClaimObjects
    from netattach.ipam.config import Address, PoolConfig

log = loggers.get("netattach.ipam")

CLAIMS_NODE: Final = ""  # the `spec.node` of a block of claims' addresses: the cluster's
ATTEMPTS: Final = 40  # reads again after a conflict, before TryAgainLater
BACKOFF: Final = 0.02  # seconds, times a random share of the attempt's number, between them


class ClaimAddresses:
    def __init__(self, blocks: BlockObjects, claims: ClaimObjects) -> None:
        self.blocks = blocks
        self.claims = claims

    async def assign(
        self, pool: PoolConfig, namespace: str, claim: str, ifname: str, source: str
    ) -> list[tuple[int, Address]]:
        """An address of each range set of `pool` for IPAMClaim `namespace/claim`: those it
        holds already, else new ones."""
        found = await self.claims.get(namespace, claim)
        what = f"IPAMClaim {namespace}/{claim}"
        if found is None:
            raise errors.InvalidSelectionError(
                f"{source}: ipam-claim-reference {claim!r}: there is no {what}"
            )
        network = str((found.get("spec") or {}).get("network") or "")
        if network and network != pool.pool:
            raise errors.InvalidSelectionError(
                f"{source}: {what} is for network {network!r}, not {pool.pool!r}"
            )
        key = f"{namespace}/{claim}/{(found.get('metadata') or {}).get('uid', '')}"
        taken = [
            (set_index, await self._take(pool, set_index, key, ifname, source))
            for set_index in range(len(pool.range_sets))
        ]
        ips = [f"{address}/{_prefix(pool, address)}" for _, address in taken]
        if sorted((found.get("status") or {}).get("ips") or []) != sorted(ips):
            await self.claims.set_ips(namespace, claim, ips)
        log.info("%s: %s given the addresses of %s", source, ", ".join(ips), what)
        return taken

    async def _take(
        self, pool: PoolConfig, set_index: int, key: str, ifname: str, source: str
    ) -> Address:
        for attempt in range(ATTEMPTS):
            if attempt:  # pods of claims starting at once: they spread out
                await asyncio.sleep(BACKOFF * attempt * random.random())  # noqa: S311
            items = await self.blocks.list()
            ours = _claims_blocks(items, pool, set_index)
            for item, block in ours:  # the claim's already
                for text, holder in _allocations(item).items():
                    address = ipaddress.ip_address(text)
                    if holder.get("claim") == key and _in_set(pool, set_index, address, block):
                        return address
            for item, block in ours:  # a free address of a claims' block
                held = _allocations(item)
                free = next(
                    (
                        a
                        for a in blocks_mod.given_in(block, pool)
                        if str(a) not in held and _in_set(pool, set_index, a, block)
                    ),
                    None,
                )
                if free is not None:
                    written = await self.blocks.patch_allocations(
                        item["metadata"]["name"],
                        str(item["metadata"].get("resourceVersion", "")),
                        {str(free): {"claim": key, "ifname": ifname}},
                    )
                    if written is not None:
                        return free
                    break  # the block changed meanwhile: read again
            else:
                await self._new_block(pool, set_index, items, source)
        raise errors.TryAgainLaterError(
            f"{source}: the claims' blocks of pool {pool.pool!r} kept changing under this ADD"
        )

    async def _new_block(
        self, pool: PoolConfig, set_index: int, items: list[dict[str, Any]], source: str
    ) -> None:
        """A block of the pool no object names, made the claims' (another writer's 409 is as
        good: the next read finds it)."""
        existing = {str((i.get("metadata") or {}).get("name")): i for i in items}
        others = 0
        for block in allocator.unheld_blocks(pool, set_index, ()):
            name = blocks_mod.name_of(block)
            found = existing.get(name)
            if found is None:
                spec = {"pool": pool.pool, "cidr": str(block), "node": CLAIMS_NODE}
                await self.blocks.create(name, spec)
                log.info("pool %r: block %s made for IPAMClaims", pool.pool, block)
                return
            other = str((found.get("spec") or {}).get("pool"))
            if other != pool.pool:
                text = sources.overlap_text({name: other}, pool.pool)
                raise errors.InvalidNetworkConfigError(f"{source}: {text}")
            others += 1
        ranges = "; ".join(str(r) for r in pool.range_sets[set_index])
        raise errors.AddressesExhaustedError(
            f"{source}: pool {pool.pool!r} has no free address in {ranges} for an IPAMClaim",
            f"{others} blocks of 16 held by nodes or other claims",
        )

    async def sweep(self, items: list[dict[str, Any]]) -> None:
        """The addresses of deleted claims freed, in the claims' blocks among `items` (the
        IPBlocks as just listed); a block left empty deleted."""
        shared = [i for i in items if (i.get("spec") or {}).get("node") == CLAIMS_NODE]
        if not shared:
            return
        alive = await self.claims.keys()  # listed after the blocks: a newer claim is in it
        for item in shared:
            meta = item.get("metadata") or {}
            name, version = str(meta.get("name")), str(meta.get("resourceVersion", ""))
            held = _allocations(item)
            gone = [a for a, h in held.items() if h.get("claim") not in alive]
            if held and not gone:
                continue
            if len(gone) == len(held):
                if await self.blocks.delete(name, version):
                    log.info("IPBlock %s of IPAMClaims: no claim holds it; back to the pool", name)
                continue
            if await self.blocks.patch_allocations(name, version, dict.fromkeys(gone)):
                log.info("IPBlock %s: %s freed (their IPAMClaims are gone)", name, ", ".join(gone))


def _claims_blocks(
    items: list[dict[str, Any]], pool: PoolConfig, set_index: int
) -> list[tuple[dict[str, Any], Any]]:
    """The claims' blocks of `pool` that range set `set_index` has addresses in, in address
    order, with their networks."""
    found = []
    for item in items:
        spec = item.get("spec") or {}
        if spec.get("pool") != pool.pool or spec.get("node") != CLAIMS_NODE:
            continue
        block = blocks_mod.parse_name(str((item.get("metadata") or {}).get("name", "")))
        ranges = pool.range_sets[set_index]
        if block is not None and any(blocks_mod.meets(block, r) for r in ranges):
            found.append((item, block))
    return sorted(found, key=lambda pair: int(pair[1].network_address))


def _allocations(item: dict[str, Any]) -> dict[str, dict[str, Any]]:
    raw = (item.get("status") or {}).get("allocations") or {}
    return {str(a): h for a, h in raw.items() if isinstance(h, dict)}


def _in_set(pool: PoolConfig, set_index: int, address: Address, block: Any) -> bool:
    where = pool.range_of(address)
    return where is not None and where[0] == set_index and address in block


def _prefix(pool: PoolConfig, address: Address) -> int:
    where = pool.range_of(address)
    assert where is not None  # taken from the pool
    return where[1].subnet.prefixlen
