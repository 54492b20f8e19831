"""Rule IR -> an nftables script for the pod's network namespace (POL-COMPACT, POL-TAG).

Pure and deterministic: the same IR always gives the same text. One `inet netattach` table,
replaced in one transaction (add, delete, define): the pod's ruleset changes atomically.
Peers and ports live in named sets (interval sets for CIDRs and port ranges), so each policy
rule gives at most one nft rule per address family and protocol.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from netattach.cni import errors
from netattach.policy.compile import AllowRule, DirectionRules, InterfaceRules, PortRange
from netattach.policy.model import IPNetwork

TABLE: Final = "netattach"
COMMENT_MAX: Final = 128
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
_POD_KEY = re.compile(r"^[a-z0-9.-]{1,253}/[a-z0-9.-]{1,253}$")
_HOOKS: Final = {"ingress": ("input", "iifname", "saddr"), "egress": ("output", "oifname", "daddr")}
_ND: Final = "nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit, nd-router-advert"


def _element(net: IPNetwork) -> str:
    if net.prefixlen == net.max_prefixlen:
        return str(net.network_address)
    return str(net)


def _port(p: PortRange) -> str:
    return str(p.first) if p.first == p.last else f"{p.first}-{p.last}"


def _comment(text: str) -> str:
    return f'comment "{text[:COMMENT_MAX]}"'


def _set(name: str, kind: str, uid: str, elements: list[str]) -> list[str]:
    return [
        f"\tset {name} {{",
        f"\t\ttype {kind}",
        "\t\tflags interval",
        f"\t\t{_comment(f'policy {uid}')}",
        f"\t\telements = {{ {', '.join(elements)} }}",
        "\t}",
    ]


def _allow(prefix: str, rule: AllowRule, addr_key: str, sets: list[str], chain: list[str]) -> None:
    """The sets and rules of one allow rule: one rule per family x protocol present."""
    uid = rule.policy_uid
    peer_matches: list[str] = [""]
    if rule.peers is not None:
        peer_matches = []
        v4 = [_element(n) for n in rule.peers if n.version == 4]
        v6 = [_element(n) for n in rule.peers if n.version == 6]
        for family, kind, elements in (("ip", "ipv4_addr", v4), ("ip6", "ipv6_addr", v6)):
            if elements:
                name = f"{prefix}_{'a4' if family == 'ip' else 'a6'}"
                sets.extend(_set(name, kind, uid, elements))
                peer_matches.append(f"{family} {addr_key} @{name} ")
    port_matches: list[str] = [""]
    if rule.ports is not None:
        port_matches = []
        for proto in sorted({p.protocol for p in rule.ports}):
            name = f"{prefix}_{proto.lower()}"
            sets.extend(
                _set(
                    name, "inet_service", uid, [_port(p) for p in rule.ports if p.protocol == proto]
                )
            )
            port_matches.append(f"{proto.lower()} dport @{name} ")
    for peer in peer_matches:
        for port in port_matches:
            chain.append(f"\t\t{peer}{port}accept {_comment(f'policy {uid}')}")


def _isolated_by(d: DirectionRules) -> str:
    text = "isolated by " + ",".join(d.policy_uids)
    if len(text) > COMMENT_MAX:
        text = text[: COMMENT_MAX - 3] + "..."
    return text


def render_table(pod_key: str, rules: Mapping[str, InterfaceRules]) -> str | None:
    """The nft script for the pod, or None when no direction of any interface is isolated."""
    if not _POD_KEY.match(pod_key):
        raise errors.InvalidNetworkConfigError("invalid pod key for nftables", repr(pod_key))
    for ifname in rules:
        if not _IFNAME.match(ifname):
            raise errors.InvalidNetworkConfigError("invalid interface name", repr(ifname))
    sets: list[str] = []
    chains: list[str] = []
    base: dict[str, list[str]] = {"ingress": [], "egress": []}
    for index, (ifname, ir) in enumerate(sorted(rules.items())):
        for direction in ("ingress", "egress"):
            d = ir.ingress if direction == "ingress" else ir.egress
            if d is None:
                continue
            _hook, if_key, addr_key = _HOOKS[direction]
            name = f"i{index}_{'in' if direction == 'ingress' else 'out'}"
            base[direction].append(
                f'\t\t{if_key} "{ifname}" jump {name} {_comment(f"network {ir.network}")}'
            )
            chain = [f"\tchain {name} {{"]
            for k, rule in enumerate(d.rules):
                _allow(f"{name}_r{k}", rule, addr_key, sets, chain)
            chain.append(f"\t\tdrop {_comment(_isolated_by(d))}")
            chain.append("\t}")
            chains.extend(chain)
    if not base["ingress"] and not base["egress"]:
        return None
    lines = [
        f"add table inet {TABLE}",
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
        f"\t{_comment(f'netattach pod {pod_key}')}",
        *sets,
    ]
    for direction in ("ingress", "egress"):
        if not base[direction]:
            continue
        hook = _HOOKS[direction][0]
        lines += [
            f"\tchain {hook} {{",
            f"\t\ttype filter hook {hook} priority filter; policy accept;",
            "\t\tct state established,related accept",
            f"\t\ticmpv6 type {{ {_ND} }} accept",
            *base[direction],
            "\t}",
        ]
    lines += [*chains, "}"]
    return "\n".join(lines) + "\n"


__all__ = ["TABLE", "render_table"]
