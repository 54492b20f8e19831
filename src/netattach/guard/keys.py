"""Key spelling as a Go plugin reads it: the delegate policy's first check (SEC-KEYS).

The reference plugins decode their config with Go's `encoding/json`, which takes an object key as
a struct field when the two are equal ignoring case, by Unicode simple folding (`MASTER`,
`Master`, and `master` with its `s` written as U+017F LONG S are all `master`; U+212A KELVIN
SIGN reads as `k`); an exact match is preferred, and when several keys of one object match one
field, the last one written wins. The policy reads keys exactly, so a config it approved could
run with values it never saw: `{"device": "eth1", "DEVICE": "eth0"}` moves `eth0`.

The rule, rather than judging what each plugin ends up with (which needs every plugin's struct):

    refused    a key that folds to a checked key (`CHECKED_KEYS`) but is spelled otherwise
               ("plugins[0].MASTER is read as master by a Go plugin; write it so")
    refused    an object with two keys that fold to the same name, whatever they are (the
               plugin takes the last; a config has no use for both)

So the keys the policy checks exactly are the only spelling of those keys in the config, and
each object has at most one spelling of any name: the policy's exact reading and the plugin's
folding reading see the same values. The objects under `sysctl` are maps in every plugin (Go map
keys are exact, not folded) and sysctl names are case-sensitive paths, so they are skipped.

`go_fold(name)` is Go's folding of a key (`foldName` in encoding/json): ASCII letters upper-cased,
any other character replaced by the smallest character of its simple-folding orbit. Only the
two non-ASCII characters whose orbit holds an ASCII letter (U+017F, U+212A) can make a key
match an ASCII field; the rest is kept close to Go so that two keys Go would confuse are
refused together.
"""

from __future__ import annotations

from collections.abc import Mapping

from netattach.guard import refusal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

# The keys the delegate policy reads, or reads through: a variant spelling of any of them is
# refused wherever it is written. Containers (`ipam`, `plugins`, `args`, `cni`, `runtimeConfig`)
# are here because a rule that looks for a key *inside* one reads them by name.
CHECKED_KEYS: Final = frozenset(
    {
        # the plugin, and what the walk descends through
        "type",
        "plugins",
        "ipam",
        "args",
        "cni",
        "runtimeConfig",
        "capabilities",
        "delegates",
        # host resources (SEC-DELEGATE)
        "master",
        "bridge",
        "device",
        "hwaddr",
        "kernelpath",
        "pciBusID",
        "deviceID",
        "dataDir",
        "sysctl",
        # what the node-safety rules read (SEC-NODE)
        "mode",
        "isGateway",
        "isDefaultGateway",
        "ipMasq",
        "forceAddress",
        "addresses",
        "address",
        "gateway",
        "routes",
        "dst",
        "gw",
        "ranges",
        "subnet",
        "rangeStart",
        "rangeEnd",
        "ips",
        "portMappings",
        "hostPort",
        "hostIP",
        "snat",
        "externalSetMarkChain",
        # host paths the policy does not judge (docs/security.md), spelled one way all the same
        "resolvConf",
        "daemonSocketPath",
    }
)

# What the reference plugins read in some of these keys, which every rule of the guard (and its
# admission form) judges alike:
# the keys whose value the kernel resolves to a host link (SEC-VALUES: `ifnames`);
LINK_KEYS: Final = ("master", "bridge", "device")
# the plugins that hang off the node's default-route interface when `master` is unset or "";
DEFAULT_ROUTE_MASTER: Final = ("macvlan", "ipvlan")
# bridge CNI's bridge when `bridge` is unset or "";
DEFAULT_BRIDGE_NAME: Final = "cni0"
# host-device's other ways to name the host interface it takes than `device`.
HOST_DEVICE_OTHER_NAMES: Final = ("hwaddr", "kernelpath")

# The characters outside ASCII whose simple-folding orbit holds an ASCII letter (Unicode's
# CaseFolding.txt: 017F folds to s, 212A to k); Go takes each as that letter.
_ASCII_ORBIT: Final = {"\u017f": "S", "\u212a": "K"}


def _fold_rune(char: str) -> str:
    """The smallest character of `char`'s simple case-folding orbit (Go's `foldRune`)."""
    if char in _ASCII_ORBIT:
        return _ASCII_ORBIT[char]
    orbit = {char}
    frontier = [char]
    while frontier:
        current = frontier.pop()
        for other in (current.lower(), current.upper(), current.casefold()):
            if len(other) == 1 and other not in orbit:
                orbit.add(other)
                frontier.append(other)
    return min(orbit)


def go_fold(name: str) -> str:
    """`name` as Go's encoding/json compares keys: equal folds, same field."""
    if name.isascii():
        return name.upper()
    return "".join(c.upper() if c.isascii() else _fold_rune(c) for c in name)


_CANONICAL: Final = {go_fold(key): key for key in CHECKED_KEYS}


def spelling_problems(raw: object) -> list[tuple[str, object, str]]:
    """Every (key path, value, reason) of `raw` the rule refuses, in the order the keys are
    written.

    Iterative (an explicit stack), so a deeply nested config costs no Python recursion: the
    depth limit is the parser's business (`cni.conf.MAX_DEPTH`).
    """
    problems: list[tuple[str, object, str]] = []
    stack: list[tuple[object, str]] = [(raw, "")]
    while stack:
        node, path = stack.pop()
        children: list[tuple[object, str]] = []
        if isinstance(node, list):
            children = [(item, f"{path}[{i}]") for i, item in enumerate(node)]
        elif isinstance(node, Mapping):
            _check_object(node, path, problems)
            for key, value in node.items():
                if key == "sysctl" and isinstance(value, Mapping):
                    continue  # a map of sysctl names: exact keys in every plugin
                children.append((value, refusal.join(path, str(key))))
        stack.extend(reversed(children))
    return problems


def _check_object(
    obj: Mapping[object, object], path: str, problems: list[tuple[str, object, str]]
) -> None:
    seen: dict[str, str] = {}
    for key, value in obj.items():
        name = str(key)
        folded = go_fold(name)
        earlier = seen.get(folded)
        if earlier is not None:
            problems.append(
                (
                    refusal.join(path, name),
                    value,
                    f"is the same key as {earlier!r} to a Go plugin (keys match ignoring case, "
                    "and the last one wins); write it once",
                )
            )
            continue
        seen[folded] = name
        canonical = _CANONICAL.get(folded)
        if canonical is not None and canonical != name:
            problems.append(
                (
                    refusal.join(path, name),
                    value,
                    f"is read as {canonical!r} by a Go plugin (keys match ignoring case); "
                    f"write it {canonical!r}",
                )
            )
