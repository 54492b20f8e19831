"""The node-safe defaults (SEC-NODE) at admission: the CEL of the rules a NAD's text decides.

`admission.py` adds these to its validations, one per list, chosen by the NAD's namespace as the
others are. Read as text like the rest (`spec.config` is a JSON string to CEL), each is at least
as strict as the daemon on a plainly written config:

    passthruMaster   when some `"mode": "passthru"` is written, every `"master"` of the config
                     must be in the list (not only the passthru plugin's), none empty, and each
                     passthru mode must have a `master` key in its own object (a passthru
                     without a master takes the default-route interface; another plugin's
                     master does not count)
    gatewayBridge    when some `isGateway`, `isDefaultGateway` or `ipMasq` is set (any value
                     but `false`): every `"bridge"` of the config in the list, a bridge
                     plugin without `bridge` only if `cni0` is, no `ptp` plugin (its
                     `ipMasq`), and no flag written more often than there are bridge plugins;
                     a flag that is neither `true` nor `false` is refused

What the text cannot tell, the daemon still refuses at ADD: a flag set in an object that is no
bridge plugin beside one that is. `reservedRanges` is not here: comparing addresses needs the
IP and CIDR libraries of Kubernetes 1.31 (this policy is for 1.30), and its `node` entry and
the live attachments are the node's facts; the daemon's check at ADD is the one that holds.
"""

from __future__ import annotations

from netattach.guard import cel, delegate_policy, keys, node_rules

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final


# How deep the objects between two keys of one object may nest for `_same_object` to read
# them (a macvlan's `ipam` with `ranges` of objects is 2): deeper, a passthru is refused.
SAME_OBJECT_DEPTH: Final = 3


def _same_object(depth: int = SAME_OBJECT_DEPTH) -> str:
    """RE2 for the text between two keys of one JSON object: strings, other characters, and
    objects nested up to `depth` deep, but no brace that leaves the object or enters another.
    Quotes delimit the strings exactly (a config with a backslash is refused first), so a brace
    inside a string is read as part of it."""
    inner = '(?:"[^"]*"|[^{}"])*'
    for _ in range(depth):
        inner = '(?:"[^"]*"|[^{}"]|\\{' + inner + "\\})*"
    return inner


def _passthru(rules: delegate_policy.DelegateRules) -> cel.Check:
    listed = rules.passthru_master
    if listed.allows_anything:
        return cel.Check(cel.pair(["master"]), "true")
    mode = cel.key(["mode"]) + cel.WS + ":" + cel.WS + '"' + node_rules.PASSTHRU + '"'
    master = cel.key(["master"]) + cel.WS + ":"
    absent = "!" + cel.matches(cel.CONFIG, mode)
    each = f"{absent} || {cel.names_check(['master'], listed, empty='false')}"
    # Each passthru with a master of its own object: every match holds a passthru mode and
    # matches do not overlap, so as many matches as modes leaves no mode without its master
    # (counting the config's master keys would take another plugin's for it).
    between = _same_object()
    paired = f"(?:{mode}{between}{master}|{master}{between}{mode})"
    enough = f"{cel.count(mode)} <= {cel.count(paired)}"
    return cel.Check(cel.pair(["master"]), each, (f"({absent} || {enough})",))


def _gateway_bridge(rules: delegate_policy.DelegateRules) -> cel.Check:
    listed = rules.gateway_bridge
    flags = cel.key(node_rules.GATEWAY_FLAGS) + cel.WS + ":" + cel.WS
    # Neither true nor false, whatever the lists: the plugin would not decode it.
    booleans = "!" + cel.matches(cel.CONFIG, flags + "(?:[^tf\\s]|t[^r]|f[^a])")
    if listed.allows_anything:
        return cel.Check(cel.pair(["bridge"]), "true", (booleans,))
    set_flag = "[^f\\s]"  # a value that is not `false`
    off = "!" + cel.matches(cel.CONFIG, flags + set_flag)
    bridges = cel.count(cel.key(["type"]) + cel.WS + ":" + cel.WS + '"' + node_rules.BRIDGE + '"')
    conditions = [
        "!"
        + cel.matches(
            cel.CONFIG, cel.key(["type"]) + cel.WS + ":" + cel.WS + '"' + node_rules.PTP + '"'
        ),
        *(
            f"{cel.count(cel.key([flag]) + cel.WS + ':' + cel.WS + set_flag)} <= {bridges}"
            for flag in node_rules.GATEWAY_FLAGS
        ),
    ]
    if not listed.allows(keys.DEFAULT_BRIDGE_NAME):
        conditions.append(f"{bridges} <= {cel.count(cel.key(['bridge']) + cel.WS + ':')}")
    cni0 = "true" if listed.allows(keys.DEFAULT_BRIDGE_NAME) else "false"
    each = f"{off} || {cel.names_check(['bridge'], listed, empty=cni0)}"
    return cel.Check(
        cel.pair(["bridge"]), each, (booleans, f"({off} || ({' && '.join(conditions)}))")
    )


# The keys whose value is an address (or a CIDR, written from its address) a NAD hands out.
ADDRESS_KEYS: Final = ("address", "gateway", "gw", "rangeStart", "rangeEnd", "subnet", "dst")
# Never handed out, whatever the lists: the daemon refuses them for pods, ranges and gateways.
_ALWAYS: Final = ("127.0.0.0/8", "224.0.0.0/4")
_OCTET_LIMIT: Final = 256


def ipv4_regex(cidr: str) -> str | None:
    """RE2 for the dotted IPv4 addresses in `cidr` (as Go writes and reads them: no leading
    zeros); None for an IPv6 range, which text cannot decide (`::` compresses any run)."""
    import ipaddress

    network = ipaddress.ip_network(cidr, strict=False)
    if network.version != 4:
        return None
    octets = [int(o) for o in str(network.network_address).split(".")]
    parts: list[str] = []
    for index, octet in enumerate(octets):
        fixed = network.prefixlen - 8 * index  # bits of this octet the prefix fixes
        if fixed >= 8:
            parts.append(str(octet))
        elif fixed <= 0:
            parts.append("(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])")
        else:
            span = range(octet, min(octet + (1 << (8 - fixed)), _OCTET_LIMIT))
            parts.append("(?:" + "|".join(str(n) for n in reversed(span)) + ")")
    return "\\.".join(parts)


def _reserved(rules: delegate_policy.DelegateRules) -> cel.Check:
    ranges = [r for r in (*_ALWAYS, *rules.reserved_ranges) if r != delegate_policy.NODE_RANGE]
    regexes = [found for found in (ipv4_regex(r) for r in ranges) if found is not None]
    pair = cel.key(ADDRESS_KEYS) + cel.WS + ":" + cel.WS + '"[^"]*"'
    inside = (
        "^"
        + cel.key(ADDRESS_KEYS)
        + cel.WS
        + ":"
        + cel.WS
        + '"(?:'
        + "|".join(regexes)
        + ')(?:/[0-9]+)?"$'
    )
    ips = (
        cel.key(["ips"])
        + cel.WS
        + ":"
        + cel.WS
        + "\\[[^\\]]*"
        + '"(?:'
        + "|".join(regexes)
        + ')[/"]'
    )
    return cel.Check(
        pair, f"!m.matches({cel.literal(inside)})", ("!" + cel.matches(cel.CONFIG, ips),)
    )


# (settings key, what a message calls it, its check), as admission._CHECKS lists its own.
CHECKS: Final[tuple[tuple[str, str, cel.Render], ...]] = (
    ("passthruMaster", "master taken whole (mode passthru)", _passthru),
    ("gatewayBridge", "bridge with a gateway on the node (isGateway, ipMasq)", _gateway_bridge),
    ("reservedRanges", "address in a reserved range", _reserved),
)
