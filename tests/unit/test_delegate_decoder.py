"""The delegate policy against the plugins' own decoders (SEC-KEYS, SEC-DELEGATE, SEC-NODE).

The policy reads a config's keys exactly; the reference plugins read theirs with Go's
`encoding/json`, which takes a key for a field ignoring case and by Unicode simple folding (the
last of several matching keys winning). tests/go/cnidecode decodes a config into the plugins'
structs, as they do, and says what each plugin reads. The property: for generated configs
(variant spellings and folds of checked keys, duplicates, `\\uXXXX` escapes, nesting in `ipam`,
config lists and `args.cni`, a pod's `cni-args`), whenever the daemon accepts a config, every
plugin's reading is within the policy: each plugin run (netattach's and the IPAM plugin a main
plugin runs) is a listed type, and its master, bridge, device, PCI address, dataDir and sysctls
are allowed; and of SEC-NODE's rules, those that need no node: a macvlan takes a master whole
(passthru) only from `passthruMaster`, a gateway or NAT goes on a bridge of `gatewayBridge` only,
and no address the IPAM plugin hands out lies in a CIDR of `reservedRanges`.

The daemon's side is taken as the daemon takes it: `resolve_delegate` parses the spec.config
text, `apply_selection` merges the `cni-args`, `delegate_guard.check_nad` judges the result; the
decoder gets what `runtime.chain.build_plugin_config` makes of each plugin, serialised as
`runtime.invoke` writes it to the plugin's stdin.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from netattach.attach import delegate
from netattach.cni import conf, errors
from netattach.guard import delegate_policy, globs, node_rules
from netattach.pods import delegate_guard
from netattach.runtime import chain
from tests import attack_corpus
from tests.go_decoder import CNI_MODULE, GO_DIR, PLUGINS_MODULE, Decoder, Reading

NAMESPACE = "team-a"
NAD = "net"
NO_NETWORKS_DIR = Path("/nonexistent/netattach-test")
CNI_VERSION = "1.0.0"
LONG_S = "\u017f"  # Go reads it as s
KELVIN = "\u212a"  # Go reads it as k

# The lists the generated configs are judged by: names the generator writes are on both sides.
STRICT = delegate_policy.DelegateRules(
    types=globs.Patterns((*delegate_policy.DEFAULT_TYPES, "host-device", "portmap")),
    master=globs.Patterns(("na-ok*",)),
    bridge=globs.Patterns(("br-ok",)),
    device=globs.Patterns(("dev-ok",)),
    pci_bus_id=globs.Patterns(("0000:00:01.0",)),
    data_dir=globs.Prefixes(("/var/lib/cni", "/run/cni")),
    sysctl=globs.Patterns(("net.ipv4.conf.*",)),
    passthru_master=globs.Patterns(("na-ok1",)),
    gateway_bridge=globs.Patterns(("br-ok",)),
)
NO_DEVICE = STRICT._replace(device=globs.Patterns(()), pci_bus_id=globs.Patterns(()))
FRESH = delegate_policy.DelegateRules()  # a fresh install: no delegatePolicy key
RULES = {"strict": STRICT, "no-device": NO_DEVICE, "fresh": FRESH}

# Plugins that hang off the node's default-route interface when their master is "".
DEFAULT_ROUTE = ("macvlan", "ipvlan")
# bridge CNI's defaultBrName: where a bridge config without "bridge" (or with "") goes.
BRIDGE_DEFAULT = "cni0"
GATEWAY_FLAGS = ("isGateway", "isDefaultGateway", "ipMasq")


# --- the daemon's side ---------------------------------------------------------------------


class Judged(NamedTuple):
    """What the daemon makes of a config: why it refuses it ("" when it runs it), and the stdin
    of each plugin as it would run (empty when the config does not even parse)."""

    refused: str
    stdin: str
    types: tuple[str, ...]


def judge(
    spec: str,
    cni_args: Mapping[str, object] | None,
    policy: delegate_policy.DelegatePolicy,
    labels: Mapping[str, str] | None = None,
) -> Judged:
    """`spec` as the daemon takes a NAD's spec.config, with a pod's `cni-args` merged."""
    try:
        found = delegate.resolve_delegate(
            namespace=NAMESPACE,
            name=NAD,
            spec_config=spec,
            has_spec=True,
            networks_dir=NO_NETWORKS_DIR,
        )
        network, capability_args = delegate.apply_selection(
            found.network, cni_args=cni_args, runtime_requests={}
        )
    except errors.CNIError as exc:
        return Judged(refused=f"invalid: {exc}", stdin="", types=())
    plugins = [
        chain.build_plugin_config(network, plugin, capability_args=capability_args)
        for plugin in network.plugins
    ]
    stdin = json.dumps({"plugins": plugins})  # each object as runtime.invoke writes it
    view = _Namespaces(labels or {})
    refusals = delegate_guard.check_nad(f"{NAMESPACE}/{NAD}", network.raw, policy, view)
    refused = "; ".join(str(r) for r in refusals)
    return Judged(refused=refused, stdin=stdin, types=tuple(p.type for p in network.plugins))


class _Namespaces:
    """A view that knows the NAD's namespace, labelled `labels` (a namespace grant)."""

    def __init__(self, labels: Mapping[str, str]) -> None:
        self.labels = dict(labels)

    def lookup_namespace(self, name: str) -> dict[str, Any] | None:
        if name != NAMESPACE:
            return None
        return {"kind": "Namespace", "metadata": {"name": name, "labels": self.labels}}


# --- the plugins' side: what a reading may hold under the rules ------------------------------


def outside_policy(
    reading: Reading, rules: delegate_policy.DelegateRules, protected: globs.Prefixes
) -> list[str]:
    """What one plugin's reading does that the rules do not allow; [] when nothing."""
    found: list[str] = []

    def plugin_run(where: str, kind: object) -> None:
        if not isinstance(kind, str) or conf.plugin_type_problem(kind):
            found.append(f"{where} runs {kind!r}, not a plugin name")
        elif not rules.types.allows(kind):
            found.append(f"{where} runs {kind!r}, not in types {rules.types}")

    def allowed(where: str, value: str, listed: globs.Patterns, name: str) -> None:
        if value and not listed.allows(value):
            found.append(f"{where} {value!r} not in {name} {listed}")

    plugin_run("the daemon", reading["exec"])
    ipam = reading.get("ipam")
    if isinstance(ipam, dict):
        plugin_run("the main plugin", ipam["plugin"])
        found.extend(_outside_ipam(ipam, rules, protected))
    if "error" in reading:
        return found  # the plugin fails decoding: it reads nothing, does nothing
    exec_type = reading["exec"]
    for key in ("type", "ipamType"):
        value = reading.get(key)
        if value:
            plugin_run(f"{key} (read)", value)
    master = reading.get("master")
    if isinstance(master, str):
        if master == "" and exec_type in DEFAULT_ROUTE and not rules.master.allows_anything:
            found.append(f"master unset: the node's default-route interface, master {rules.master}")
        allowed("master", master, rules.master, "master")
    if exec_type == "bridge":
        allowed("bridge", reading["bridge"] or BRIDGE_DEFAULT, rules.bridge, "bridge")
    allowed("device", reading.get("device") or "", rules.device, "device")
    for key in ("pciBusID", "deviceID"):
        allowed(key, reading.get(key) or "", rules.pci_bus_id, "pciBusID")
    for key in ("hwaddr", "kernelpath"):
        if reading.get(key) and not rules.device.allows_anything:
            found.append(f"{key} {reading[key]!r} names a host device, device {rules.device}")
    found.extend(_outside_data_dir("dataDir", reading.get("dataDir"), rules, protected))
    for sysctl in reading.get("sysctl") or {}:
        if not rules.sysctl.allows(sysctl):
            found.append(f"sysctl {sysctl!r} not in sysctl {rules.sysctl}")
    found.extend(_outside_node_rules(reading, rules))
    return found


def _outside_node_rules(reading: Reading, rules: delegate_policy.DelegateRules) -> list[str]:
    """SEC-NODE's per-config rules on a reading: a master taken whole, a gateway or NAT on the
    node."""
    found: list[str] = []
    exec_type = reading["exec"]
    if exec_type == "macvlan" and reading.get("mode") == "passthru":
        master, listed = reading.get("master") or "", rules.passthru_master
        if not (listed.allows(master) if master else listed.allows_anything):
            found.append(f"mode passthru takes master {master!r} whole, passthruMaster {listed}")
    flags = [flag for flag in GATEWAY_FLAGS if reading.get(flag) is True]
    if flags and exec_type == "bridge":
        bridge = reading["bridge"] or BRIDGE_DEFAULT
        if not rules.gateway_bridge.allows(bridge):
            found.append(f"{flags} on bridge {bridge!r}, gatewayBridge {rules.gateway_bridge}")
    elif flags and not rules.gateway_bridge.allows_anything:
        found.append(f"{flags} outside a bridge, gatewayBridge {rules.gateway_bridge}")
    return found


def _outside_ipam(
    ipam: Mapping[str, Any], rules: delegate_policy.DelegateRules, protected: globs.Prefixes
) -> list[str]:
    if "error" in ipam:
        return []
    found: list[str] = []
    kind = ipam.get("type")
    if kind and (conf.plugin_type_problem(kind) or not rules.types.allows(kind)):
        found.append(f"ipam type (read by {ipam['plugin']}) {kind!r} not in types {rules.types}")
    found.extend(_outside_data_dir("ipam dataDir", ipam.get("dataDir"), rules, protected))
    reserved = node_rules.reserved_networks(rules.reserved_ranges)
    points = [a["address"] for a in ipam.get("addresses") or ()] + list(ipam.get("ips") or ())
    for text in points:
        address = _interface(text)
        if address is not None and any(address.ip in network for network in reserved):
            found.append(f"ipam hands out {text!r}, in reservedRanges {rules.reserved_ranges}")
    for handed in ipam.get("ranges") or ():
        subnet = _interface(handed["subnet"])
        if subnet is None:
            continue
        start, end = _interface(handed["rangeStart"]), _interface(handed["rangeEnd"])
        first = int(start.ip if start else subnet.network[0])
        last = int(end.ip if end else subnet.network[-1])
        for network in reserved:
            if (
                network.version == subnet.version
                and first <= int(network[-1])
                and last >= int(network[0])
            ):
                found.append(f"ipam range {handed} overlaps reservedRanges {network}")
    return found


def _interface(text: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface | None:
    """An address (with or without a prefix) as the plugin would read it; None: it would fail."""
    try:
        return ipaddress.ip_interface(text) if text else None
    except ValueError:
        return None


def _outside_data_dir(
    where: str, value: object, rules: delegate_policy.DelegateRules, protected: globs.Prefixes
) -> list[str]:
    """A dataDir the plugin writes, judged as the kernel resolves it ("" is the plugin's
    default, which the lists do not judge)."""
    if not value:
        return []
    if not isinstance(value, str):
        return [f"{where} {value!r} is not a path"]
    normal = globs.normal_path(value)
    if normal is None:
        return [f"{where} {value!r} is relative or climbs"]
    resolved = globs.normal_path(os.path.realpath(normal)) or normal
    for form in (normal, resolved):
        if not rules.data_dir.allows(form):
            return [f"{where} {value!r} writes {form!r}, not in dataDir {rules.data_dir}"]
        if protected.holds(form):
            return [f"{where} {value!r} writes {form!r}, in a protected directory"]
    return []


def readings_outside(
    judged: Judged,
    readings: Reading,
    rules: delegate_policy.DelegateRules,
    protected: globs.Prefixes,
) -> list[str]:
    """Everything the plugins of one config read outside the rules, each named by plugin."""
    assert "error" not in readings, readings
    plugins = readings["plugins"]
    # The decoder picks each plugin's struct as netattach picks the executable: by `type`.
    assert [p["exec"] for p in plugins] == list(judged.types), (plugins, judged.types)
    return [
        f"plugin {index} ({plugin['exec']}): {problem}"
        for index, plugin in enumerate(plugins)
        for problem in outside_policy(plugin, rules, protected)
    ]


# --- generated configs -----------------------------------------------------------------------
#
# A config is generated as JSON text, so that it can repeat a key and escape a character. The
# pieces are plain functions of Hypothesis's `draw`, not strategies: making a strategy object per
# key costs more than drawing it, and the property draws 2,000 configs a run.

# Go's simple folding of the letters of checked keys that have a non-ASCII fold.
_FOLDS = {"s": ("S", LONG_S), "k": ("K", KELVIN)}
_COIN = st.booleans()
_QUARTER = st.integers(0, 3)
_FIFTH = st.integers(0, 4)


def spelled(draw: st.DrawFn, key: str, tricky: bool) -> str:
    """`key` as a config writes it: itself, always in a plain config and most often in a tricky
    one; else a spelling Go reads as it."""
    if not tricky or draw(_QUARTER) < 3:
        return key
    choices = [list(dict.fromkeys([c, c.swapcase(), *_FOLDS.get(c.lower(), ())])) for c in key]
    pick = draw(st.integers(0, math.prod(len(c) for c in choices) - 1))  # every letter at once
    letters = []
    for options in choices:
        pick, index = divmod(pick, len(options))
        letters.append(options[index])
    variant = "".join(letters)
    return variant if variant != key else key.upper()


def _escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def json_string(draw: st.DrawFn, text: str) -> str:
    """`text` as a JSON string literal, in one config of five with some characters written as
    \\uXXXX escapes."""
    escaped = draw(st.integers(0, 2 ** len(text) - 1)) if draw(_FIFTH) == 4 else 0
    parts = []
    for index, char in enumerate(text):
        if escaped >> index & 1:
            parts.append(_escape(char))
        else:
            parts.append(json.dumps(char, ensure_ascii=False)[1:-1])
    return '"' + "".join(parts) + '"'


def json_object(pairs: Sequence[tuple[str, str]]) -> str:
    """An object from (key literal, value text) pairs, written in order, repeats kept."""
    return "{" + ",".join(f"{key}:{value}" for key, value in pairs) + "}"


# A value's JSON text, drawn for a plain or a tricky config.
Value = Callable[[st.DrawFn, bool], str]


class Entry(NamedTuple):
    key: str  # the canonical key
    value: Value


def scalar(*values: object) -> Value:
    """One of `values` (a string may come out escaped)."""
    pick = st.sampled_from(values)

    def value(draw: st.DrawFn, tricky: bool) -> str:
        chosen = draw(pick)
        return json_string(draw, chosen) if isinstance(chosen, str) else json.dumps(chosen)

    return value


def literal(text: str) -> Value:
    return lambda _draw, _tricky: text


def obj(draw: st.DrawFn, entries: Sequence[Entry], tricky: bool) -> str:
    """An object of `entries`, each key spelled as drawn, and some of them written twice, before
    or after, with another value: the same key again (Python and Go both keep the last), or in
    a tricky config a spelling Go folds alike."""
    pairs = [
        (json_string(draw, spelled(draw, e.key, tricky)), e.value(draw, tricky)) for e in entries
    ]
    for _ in range(draw(_QUARTER) // 2 if entries else 0):
        entry = draw(st.sampled_from(entries))
        again = entry.key
        if tricky:
            again = draw(st.sampled_from([again, again.upper(), spelled(draw, again, tricky)]))
        at = draw(st.integers(0, len(pairs)))
        pairs.insert(at, (json_string(draw, again), entry.value(draw, tricky)))
    return json_object(pairs)


def nested(entries: Sequence[Entry]) -> Value:
    return lambda draw, tricky: obj(draw, entries, tricky)


MASTERS = scalar("na-ok1", "na-ok-2", "na-ok1", "eth0", "uplink", "", 5)
BRIDGES = scalar("br-ok", "br-ok", "cni0", "br-bad", "")
DEVICES = scalar("dev-ok", "dev-ok", "uplink", "eth0")
PCI = scalar("0000:00:01.0", "0000:00:1f.6")
DATA_DIRS = scalar(
    "/var/lib/cni/x",
    "/run/cni/tuning",
    "/var/lib/cni/networks",
    "/etc/cni/net.d",
    "/var/lib/netattach",
    "/tmp/d",
    "//etc/x",
    "/run/cni/../../etc",
)
SYSCTL_NAMES = (
    "net.ipv4.conf.IFNAME.arp_ignore",
    "net.ipv4.conf.all.forwarding",
    "net.core.somaxconn",
    "kernel.core_pattern",
)
_SYSCTL_SETS = st.lists(st.sampled_from(SYSCTL_NAMES), min_size=1, max_size=2, unique=True)
MODES = scalar("bridge", "l2", "passthru")
FLAGS = scalar(True, False, False)
MAIN_TYPES = ("macvlan", "ipvlan", "vlan", "bridge", "host-device", "ptp")
META_TYPES = ("tuning", "portmap", "bandwidth")
IPAM_TYPES = st.sampled_from(("host-local", "host-local", "static", "dhcp", "unlisted-ipam"))


def sysctl_object(draw: st.DrawFn, tricky: bool) -> str:
    """A sysctl mapping: its keys are names (Go map keys, read exactly), never spelled."""
    return json_object([(json_string(draw, name), '"1"') for name in draw(_SYSCTL_SETS)])


SUBNETS = scalar("10.1.0.0/24", "10.1.0.0/24", "10.1.0.0/24", "169.254.169.0/24")
ADDRESSES = scalar("10.1.0.5/24", "10.1.0.5/24", "10.1.0.5/24", "169.254.169.254/24")
IPS = st.sampled_from(['["10.1.0.9/24"]', '["10.1.0.9/24"]', '["169.254.169.254/24"]'])


def static_addresses(draw: st.DrawFn, tricky: bool) -> str:
    return "[" + obj(draw, [Entry("address", ADDRESSES)], tricky) + "]"


def ipam_entries(kind: str) -> list[Entry]:
    entries = [Entry("type", literal(json.dumps(kind)))]
    if kind == "host-local":
        entries.append(Entry("subnet", SUBNETS))
    if kind == "static":
        entries.append(Entry("addresses", static_addresses))
    return entries


def ipam_object(draw: st.DrawFn, tricky: bool) -> str:
    entries = ipam_entries(draw(IPAM_TYPES))
    if draw(_COIN):
        entries.append(Entry("dataDir", DATA_DIRS))
    return obj(draw, entries, tricky)


ARGS_ENTRIES = st.lists(
    st.sampled_from(
        [
            Entry("sysctl", sysctl_object),
            Entry("ips", lambda draw, _tricky: draw(IPS)),
            Entry("mac", literal('"02:00:00:00:00:09"')),
        ]
    ),
    min_size=1,
    max_size=2,
    unique_by=lambda e: e.key,
)


def args_object(draw: st.DrawFn, tricky: bool) -> str:
    """A NAD's own `args`: `{"cni": {...}}` with what tuning, host-local and static read."""
    return obj(draw, [Entry("cni", nested(draw(ARGS_ENTRIES)))], tricky)


# The keys each plugin reads (and the policy checks), with their values.
PLUGIN_ENTRIES: dict[str, list[Entry]] = {
    "macvlan": [Entry("master", MASTERS), Entry("mode", MODES)],
    "ipvlan": [Entry("master", MASTERS), Entry("mode", MODES)],
    "vlan": [Entry("master", MASTERS), Entry("vlanId", literal("7"))],
    "bridge": [Entry("bridge", BRIDGES), *(Entry(flag, FLAGS) for flag in GATEWAY_FLAGS)],
    "host-device": [
        Entry("device", DEVICES),
        Entry("pciBusID", PCI),
        Entry("hwaddr", literal('"02:00:00:00:00:01"')),
        Entry("kernelpath", literal('"/sys/devices/pci0000:00/0000:00:1f.6"')),
        Entry("runtimeConfig", nested([Entry("deviceID", PCI)])),
    ],
    "ptp": [Entry("ipMasq", FLAGS)],
    "tuning": [Entry("sysctl", sysctl_object), Entry("dataDir", DATA_DIRS)],
    "portmap": [Entry("snat", literal("true"))],
    "bandwidth": [Entry("ingressRate", literal("1000")), Entry("ingressBurst", literal("1000"))],
    "host-local": [],
    "unlisted-cni": [Entry("master", MASTERS)],
}
_OWN = {
    kind: st.lists(st.sampled_from(entries), unique_by=lambda e: e.key)
    for kind, entries in PLUGIN_ENTRIES.items()
    if entries
}
_OTHER = st.sampled_from([e for es in PLUGIN_ENTRIES.values() for e in es])
_EIGHTH = st.integers(0, 7)


def plugin_object(draw: st.DrawFn, kind: str, tricky: bool) -> str:
    chosen: list[Entry] = draw(_OWN[kind]) if kind in _OWN else []
    entries = [Entry("type", literal(json.dumps(kind))), *chosen]
    if kind == "host-device" and not any(e.key == "device" for e in chosen):
        entries.append(Entry("device", DEVICES))  # it needs some name, usually this one
    if kind in MAIN_TYPES and draw(_QUARTER) > 0:
        entries.append(Entry("ipam", ipam_object))
    if kind == "host-local":
        entries.append(Entry("ipam", nested(ipam_entries("host-local"))))
    if draw(_QUARTER) == 0:
        entries.append(Entry("args", args_object))
    if draw(_EIGHTH) == 0:  # a key of another plugin: judged wherever it is
        other = draw(_OTHER)
        if all(e.key != other.key for e in entries):
            entries.append(other)
    return obj(draw, entries, tricky)


KINDS = st.sampled_from([*MAIN_TYPES, *META_TYPES, "host-local", "unlisted-cni", "macvlan"])
_METAS = st.lists(st.sampled_from(META_TYPES), max_size=2)


@st.composite
def spec_config(draw: st.DrawFn) -> str:
    """A NAD's spec.config text: a config, or a config list of a plugin and meta plugins; plain
    (canonical keys, exact repeats) or tricky (variant spellings and folds too), half and half."""
    head = f'"cniVersion":"{CNI_VERSION}","name":"{NAD}"'
    tricky = draw(_COIN)
    if draw(_COIN):
        body = plugin_object(draw, draw(KINDS), tricky)
        return "{" + head + "," + body[1:]
    kinds = [draw(KINDS), *draw(_METAS)]
    plugins = ",".join(plugin_object(draw, kind, tricky) for kind in kinds)
    return "{" + head + ',"plugins":[' + plugins + "]}"


@st.composite
def cni_args(draw: st.DrawFn) -> dict[str, object] | None:
    """A pod author's `cni-args` (parsed from the annotation's JSON: a dict, no repeated key)."""
    if draw(_QUARTER) > 0:
        return None
    tricky = draw(_COIN)
    chosen: dict[str, object] = {}
    if draw(_COIN):
        chosen[spelled(draw, "sysctl", tricky)] = dict.fromkeys(draw(_SYSCTL_SETS), "1")
    if draw(_COIN):
        chosen[spelled(draw, "ips", tricky)] = json.loads(draw(IPS))
    if draw(_COIN):
        chosen[spelled(draw, "mac", tricky)] = "02:00:00:00:00:0a"
    return chosen or None


class Case(NamedTuple):
    spec: str
    cni_args: dict[str, object] | None
    rules: str


CASES = st.builds(Case, spec_config(), cni_args(), st.sampled_from(sorted(RULES)))
BATCH = 50
BATCHES = 40  # 2,000 configs a run
FAILED = "batches with a config the plugins read outside the policy"


# --- the property ----------------------------------------------------------------------------


@pytest.fixture
def mix() -> Iterator[Counter[str]]:
    """How the generated configs fared; after the property, checked to be a healthy mix (a
    property over configs that are all refused, or that never spell a key otherwise, proves
    nothing)."""
    seen: Counter[str] = Counter()
    yield seen
    if seen[FAILED]:
        return  # the property failed: it says why, and the run stopped short
    total = seen["accepted"] + seen["refused"] + seen["invalid"]
    assert total >= BATCH * BATCHES, seen
    assert seen["accepted"] >= total // 10, seen
    assert seen["refused"] >= total // 10, seen
    for kind in ("spells a checked key otherwise", "has a repeated key", "has an escape"):
        assert seen[kind] >= total // 20, seen
    for kind in ("accepted with cni-args", "accepted as a config list", "accepted with ipam"):
        assert seen[kind] > 0, seen


def _policy(rules: delegate_policy.DelegateRules) -> delegate_policy.DelegatePolicy:
    return delegate_policy.DelegatePolicy(rules=rules)


@pytest.mark.req("SEC-KEYS")
@pytest.mark.req("SEC-DELEGATE")
@pytest.mark.req("SEC-NODE")
@settings(
    max_examples=BATCHES,
    deadline=None,
    # No shrinking: a failure already names each config of its batch the plugins would read
    # outside the policy, with what they read; shrinking batches of 50 through the decoder
    # takes minutes.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # `mix` counts across examples, on purpose
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(cases=st.lists(CASES, min_size=BATCH, max_size=BATCH))
def test_what_the_daemon_accepts_the_go_plugins_read_within_the_policy(
    cnidecode: Decoder, mix: Counter[str], cases: list[Case]
) -> None:
    judged = [judge(c.spec, c.cni_args, _policy(RULES[c.rules])) for c in cases]
    accepted = [(case, j) for case, j in zip(cases, judged, strict=True) if not j.refused]
    for case, j in zip(cases, judged, strict=True):
        mix["accepted" if not j.refused else "refused" if j.stdin else "invalid"] += 1
        mix.update(_traits(case, accepted=not j.refused))
    readings = cnidecode.read([j.stdin for _, j in accepted])
    failures = []
    for (case, j), reading in zip(accepted, readings, strict=True):
        outside = readings_outside(j, reading, RULES[case.rules], _policy(FRESH).protected)
        if outside:
            failures.append(f"{case}\n  read: {reading}\n  outside: {outside}")
    if failures:
        mix[FAILED] += 1
    assert not failures, "\n".join(failures)


_CANONICAL = {key.upper(): key for es in PLUGIN_ENTRIES.values() for key in (e.key for e in es)}
_CANONICAL.update(
    {k.upper(): k for k in ("type", "ipam", "args", "cni", "sysctl", "dataDir", "deviceID", "ips")}
)


def _go_fold(key: str) -> str:
    return key.replace(LONG_S, "s").replace(KELVIN, "k").upper()


def _keys(node: object) -> Iterator[str]:
    if isinstance(node, list):
        for item in node:
            yield from _keys(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _keys(value)


def _repeats_a_key(text: str) -> bool:
    """Whether some object of `text` writes a key twice (exactly: json.loads keeps the last)."""
    repeated = False

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeated
        repeated = repeated or len({key for key, _ in pairs}) < len(pairs)
        return dict(pairs)

    json.loads(text, object_pairs_hook=pairs_hook)
    return repeated


def _traits(case: Case, *, accepted: bool) -> list[str]:
    """What a generated config tries, for the mix: its keys as Python reads them, and its text."""
    parsed = json.loads(case.spec)
    keys = [*_keys(parsed), *_keys(case.cni_args)]
    traits = []
    if any(_CANONICAL.get(_go_fold(k), k) != k for k in keys):
        traits.append("spells a checked key otherwise")
    if "\\u" in case.spec:
        traits.append("has an escape")
    if _repeats_a_key(case.spec):
        traits.append("has a repeated key")
    if accepted:
        if case.cni_args:
            traits.append("accepted with cni-args")
        if "plugins" in parsed:
            traits.append("accepted as a config list")
        if "ipam" in json.dumps(parsed):
            traits.append("accepted with ipam")
    return traits


# --- the attacks of issue 27, each by name --------------------------------------------------


class Named(NamedTuple):
    spec: str
    reads: tuple[int, str, object]  # (plugin index, reading key, value) the plugin reads
    rules: delegate_policy.DelegateRules = STRICT
    cni_args: dict[str, object] | None = None


def _conf(**keys: object) -> str:
    return json.dumps({"cniVersion": CNI_VERSION, "name": NAD, **keys}, ensure_ascii=False)


def _list(*plugins: object) -> str:
    return json.dumps({"cniVersion": CNI_VERSION, "name": NAD, "plugins": plugins})


_MACVLAN = {"type": "macvlan", "master": "na-ok1"}
_RANGE = {"type": "host-local", "subnet": "10.1.0.0/24"}
_KERNEL = {"kernel.core_pattern": "|/tmp/x"}
_UPLINK_PCI = "0000:00:1f.6"

NAMED: dict[str, Named] = {
    "device-DEVICE": Named(
        '{"cniVersion":"1.0.0","name":"net","type":"host-device","device":"dev-ok",'
        '"DEVICE":"uplink"}',
        (0, "device", "uplink"),
    ),
    "Device": Named(_conf(type="host-device", Device="uplink"), (0, "device", "uplink")),
    "HWADDR": Named(
        _conf(type="host-device", device="dev-ok", HWADDR="02:00:00:00:00:01"),
        (0, "hwaddr", "02:00:00:00:00:01"),
    ),
    "PCIBUSID": Named(
        _conf(type="host-device", device="dev-ok", PCIBUSID=_UPLINK_PCI),
        (0, "pciBusID", _UPLINK_PCI),
    ),
    "RuntimeConfig.DeviceID": Named(
        _conf(type="host-device", device="dev-ok", RuntimeConfig={"DeviceID": _UPLINK_PCI}),
        (0, "deviceID", _UPLINK_PCI),
    ),
    "kelvin-kernelpath": Named(
        '{"cniVersion":"1.0.0","name":"net","type":"host-device","device":"dev-ok",'
        '"\\u212aernelpath":"/sys/devices/pci0000:00/0000:00:1f.6"}',
        (0, "kernelpath", "/sys/devices/pci0000:00/0000:00:1f.6"),
    ),
    "ipam-TYPE": Named(
        _conf(**_MACVLAN, ipam={**_RANGE, "TYPE": "unlisted-ipam"}),
        (0, "ipamType", "unlisted-ipam"),
    ),
    "ipam-DataDir": Named(
        _conf(**_MACVLAN, ipam={**_RANGE, "DataDir": "/etc/cni/net.d"}),
        (0, "ipam", "/etc/cni/net.d"),
        FRESH,
    ),
    "tuning-DataDir": Named(
        _list(_MACVLAN, {"type": "tuning", "DataDir": "/etc/x"}), (1, "dataDir", "/etc/x")
    ),
    "MASTER": Named(_conf(**_MACVLAN, MASTER="eth0"), (0, "master", "eth0")),
    "long-s-master": Named(_conf(**_MACVLAN, **{f"ma{LONG_S}ter": "eth0"}), (0, "master", "eth0")),
    "escaped-long-s-master": Named(
        '{"cniVersion":"1.0.0","name":"net","type":"macvlan","master":"na-ok1",'
        '"ma\\u017fter":"eth0"}',
        (0, "master", "eth0"),
    ),
    "BRIDGE": Named(_conf(type="bridge", bridge="br-ok", BRIDGE="cni0"), (0, "bridge", "cni0")),
    "Sysctl": Named(
        _list(_MACVLAN, {"type": "tuning", "sysctl": {}, "Sysctl": _KERNEL}),
        (1, "sysctl", "kernel.core_pattern"),
        FRESH,
    ),
    "long-s-sysctl": Named(
        _list(_MACVLAN, {"type": "tuning", f"{LONG_S}ysctl": _KERNEL}),
        (1, "sysctl", "kernel.core_pattern"),
        FRESH,
    ),
    "cni-args-Sysctl": Named(
        _list(_MACVLAN, {"type": "tuning", "sysctl": {"net.core.somaxconn": "1"}}),
        (1, "sysctl", "kernel.core_pattern"),
        FRESH,
        {"Sysctl": _KERNEL},
    ),
    "args-CNI-sysctl": Named(
        _list(_MACVLAN, {"type": "tuning", "sysctl": {}, "args": {"CNI": {"sysctl": _KERNEL}}}),
        (1, "sysctl", "kernel.core_pattern"),
        FRESH,
    ),
}


def _read(reading: Reading, key: str) -> object:
    if key == "ipam":
        return reading["ipam"]["dataDir"]
    return reading[key]


@pytest.mark.req("SEC-KEYS")
@pytest.mark.parametrize("name", sorted(NAMED))
def test_an_attack_of_the_issue_the_go_plugin_would_read_is_refused(
    cnidecode: Decoder, name: str
) -> None:
    case = NAMED[name]
    judged = judge(case.spec, case.cni_args, _policy(case.rules))
    assert judged.stdin, judged.refused
    [reading] = cnidecode.read([judged.stdin])
    index, key, value = case.reads
    plugin = reading["plugins"][index]
    # The attack is real: this is what the Go plugin takes from the config as it would run.
    got = _read(plugin, key)
    assert got == value or (isinstance(got, dict) and value in got), plugin
    protected = _policy(case.rules).protected
    assert readings_outside(judged, reading, case.rules, protected), reading
    # And the daemon does not run it.
    assert judged.refused, f"accepted; the plugins would read {reading}"


@pytest.mark.req("SEC-KEYS")
@pytest.mark.req("SEC-DELEGATE")
@pytest.mark.parametrize("attack", attack_corpus.ATTACKS, ids=lambda a: a.name)
def test_an_attack_of_the_corpus_the_daemon_accepts_the_plugins_read_within_the_policy(
    cnidecode: Decoder, attack: attack_corpus.Attack
) -> None:
    policy = attack_corpus.corpus_policy()
    spec = attack_corpus.config_text(attack)
    judged = judge(spec, attack.cni_args, policy, attack.labels)
    if judged.refused:
        return
    rules = policy.rules_for(NAMESPACE, {**attack.labels})
    [reading] = cnidecode.read([judged.stdin])
    assert not readings_outside(judged, reading, rules, policy.protected), reading


@pytest.mark.req("SEC-KEYS")
def test_a_repeated_key_reaches_no_plugin_twice(cnidecode: Decoder) -> None:
    """Go fills a struct field given twice from both objects (the first one's keys stay unless
    the second has them), where Python's json keeps the last object only: the text below would
    have host-local write into /etc. The daemon never hands a plugin the NAD's text: it writes
    what it parsed (`runtime.invoke`), so the plugin sees the one `ipam` the policy judged."""
    text = (
        '{"cniVersion":"1.0.0","name":"net","type":"macvlan","master":"na-ok1",'
        '"ipam":{"type":"host-local","dataDir":"/etc/cni/net.d"},'
        '"ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}'
    )
    verbatim, as_run = cnidecode.read([text, judge(text, None, _policy(STRICT)).stdin])
    assert verbatim["plugins"][0]["ipam"]["dataDir"] == "/etc/cni/net.d"
    assert as_run["plugins"][0]["ipam"]["dataDir"] == ""
    assert not judge(text, None, _policy(STRICT)).refused


# --- the decoder itself ----------------------------------------------------------------------


@pytest.mark.req("SEC-KEYS")
def test_the_declared_plugin_structs_match_the_plugins_source(cnidecode: Decoder) -> None:
    """cnidecode's copies of the plugins' config structs have every JSON name of the plugins'
    own, in order, with the same kind of Go type (go/ast against reflect)."""
    done = cnidecode.drift()
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_decoder_is_built_from_the_modules_go_mod_names(cnidecode: Decoder) -> None:
    required = dict(
        line.split()[:2]
        for line in (GO_DIR / "go.mod").read_text(encoding="utf-8").splitlines()
        if line.startswith("\tgithub.com/containernetworking/")
    )
    versions = cnidecode.modules()
    assert versions[CNI_MODULE] == required[CNI_MODULE]
    assert versions[PLUGINS_MODULE] == required[PLUGINS_MODULE]


def test_the_decoder_reads_keys_as_go_does(cnidecode: Decoder) -> None:
    """The folding the property relies on, seen once: case, the long s, the Kelvin sign, the
    last key winning, an escape, a config list, a plugin that cannot decode its config reading
    nothing."""
    configs = [
        '{"type":"macvlan","MASTER":"a","Ma\\u017fter":"b"}',
        f'{{"type":"host-device","{KELVIN}ERNELPATH":"/k","device":"x","Device":"y"}}',
        '{"plugins":[{"type":"vlan","master":"m"},{"type":"portmap","snat":"no"}]}',
        '{"type":"bridge"}',
        "[]",
    ]
    macvlan, host_device, listed, bridge, bad = cnidecode.read(configs)
    assert macvlan["plugins"][0]["master"] == "b"
    assert host_device["plugins"][0]["kernelpath"] == "/k"
    assert host_device["plugins"][0]["device"] == "y"
    assert [p["exec"] for p in listed["plugins"]] == ["vlan", "portmap"]
    assert "error" in listed["plugins"][1]
    assert bridge["plugins"][0]["bridge"] == "cni0"
    assert "error" in bad
