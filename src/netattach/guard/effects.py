"""What a config would do to the node's links and switches, judged with the node's state
(SEC-VALUES). The node guard calls `refusals` once it has read the node's facts.

    names       a `master`, `bridge` or `device` that is an alternative name of a node link
                (`ip link property add dev eth0 altname uplink`): the kernel acts on eth0,
                so the name the lists judged is not the link the plugin takes: refused
                outright. (`guard/ifnames.py` refuses what needs no node: NULs, long names.)
    changes     what a plugin the defaults allow changes on the node and never undoes, each
                refused unless `nodeChanges` grants it by name:
        forwarding      ptp (and a bridge with isGateway) switch the node's IPv4 or IPv6
                        forwarding on for their addresses' families, when it is off (IPv6
                        forwarding on also stops every interface taking router adverts)
        bridgeUp        the bridge plugin sets an existing bridge up
        bridgePromisc   `promiscMode` makes an existing bridge promiscuous, never undone
        bridgeAcceptRA  the bridge plugin writes 0 to an existing bridge's accept_ra
        bridgeMtu       a port with a smaller MTU than an existing bridge's (the config's
                        `mtu`, else 1500) lowers the bridge's (kernel MTU auto-adjust), which
                        stays lowered when the bridge was made with its MTU by the plugin
A bridge the plugin creates is the NAD's own: what it does to that one is no change to the node.
Nor is what a bridge in `building` shows: one that an ADD under way names, whose plugin may be
making it (up, accept_ra and MTU are written one after another); that ADD was judged for it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from netattach.guard import delegate_policy, keys, node_rules, refusal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

    from netattach.guard.node_state import NodeFacts
    from netattach.netns.host import Link

NAMES_RULE: Final = "SEC-VALUES (docs/security.md)"
# The veth MTU the bridge and ptp plugins give a port when the config names none.
DEFAULT_MTU: Final = 1500
_FORWARDING: Final = {4: "net.ipv4.ip_forward", 6: "net.ipv6.conf.all.forwarding"}
_IN_CONTAINER: Final = "linkInContainer"


def refusals(
    raw: Mapping[str, Any],
    rules: delegate_policy.DelegateRules,
    facts: NodeFacts,
    families: frozenset[int],
    building: frozenset[str] = frozenset(),
) -> list[refusal.Refusal]:
    """The refusals of `raw` that the node's `facts` show: names that are another link's, and
    changes that outlive the pod. `families`: the IP families the config hands out (both when
    it cannot be told: a dhcp or third-party IPAM); `building`: the bridges ADDs under way name."""
    found: list[refusal.Refusal] = []
    links = {link.name: link for link in facts.links}
    aliases = {alt: link.name for link in facts.links for alt in link.altnames}
    for path, obj in node_rules.objects(raw):
        found.extend(_names(obj, path, aliases))
        kind = obj.get("type")
        if kind == node_rules.PTP or (
            kind == node_rules.BRIDGE
            and (obj.get("isGateway") is True or obj.get("isDefaultGateway") is True)
        ):
            found.extend(_forwarding(path, str(kind), rules, facts, families))
        if kind == node_rules.BRIDGE:
            name = obj.get(node_rules.BRIDGE) or keys.DEFAULT_BRIDGE_NAME
            link = links.get(name) if isinstance(name, str) else None
            if link is not None and link.kind == node_rules.BRIDGE and link.name not in building:
                found.extend(_bridge(obj, path, link, rules, facts))
    return found


def _names(
    obj: Mapping[str, Any], path: str, aliases: Mapping[str, str]
) -> Iterator[refusal.Refusal]:
    if obj.get(_IN_CONTAINER) is True:
        return  # the master is looked up in the pod's namespace, not the node's
    for key in keys.LINK_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value in aliases:
            why = (
                f"is an alternative name of the node's link {aliases[value]!r}: the kernel acts "
                f"on {aliases[value]!r}, not on what the lists judged; write the link's own "
                "name. Refused by"
            )
            yield refusal.Refusal(refusal.join(path, key), refusal.show(value), NAMES_RULE, why)


def _forwarding(
    path: str,
    kind: str,
    rules: delegate_policy.DelegateRules,
    facts: NodeFacts,
    families: frozenset[int],
) -> Iterator[refusal.Refusal]:
    if rules.node_changes.allows("forwarding"):
        return
    for family in sorted(families):
        if dict(facts.forwarding).get(family) is False:
            what = f"switches the node's {_FORWARDING[family]} on; it is off here"
            yield node_rules.change_refusal(
                refusal.join(path, "type"), refusal.show(kind), "forwarding", rules, what
            )


def _bridge(
    obj: Mapping[str, Any],
    path: str,
    link: Link,
    rules: delegate_policy.DelegateRules,
    facts: NodeFacts,
) -> Iterator[refusal.Refusal]:
    """What the bridge plugin does to `link`, a bridge the node already has."""
    listed = rules.node_changes
    key, shown = refusal.join(path, node_rules.BRIDGE), refusal.show(link.name)
    if not link.up and not listed.allows("bridgeUp"):
        what = f"sets the node's bridge {link.name!r} up; it is down"
        yield node_rules.change_refusal(key, shown, "bridgeUp", rules, what)
    if obj.get("promiscMode") is True and not link.promisc and not listed.allows("bridgePromisc"):
        what = f"makes the node's bridge {link.name!r} promiscuous, and never undoes it"
        yield node_rules.change_refusal(
            refusal.join(path, "promiscMode"), "true", "bridgePromisc", rules, what
        )
    accept_ra = dict(facts.accept_ra).get(link.name)
    if accept_ra not in (None, "0") and not listed.allows("bridgeAcceptRA"):
        what = (
            f"writes 0 to net.ipv6.conf.{link.name}.accept_ra, which is {accept_ra} here: the "
            "bridge stops taking router adverts"
        )
        yield node_rules.change_refusal(key, shown, "bridgeAcceptRA", rules, what)
    mtu = obj.get("mtu")
    port = mtu if isinstance(mtu, int) and not isinstance(mtu, bool) and mtu > 0 else DEFAULT_MTU
    if port < link.mtu and not listed.allows("bridgeMtu"):
        what = (
            f"a port of MTU {port} lowers the node's bridge {link.name!r} from {link.mtu}; "
            f"give the NAD mtu {link.mtu}"
        )
        yield node_rules.change_refusal(
            refusal.join(path, "mtu"), str(port), "bridgeMtu", rules, what
        )


def families_of(claims: list[node_rules.Claim]) -> frozenset[int]:
    """The IP families a config hands out to pods: of its pod addresses and ranges; both when
    it shows none (the addresses come from elsewhere: dhcp, a third-party IPAM)."""
    found = frozenset(
        c.first.version for c in claims if c.kind in (node_rules.POD, node_rules.SPAN)
    )
    return found or frozenset((4, 6))


def bridges_named(raw: Mapping[str, Any]) -> Iterator[str]:
    """The node bridges the bridge plugins of `raw` use (or make)."""
    for _, obj in node_rules.objects(raw):
        if obj.get("type") == node_rules.BRIDGE:
            name = obj.get(node_rules.BRIDGE) or keys.DEFAULT_BRIDGE_NAME
            if isinstance(name, str):
                yield name
