"""netattach's own IPAM for networks that span nodes (IPAM-UNIQUE, IPAM-NOLEAK, IPAM-FAST).

config      a NAD's `"ipam": {"type": "netattach", ...}` parsed and checked (host-local's keys)
blocks      the pool cut into blocks of 16 addresses; the addresses a block gives
ledger      a node's blocks and allocations of one pool, on its disk
allocator   picks, holds and frees addresses inside the node's blocks: no API request
sources     where blocks come from: the node itself (one machine), or the Kubernetes API
service     the orchestrator's port: a plan's netattach IPAM turned into `static` addresses
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

    from netattach.cni import conf

# A plugin's `ipam.type` that names this IPAM (the thin plugin checks it without importing more).
TYPE: Final = "netattach"


def is_netattach(ipam: object) -> bool:
    """Is `ipam` (a plugin's `ipam` value) netattach's IPAM?"""
    return isinstance(ipam, Mapping) and ipam.get("type") == TYPE


def uses_netattach(networks: Iterable[conf.NetworkConfigList]) -> bool:
    """Does a plugin of `networks` take its addresses from netattach's IPAM?"""
    return any(is_netattach(p.raw.get("ipam")) for network in networks for p in network.plugins)
