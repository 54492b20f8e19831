"""Rule IR -> a pod's nftables table, as data (`Table`) and as nft text (POL-COMPACT, POL-TAG).

Pure and deterministic: the same IR always gives the same table. One `inet netattach` table per
pod netns. Peers and ports live in named sets, so each policy rule gives at most two nft rules
per address family and protocol; every rule of the table that selects the same peers on the same
network uses the same sets, named after the selection (so a peer joining or leaving is an element
added or deleted in place, `policy.update`). Port sets are named after their content.

A selection's pods' addresses are a plain (hash) set of single addresses, `<selection>_a4` and
`_a6`; its ipBlocks are an interval set beside it, `<selection>_b4` and `_b6`. Whenever a script
adds or deletes an element of any set, nft first reads every element of every interval set of
the table (nft 1.0.6: ~65 ms for the 35,000 ranges of a big table); the pods' sets, which change
all the time, are hash sets so that this read stays small: blocks and ports only, which change
only with the policies.

`render_table` gives the script that replaces the table whole in one transaction (add, delete,
define): what a first apply, or a recovery, writes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from netattach.cni import errors
from netattach.policy.ir import AllowRule, DirectionRules, InterfaceRules, PortRange
from netattach.policy.selection import AddressSet, Elements, Texts, set_name

TABLE: Final = "netattach"
COMMENT_MAX: Final = 128
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
_POD_KEY = re.compile(r"^[a-z0-9.-]{1,253}/[a-z0-9.-]{1,253}$")
_HOOKS: Final = {"ingress": ("input", "iifname", "saddr"), "egress": ("output", "oifname", "daddr")}
_ND: Final = "nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit, nd-router-advert"
_FAMILIES: Final = ((4, "ip", "ipv4_addr", "a4"), (6, "ip6", "ipv6_addr", "a6"))


@dataclass(frozen=True, slots=True)
class NftSet:
    name: str
    kind: str  # ipv4_addr, ipv6_addr, inet_service
    comment: str  # the policies whose rules use it
    elements: Elements  # made into text only when the set is written whole
    interval: bool = True  # False: single addresses only (a hash set)

    @property
    def header(self) -> tuple[str, bool, str]:
        """What cannot change in place (an element list can)."""
        return self.kind, self.interval, self.comment


@dataclass(frozen=True, slots=True)
class Table:
    """netattach's table in one pod netns: sets by name, chains (name, body lines) in order."""

    comment: str
    sets: tuple[NftSet, ...]
    chains: tuple[tuple[str, tuple[str, ...]], ...]


def _comment(text: str) -> str:
    return f'comment "{text[:COMMENT_MAX]}"'


def _port(p: PortRange) -> str:
    return str(p.first) if p.first == p.last else f"{p.first}-{p.last}"


def _merged(ports: Iterable[PortRange]) -> list[PortRange]:
    """Overlapping or adjacent ranges joined: an interval set refuses overlapping elements."""
    out: list[PortRange] = []
    for p in sorted(ports):
        if out and p.first <= out[-1].last + 1:
            if p.last > out[-1].last:
                out[-1] = PortRange(p.protocol, out[-1].first, p.last)
            continue
        out.append(p)
    return out


@functools.lru_cache(maxsize=4096)
def _port_sets(ports: tuple[PortRange, ...]) -> tuple[tuple[str, str, Texts], ...]:
    """(protocol, set name, elements) per protocol of a port set; named after the content."""
    out = []
    for proto in sorted({p.protocol for p in ports}):
        elements = tuple(_port(p) for p in _merged(p for p in ports if p.protocol == proto))
        out.append((proto.lower(), set_name(proto, elements, prefix="p"), Texts(elements)))
    return tuple(out)


class _Builder:
    def __init__(self) -> None:
        # name -> kind, elements, interval
        self.sets: dict[str, tuple[str, Elements, bool]] = {}
        self.users: dict[str, set[str]] = {}  # set name -> policy UIDs

    def use(
        self,
        name: str,
        kind: str,
        elements: Elements,
        uid: str,
        *,
        interval: bool = True,
    ) -> str:
        if name not in self.sets:
            self.sets[name] = (kind, elements, interval)
        self.users.setdefault(name, set()).add(uid)
        return name

    def allow(self, rule: AllowRule, addr_key: str, chain: list[str]) -> None:
        """The rules of one allow rule: one rule per family x protocol present."""
        uid = rule.policy_uid
        peer_matches: list[str] = [""]
        if rule.peers is not None:
            peer_matches = []
            base = rule.selection or set_name(rule.peers.networks)
            blocks = rule.blocks
            for version, family, kind, suffix in _FAMILIES:
                if blocks is not None and (cidrs := blocks.cidrs(version)):
                    name = self.use(f"{base}_b{suffix[1]}", kind, cidrs, uid)
                    peer_matches.append(f"{family} {addr_key} @{name} ")
                hosts = rule.peers.hosts(version, blocks)
                if hosts:
                    name = self.use(f"{base}_{suffix}", kind, hosts, uid, interval=False)
                    peer_matches.append(f"{family} {addr_key} @{name} ")
        port_matches: list[str] = [""]
        if rule.ports is not None:
            port_matches = []
            for proto, name, elements in _port_sets(rule.ports):
                self.use(name, "inet_service", elements, uid)
                port_matches.append(f"{proto} dport @{name} ")
        for peer in peer_matches:
            for port in port_matches:
                chain.append(f"{peer}{port}accept {_comment(f'policy {uid}')}")

    def nft_sets(self) -> tuple[NftSet, ...]:
        out = []
        for name in sorted(self.sets):
            kind, elements, interval = self.sets[name]
            comment = _comment("policy " + ",".join(sorted(self.users[name])))
            out.append(NftSet(name, kind, comment, elements, interval))
        return tuple(out)


def _isolated_by(d: DirectionRules) -> str:
    text = "isolated by " + ",".join(d.policy_uids)
    if len(text) > COMMENT_MAX:
        text = text[: COMMENT_MAX - 3] + "..."
    return text


def build_table(pod_key: str, rules: Mapping[str, InterfaceRules]) -> Table | None:
    """The pod's table, or None when no direction of any interface is isolated."""
    if not _POD_KEY.match(pod_key):
        raise errors.InvalidNetworkConfigError("invalid pod key for nftables", repr(pod_key))
    for ifname in rules:
        if not _IFNAME.match(ifname):
            raise errors.InvalidNetworkConfigError("invalid interface name", repr(ifname))
    builder = _Builder()
    chains: list[tuple[str, tuple[str, ...]]] = []
    base: dict[str, list[str]] = {"ingress": [], "egress": []}
    for index, (ifname, ir) in enumerate(sorted(rules.items())):
        for direction in ("ingress", "egress"):
            d = ir.ingress if direction == "ingress" else ir.egress
            if d is None:
                continue
            _hook, if_key, addr_key = _HOOKS[direction]
            name = f"i{index}_{'in' if direction == 'ingress' else 'out'}"
            base[direction].append(
                f'{if_key} "{ifname}" jump {name} {_comment(f"network {ir.network}")}'
            )
            chain: list[str] = []
            for rule in d.rules:
                builder.allow(rule, addr_key, chain)
            chain.append(f"drop {_comment(_isolated_by(d))}")
            chains.append((name, tuple(chain)))
    if not base["ingress"] and not base["egress"]:
        return None
    hooks: list[tuple[str, tuple[str, ...]]] = []
    for direction in ("ingress", "egress"):
        if base[direction]:
            hook = _HOOKS[direction][0]
            hooks.append(
                (
                    hook,
                    (
                        f"type filter hook {hook} priority filter; policy accept;",
                        "ct state established,related accept",
                        f"icmpv6 type {{ {_ND} }} accept",
                        *base[direction],
                    ),
                )
            )
    return Table(
        comment=_comment(f"netattach pod {pod_key}"),
        sets=builder.nft_sets(),
        chains=(*hooks, *chains),
    )


Built = tuple[Mapping[str, InterfaceRules], Table | None]  # rules, and the table they gave


def rebuild_table(
    pod_key: str, rules: Mapping[str, InterfaceRules], last: Built | None
) -> Table | None:
    """`build_table`, from the table `last` gave when the rules differ from its rules only in
    the peers of some allow rules (same rules otherwise, no set becoming empty or not): those
    sets get their new elements, everything else is kept. A pass changes the peers of most
    tables and nothing else of them; building each table again was most of its time."""
    if last is None:
        return build_table(pod_key, rules)
    old_rules, old_table = last
    if old_table is None:
        return build_table(pod_key, rules)
    changed = _peers_changed(old_rules, rules)
    if changed is None:
        return build_table(pod_key, rules)
    if not changed:
        return old_table
    sets = {s.name: s for s in old_table.sets}
    replaced: set[str] = set()
    for base, new, blocks in changed:
        for version, _family, _kind, suffix in _FAMILIES:
            hosts = new.hosts(version, blocks)
            name = f"{base}_{suffix}"
            current = sets.get(name)
            if current is None:
                if hosts:
                    return build_table(pod_key, rules)  # a set and its rule appear
                continue
            if not hosts or current.interval:
                return build_table(pod_key, rules)  # a set and its rule go
            if name in replaced and current.elements != hosts:
                return build_table(pod_key, rules)  # two rules, one set, two contents
            replaced.add(name)
            if current.elements is not hosts:
                sets[name] = NftSet(name, current.kind, current.comment, hosts, False)
    return Table(old_table.comment, tuple(sets[s.name] for s in old_table.sets), old_table.chains)


def _peers_changed(
    old: Mapping[str, InterfaceRules], new: Mapping[str, InterfaceRules]
) -> list[tuple[str, AddressSet, AddressSet | None]] | None:
    """(set base name, new peers, blocks) of the allow rules whose peers alone differ; None
    when anything else differs."""
    if old.keys() != new.keys():
        return None
    out = []
    for ifname, ir in new.items():
        old_ir = old[ifname]
        if ir is old_ir:
            continue
        if ir.network != old_ir.network:
            return None
        for d, od in ((ir.ingress, old_ir.ingress), (ir.egress, old_ir.egress)):
            if d is od:
                continue
            if d is None or od is None or d.policy_uids != od.policy_uids:
                return None
            if len(d.rules) != len(od.rules):
                return None
            for r, o in zip(d.rules, od.rules, strict=True):
                if r is o or (r.peers is o.peers and r == o):
                    continue
                if (
                    r.peers is None
                    or o.peers is None
                    or not r.selection
                    or r.selection != o.selection
                    or r.blocks != o.blocks
                    or r.policy_uid != o.policy_uid
                    or r.origin != o.origin
                    or r.ports != o.ports
                ):
                    return None
                out.append((r.selection, r.peers, r.blocks))
    return out


def set_lines(s: NftSet) -> list[str]:
    return [
        f"\tset {s.name} {{",
        f"\t\ttype {s.kind}",
        *(["\t\tflags interval"] if s.interval else []),
        f"\t\t{s.comment}",
        f"\t\telements = {{ {s.elements.text()} }}",
        "\t}",
    ]


def chain_lines(name: str, body: tuple[str, ...]) -> list[str]:
    return [f"\tchain {name} {{", *(f"\t\t{line}" for line in body), "\t}"]


def table_text(table: Table) -> str:
    """The script replacing the table whole, in one transaction."""
    lines = [
        f"add table inet {TABLE}",
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
        f"\t{table.comment}",
    ]
    for s in table.sets:
        lines += set_lines(s)
    for name, body in table.chains:
        lines += chain_lines(name, body)
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_table(pod_key: str, rules: Mapping[str, InterfaceRules]) -> str | None:
    """The nft script for the pod, or None when no direction of any interface is isolated."""
    table = build_table(pod_key, rules)
    return None if table is None else table_text(table)


__all__ = [
    "TABLE",
    "Built",
    "NftSet",
    "Table",
    "build_table",
    "rebuild_table",
    "render_table",
    "table_text",
]
