"""The rule IR: what compile makes of the policies for one pod, and what render reads.

Per interface (`InterfaceRules`), per direction (`DirectionRules`, None: not isolated), the
allow rules in order (`AllowRule`): peers as an address set, ports as port ranges. Data only,
with the two readings tests and tools make of it: whether it lets a connection through
(`allows`), and its JSON form (`rules_to_json`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netattach.policy.model import Direction
from netattach.policy.selection import AddressSet


@dataclass(frozen=True, order=True, slots=True)
class PortRange:
    protocol: str  # TCP, UDP, SCTP
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class AllowRule:
    """Traffic from/to `peers` (None: any address) on `ports` (None: any port) passes.

    `selection` names the peers' set: every rule of a table with the same one shares it.
    `blocks`: the part of `peers` its ipBlocks give (None: none); every other address of
    `peers` is a pod's host address. Rendering keeps the two apart: the blocks never change
    while the policy stays, the hosts change with every peer coming and going, and nft makes
    changing an interval set cost the size of every interval set of the table."""

    policy_uid: str
    origin: str  # "ns/name ingress[0]"
    peers: AddressSet | None
    ports: tuple[PortRange, ...] | None
    selection: str = ""
    blocks: AddressSet | None = None


@dataclass(frozen=True, slots=True)
class DirectionRules:
    """An isolated direction: only what one of `rules` allows passes."""

    policy_uids: tuple[str, ...]  # the policies isolating this direction
    rules: tuple[AllowRule, ...]


@dataclass(frozen=True, slots=True)
class InterfaceRules:
    network: str  # "ns/net"
    ingress: DirectionRules | None  # None: not isolated
    egress: DirectionRules | None

    def direction(self, direction: Direction) -> DirectionRules | None:
        return self.ingress if direction == "ingress" else self.egress


PodRules = dict[str, InterfaceRules]  # ifname -> rules


def allows(
    rules: InterfaceRules | None, direction: Direction, peer_ip: str, protocol: str, port: int
) -> bool:
    """Whether the IR lets a new connection through (the peer is the source for ingress)."""
    if rules is None:
        return True
    d = rules.direction(direction)
    if d is None:
        return True
    addr = ipaddress.ip_address(peer_ip)
    for r in d.rules:
        if r.peers is not None and not any(addr in n for n in r.peers):
            continue
        if r.ports is not None and not any(
            p.protocol == protocol and p.first <= port <= p.last for p in r.ports
        ):
            continue
        return True
    return False


def rules_to_json(rules: Mapping[str, InterfaceRules]) -> dict[str, Any]:
    """The IR as JSON-ready data (golden files, debugging)."""

    def direction(d: DirectionRules | None) -> dict[str, Any] | None:
        if d is None:
            return None
        return {
            "policies": list(d.policy_uids),
            "rules": [
                {
                    "policy": r.policy_uid,
                    "origin": r.origin,
                    "peers": None if r.peers is None else [str(n) for n in r.peers],
                    "ports": None
                    if r.ports is None
                    else [[p.protocol, p.first, p.last] for p in r.ports],
                }
                for r in d.rules
            ],
        }

    return {
        ifname: {
            "network": ir.network,
            "ingress": direction(ir.ingress),
            "egress": direction(ir.egress),
        }
        for ifname, ir in sorted(rules.items())
    }
