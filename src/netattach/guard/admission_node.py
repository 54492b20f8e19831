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

from collections.abc import Callable, Sequence

from netattach.guard import check, delegate_policy, globs, node_rules

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

    from netattach.guard import admission

_WS: Final = r"\s*"


def _key(names: Sequence[str]) -> str:
    return '"(?:' + "|".join(names) + ')"'


def _cel(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _found(regex: str) -> str:
    return f"variables.config.matches({_cel(regex)})"


def _count(regex: str) -> str:
    return f"variables.config.findAll({_cel(regex)}).size()"


def _pair(name: str) -> str:
    return _key([name]) + _WS + ":" + _WS + '"[^"]*"'


def _allowed(name: str, patterns: globs.Patterns, *, empty: str) -> str:
    """CEL on the pair `m` (`"name": "value"`): its value is taken by `patterns`; an empty
    value is decided by `empty` (a CEL constant)."""
    head = "^" + _key([name]) + _WS + ":" + _WS + '"'
    included = [globs.glob_regex(p) for p in patterns.included]
    excluded = [globs.glob_regex(p) for p in patterns.excluded]
    parts = ["false"]
    if included:
        parts = [f"m.matches({_cel(head + '(?:' + '|'.join(included) + ')' + chr(34) + '$')})"]
    if excluded:
        parts.append(f"!m.matches({_cel(head + '(?:' + '|'.join(excluded) + ')' + chr(34) + '$')})")
    blank = head + '"$'
    return f"(m.matches({_cel(blank)}) ? {empty} : ({' && '.join(parts)}))"


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


def _passthru(rules: delegate_policy.DelegateRules) -> admission.Check:
    from netattach.guard import admission

    listed = rules.passthru_master
    if listed.allows_anything:
        return admission.Check(_pair("master"), "true")
    mode = _key(["mode"]) + _WS + ":" + _WS + '"' + node_rules.PASSTHRU + '"'
    master = _key(["master"]) + _WS + ":"
    absent = "!" + _found(mode)
    each = f"{absent} || {_allowed('master', listed, empty='false')}"
    # Each passthru with a master of its own object: every match holds a passthru mode and
    # matches do not overlap, so as many matches as modes leaves no mode without its master
    # (counting the config's master keys would take another plugin's for it).
    between = _same_object()
    paired = f"(?:{mode}{between}{master}|{master}{between}{mode})"
    enough = f"{_count(mode)} <= {_count(paired)}"
    return admission.Check(_pair("master"), each, (f"({absent} || {enough})",))


def _gateway_bridge(rules: delegate_policy.DelegateRules) -> admission.Check:
    from netattach.guard import admission

    listed = rules.gateway_bridge
    flags = _key(node_rules.GATEWAY_FLAGS) + _WS + ":" + _WS
    # Neither true nor false, whatever the lists: the plugin would not decode it.
    booleans = "!" + _found(flags + "(?:[^tf\\s]|t[^r]|f[^a])")
    if listed.allows_anything:
        return admission.Check(_pair("bridge"), "true", (booleans,))
    off = "!" + _found(flags + "[^f\\s]")
    bridges = _count(_key(["type"]) + _WS + ":" + _WS + '"' + node_rules.BRIDGE + '"')
    conditions = [
        "!" + _found(_key(["type"]) + _WS + ":" + _WS + '"' + node_rules.PTP + '"'),
        *(
            f"{_count(_key([flag]) + _WS + ':' + _WS + '[^f' + chr(92) + 's]')} <= {bridges}"
            for flag in node_rules.GATEWAY_FLAGS
        ),
    ]
    if not listed.allows(check.DEFAULT_BRIDGE_NAME):
        conditions.append(f"{bridges} <= {_count(_key(['bridge']) + _WS + ':')}")
    cni0 = "true" if listed.allows(check.DEFAULT_BRIDGE_NAME) else "false"
    each = f"{off} || {_allowed('bridge', listed, empty=cni0)}"
    return admission.Check(
        _pair("bridge"), each, (booleans, f"({off} || ({' && '.join(conditions)}))")
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


def _reserved(rules: delegate_policy.DelegateRules) -> admission.Check:
    from netattach.guard import admission

    ranges = [r for r in (*_ALWAYS, *rules.reserved_ranges) if r != delegate_policy.NODE_RANGE]
    regexes = [found for found in (ipv4_regex(r) for r in ranges) if found is not None]
    pair = _key(ADDRESS_KEYS) + _WS + ":" + _WS + '"[^"]*"'
    inside = (
        "^" + _key(ADDRESS_KEYS) + _WS + ":" + _WS + '"(?:' + "|".join(regexes) + ')(?:/[0-9]+)?"$'
    )
    ips = _key(["ips"]) + _WS + ":" + _WS + "\\[[^\\]]*" + '"(?:' + "|".join(regexes) + ')[/"]'
    return admission.Check(pair, f"!m.matches({_cel(inside)})", ("!" + _found(ips),))


Render = Callable[[delegate_policy.DelegateRules], "admission.Check"]

# (settings key, what a message calls it, its check), as admission._CHECKS lists its own.
CHECKS: Final[tuple[tuple[str, str, Render], ...]] = (
    ("passthruMaster", "master taken whole (mode passthru)", _passthru),
    ("gatewayBridge", "bridge with a gateway on the node (isGateway, ipMasq)", _gateway_bridge),
    ("reservedRanges", "address in a reserved range", _reserved),
)
