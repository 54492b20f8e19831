"""MultiNetworkPolicy objects, parsed and validated (POL-CRD, POL-PEERS, POL-PORTS, POL-IPBLOCK).

Every problem of a policy is collected and reported at once, naming the policy and quoting the
offending values; a caller skips an invalid policy and keeps the others.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from netattach import names
from netattach.cluster.model import (
    API_VERSIONS,
    POLICY,
    KubeObject,
    meta,
    name_of,
    namespace_of,
    uid_of,
)
from netattach.cni import errors

POLICY_FOR_ANNOTATION: Final = "k8s.v1.cni.cncf.io/policy-for"
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"

Direction = Literal["ingress", "egress"]
DIRECTIONS: Final[tuple[Direction, Direction]] = ("ingress", "egress")
PROTOCOLS: Final = ("TCP", "UDP", "SCTP")
OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
AddressRange = tuple[int, int, int]  # (IP version, first address, last address) as integers

_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
_PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")
# A label key's name part; its prefix, when it has one, is a DNS-1123 subdomain (`_is_label_key`).
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One `matchExpressions` entry."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels  # DoesNotExist


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector; the empty selector matches everything."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


@dataclass(frozen=True, slots=True)
class IPBlock:
    cidr: IPNetwork
    excepts: tuple[IPNetwork, ...] = ()

    def networks(self) -> tuple[IPNetwork, ...]:
        """The CIDR minus every exception, as disjoint networks in address order."""
        return _block_networks(self.cidr, self.excepts)

    def ranges(self) -> tuple[AddressRange, ...]:
        """The CIDR minus every exception, as disjoint integer ranges in address order."""
        return _block_ranges(self.cidr, self.excepts)


@dataclass(frozen=True, slots=True)
class Peer:
    """A `from`/`to` entry: either an ipBlock, or pod and/or namespace selectors."""

    pod_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    ip_block: IPBlock | None = None


@dataclass(frozen=True, slots=True)
class PortSpec:
    """A `ports` entry: `port` None means every port of the protocol."""

    protocol: str = "TCP"
    port: int | str | None = None
    end_port: int | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    """An ingress or egress rule: empty `peers` = every peer, empty `ports` = every port."""

    peers: tuple[Peer, ...] = ()
    ports: tuple[PortSpec, ...] = ()
    # Whether a port is named: each destination resolves it itself (read on every compile of
    # every rule, so worked out once).
    named: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "named", any(isinstance(p.port, str) for p in self.ports))


@dataclass(frozen=True, slots=True)
class Policy:
    namespace: str
    name: str
    uid: str
    networks: tuple[str, ...]  # "ns/net"
    pod_selector: LabelSelector
    policy_types: tuple[Direction, ...]
    ingress: tuple[Rule, ...] = ()
    egress: tuple[Rule, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def rules(self, direction: Direction) -> tuple[Rule, ...]:
        return self.ingress if direction == "ingress" else self.egress


def subtract(cidr: IPNetwork, excepts: Iterable[IPNetwork]) -> tuple[IPNetwork, ...]:
    """`cidr` minus all of `excepts` (any number, overlapping or not), collapsed and sorted.

    Computed on integer ranges: cutting an /128 out of an /64 with `address_exclude` builds 64
    networks through the library one by one, which a policy corpus does thousands of times.
    """
    return range_networks(_subtract(cidr, excepts))


@functools.lru_cache(maxsize=4096)
def _block_ranges(cidr: IPNetwork, excepts: tuple[IPNetwork, ...]) -> tuple[AddressRange, ...]:
    return _subtract(cidr, excepts)


def _subtract(cidr: IPNetwork, excepts: Iterable[IPNetwork]) -> tuple[AddressRange, ...]:
    remaining = [(int(cidr.network_address), int(cidr.broadcast_address))]
    for exc in excepts:
        if exc.version != cidr.version:
            continue
        lo, hi = int(exc.network_address), int(exc.broadcast_address)
        nxt: list[tuple[int, int]] = []
        for first, last in remaining:
            if hi < first or lo > last:
                nxt.append((first, last))
                continue
            if first < lo:
                nxt.append((first, lo - 1))
            if hi < last:
                nxt.append((hi + 1, last))
        remaining = nxt
    return tuple((cidr.version, first, last) for first, last in sorted(remaining))


@functools.lru_cache(maxsize=4096)
def _block_networks(cidr: IPNetwork, excepts: tuple[IPNetwork, ...]) -> tuple[IPNetwork, ...]:
    return subtract(cidr, excepts)


def _cidrs(version: int, first: int, last: int) -> list[IPNetwork]:
    """The fewest networks covering exactly first..last, in address order."""
    bits = 32 if version == 4 else 128
    factory: type[IPNetwork] = ipaddress.IPv4Network if version == 4 else ipaddress.IPv6Network
    out: list[IPNetwork] = []
    while first <= last:
        align = (first & -first).bit_length() - 1 if first else bits
        size = min(align, (last - first + 1).bit_length() - 1)
        out.append(factory((first, bits - size)))
        first += 1 << size
    return out


def collapse(nets: Iterable[IPNetwork]) -> tuple[IPNetwork, ...]:
    """Disjoint, sorted networks covering the same addresses (per family, IPv4 first).

    What `ipaddress.collapse_addresses` returns, computed on integer ranges: a run of
    overlapping or adjacent networks is summarized, a network alone is kept as it is (the
    common case of peers' host addresses, which the library would rebuild one by one).
    """
    ranges = sorted(
        ((n.version, int(n.network_address), int(n.broadcast_address), n) for n in nets),
        key=_range_key,
    )
    out: list[IPNetwork] = []
    run_net: IPNetwork | None = None
    single = True
    version = start = end = -1
    for v, first, last, net in ranges:
        if run_net is not None and v == version and first <= end + 1:
            if single and first >= start and last <= end:
                continue  # inside the run's only network (a duplicate host): nothing changes
            end = max(end, last)
            single = False
            continue
        if run_net is not None:
            out.extend((run_net,) if single else _cidrs(version, start, end))
        run_net, single, version, start, end = net, True, v, first, last
    if run_net is not None:
        out.extend((run_net,) if single else _cidrs(version, start, end))
    return tuple(out)


def _range_key(r: tuple[int, int, int, IPNetwork]) -> tuple[int, int, int]:
    return r[0], r[1], r[2]


def network_range(net: IPNetwork) -> AddressRange:
    return net.version, int(net.network_address), int(net.broadcast_address)


def merge_ranges(ranges: Iterable[AddressRange]) -> tuple[AddressRange, ...]:
    """Disjoint, sorted ranges covering the same addresses; adjacent ranges are joined."""
    out: list[AddressRange] = []
    for version, first, last in sorted(ranges):
        if out:
            v, start, end = out[-1]
            if v == version and first <= end + 1:
                if last > end:
                    out[-1] = (v, start, last)
                continue
        out.append((version, first, last))
    return tuple(out)


def range_networks(ranges: Iterable[AddressRange]) -> tuple[IPNetwork, ...]:
    """The fewest networks covering merged `ranges`: what `collapse` gives for the same
    addresses."""
    out: list[IPNetwork] = []
    for version, first, last in ranges:
        out.extend(_cidrs(version, first, last))
    return tuple(out)


@functools.lru_cache(maxsize=65536)
def cidr_texts(version: int, first: int, last: int) -> tuple[str, ...]:
    """The fewest networks covering first..last as text; a host is its address alone.

    Memoized: a pod's address is in many sets of many tables."""
    bits = 32 if version == 4 else 128
    out: list[str] = []
    while first <= last:
        align = (first & -first).bit_length() - 1 if first else bits
        size = min(align, (last - first + 1).bit_length() - 1)
        if version == 4:
            text = f"{first >> 24}.{(first >> 16) & 255}.{(first >> 8) & 255}.{first & 255}"
        else:
            text = str(ipaddress.IPv6Address(first))
        out.append(text if size == 0 else f"{text}/{bits - size}")
        first += 1 << size
    return tuple(out)


def parse_policy_for(value: str, namespace: str) -> tuple[str, ...]:
    """The `policy-for` annotation as sorted `ns/net` names; bare names are in `namespace`."""
    networks, problems = _policy_for(value, namespace)
    if problems:
        raise errors.InvalidNetworkConfigError(
            f"invalid {POLICY_FOR_ANNOTATION} annotation", "; ".join(problems)
        )
    return networks


def _policy_for(value: str, namespace: str) -> tuple[tuple[str, ...], list[str]]:
    problems: list[str] = []
    networks: set[str] = set()
    for raw_item in value.split(","):
        item = raw_item.strip()
        if not item:
            problems.append(f"{POLICY_FOR_ANNOTATION} {value!r} has an empty entry")
            continue
        parts = item.split("/")
        if len(parts) == 1:
            parts = [namespace, parts[0]]
        if len(parts) != 2 or not names.is_label(parts[0]) or not names.is_subdomain(parts[1]):
            problems.append(f"{POLICY_FOR_ANNOTATION} entry {item!r} is not 'net' or 'ns/net'")
            continue
        networks.add("/".join(parts))
    return tuple(sorted(networks)), problems


class _Parser:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def bad(self, where: str, msg: str) -> None:
        self.problems.append(f"{where}: {msg}")

    def selector(self, raw: object, where: str) -> LabelSelector:
        if raw is None:
            return LabelSelector()
        if not isinstance(raw, Mapping):
            self.bad(where, f"must be a label selector object, not {raw!r}")
            return LabelSelector()
        for key in raw:
            if key not in ("matchLabels", "matchExpressions"):
                self.bad(where, f"unknown field {key!r}")
        labels: list[tuple[str, str]] = []
        ml = raw.get("matchLabels") or {}
        if not isinstance(ml, Mapping):
            self.bad(f"{where}.matchLabels", f"must be a map, not {ml!r}")
            ml = {}
        for k, v in ml.items():
            if not _is_label_key(k):
                self.bad(f"{where}.matchLabels", f"invalid label key {k!r}")
            elif not isinstance(v, str) or not _LABEL_VALUE.match(v):
                self.bad(f"{where}.matchLabels", f"invalid value {v!r} for {k!r}")
            else:
                labels.append((k, v))
        exprs: list[Requirement] = []
        me = raw.get("matchExpressions") or []
        if not isinstance(me, list):
            self.bad(f"{where}.matchExpressions", f"must be a list, not {me!r}")
            me = []
        for i, e in enumerate(me):
            req = self.requirement(e, f"{where}.matchExpressions[{i}]")
            if req is not None:
                exprs.append(req)
        return LabelSelector(tuple(sorted(labels)), tuple(exprs))

    def requirement(self, raw: object, where: str) -> Requirement | None:
        if not isinstance(raw, Mapping):
            self.bad(where, f"must be an object, not {raw!r}")
            return None
        key, op, values = raw.get("key"), raw.get("operator"), raw.get("values")
        ok = True
        if not _is_label_key(key):
            self.bad(where, f"invalid key {key!r}")
            ok = False
        if op not in OPERATORS:
            self.bad(where, f"operator {op!r} is not one of {', '.join(OPERATORS)}")
            return None
        if values is None:
            values = []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            self.bad(where, f"values must be a list of strings, not {values!r}")
            return None
        if op in ("In", "NotIn") and not values:
            self.bad(where, f"operator {op!r} needs at least one value")
            ok = False
        if op in ("Exists", "DoesNotExist") and values:
            self.bad(where, f"operator {op!r} takes no values, got {values!r}")
            ok = False
        if not ok or not isinstance(key, str):
            return None
        return Requirement(key, str(op), tuple(sorted(set(values))))

    def network(self, raw: object, where: str) -> IPNetwork | None:
        if not isinstance(raw, str):
            self.bad(where, f"must be a CIDR string, not {raw!r}")
            return None
        try:
            return ipaddress.ip_network(raw, strict=False)
        except ValueError:
            self.bad(where, f"{raw!r} is not a valid CIDR")
            return None

    def ip_block(self, raw: object, where: str) -> IPBlock | None:
        if not isinstance(raw, Mapping):
            self.bad(where, f"must be an object, not {raw!r}")
            return None
        cidr = self.network(raw.get("cidr"), f"{where}.cidr")
        exc_raw = raw.get("except") or []
        if not isinstance(exc_raw, list):
            self.bad(f"{where}.except", f"must be a list, not {exc_raw!r}")
            return None
        excepts: list[IPNetwork] = []
        for i, e in enumerate(exc_raw):
            net = self.network(e, f"{where}.except[{i}]")
            if net is None or cidr is None:
                continue
            if net.version != cidr.version or not net.subnet_of(cidr):  # type: ignore[arg-type]
                self.bad(f"{where}.except[{i}]", f"{e!r} is not inside cidr {raw.get('cidr')!r}")
                continue
            excepts.append(net)
        if cidr is None:
            return None
        return IPBlock(cidr, tuple(excepts))

    def peer(self, raw: object, where: str) -> Peer | None:
        if not isinstance(raw, Mapping) or not raw:
            self.bad(where, f"must be a non-empty peer object, not {raw!r}")
            return None
        for key in raw:
            if key not in ("podSelector", "namespaceSelector", "ipBlock"):
                self.bad(where, f"unknown field {key!r}")
        if "ipBlock" in raw:
            if len(raw) > 1:
                self.bad(where, "ipBlock cannot be combined with podSelector or namespaceSelector")
            block = self.ip_block(raw["ipBlock"], f"{where}.ipBlock")
            return None if block is None else Peer(ip_block=block)
        pods = raw.get("podSelector")
        nss = raw.get("namespaceSelector")
        return Peer(
            pod_selector=None if pods is None else self.selector(pods, f"{where}.podSelector"),
            namespace_selector=None
            if nss is None
            else self.selector(nss, f"{where}.namespaceSelector"),
        )

    def port(self, raw: object, where: str) -> PortSpec | None:
        if not isinstance(raw, Mapping):
            self.bad(where, f"must be an object, not {raw!r}")
            return None
        protocol = raw.get("protocol", "TCP")
        port = raw.get("port")
        end = raw.get("endPort")
        ok = True
        if protocol not in PROTOCOLS:
            self.bad(where, f"protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
            ok = False
        if isinstance(port, bool) or not (port is None or isinstance(port, int | str)):
            self.bad(where, f"port {port!r} must be a number or a name")
            ok = False
        elif isinstance(port, int) and not 1 <= port <= 65535:
            self.bad(where, f"port {port!r} is not in 1-65535")
            ok = False
        elif isinstance(port, str) and not _PORT_NAME.match(port):
            self.bad(where, f"port name {port!r} is not a valid port name")
            ok = False
        if end is not None:
            if isinstance(end, bool) or not isinstance(end, int) or not 1 <= end <= 65535:
                self.bad(where, f"endPort {end!r} is not a number in 1-65535")
                ok = False
            elif not isinstance(port, int):
                self.bad(where, f"endPort {end!r} needs a numeric port, got {port!r}")
                ok = False
            elif end < port:
                self.bad(where, f"endPort {end!r} is less than port {port!r}")
                ok = False
        if not ok:
            return None
        return PortSpec(str(protocol), port, end)

    def rules(self, raw: object, where: str, peers_key: str) -> tuple[Rule, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.bad(where, f"must be a list, not {raw!r}")
            return ()
        out: list[Rule] = []
        for i, raw_rule in enumerate(raw):
            w = f"{where}[{i}]"
            r = {} if raw_rule is None else raw_rule
            if not isinstance(r, Mapping):
                self.bad(w, f"must be an object, not {r!r}")
                continue
            for key in r:
                if key not in (peers_key, "ports"):
                    self.bad(w, f"unknown field {key!r}")
            peers_raw = r.get(peers_key) or []
            ports_raw = r.get("ports") or []
            if not isinstance(peers_raw, list):
                self.bad(f"{w}.{peers_key}", f"must be a list, not {peers_raw!r}")
                peers_raw = []
            if not isinstance(ports_raw, list):
                self.bad(f"{w}.ports", f"must be a list, not {ports_raw!r}")
                ports_raw = []
            peers = [self.peer(p, f"{w}.{peers_key}[{j}]") for j, p in enumerate(peers_raw)]
            ports = [self.port(p, f"{w}.ports[{j}]") for j, p in enumerate(ports_raw)]
            out.append(
                Rule(
                    tuple(p for p in peers if p is not None),
                    tuple(p for p in ports if p is not None),
                )
            )
        return tuple(out)


def _is_label_key(key: object) -> bool:
    """A label key: a name of at most 63 characters, after a DNS-1123 subdomain and a '/'."""
    if not isinstance(key, str):
        return False
    prefix, slash, name = key.rpartition("/")
    return (not slash or names.is_subdomain(prefix)) and _LABEL_NAME.fullmatch(name) is not None


def _check_metadata(p: _Parser, obj: KubeObject) -> tuple[str, ...]:
    """Report what is wrong with the policy's metadata; the networks `policy-for` names."""
    ns, name, uid = namespace_of(obj), name_of(obj), uid_of(obj)
    # Raw input may hold anything where strings belong: each is reported, never raised on.
    if not names.is_label(ns):
        p.bad("metadata.namespace", f"{ns!r} is not a namespace name")
    if not names.is_subdomain(name):
        p.bad("metadata.name", f"{name!r} is not a valid name")
    if not isinstance(uid, str) or not _UID.match(uid):
        p.bad("metadata.uid", f"{uid!r} is not a valid UID")
    networks: tuple[str, ...] = ()
    annotations = meta(obj).get("annotations")
    pf = annotations.get(POLICY_FOR_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(annotations, Mapping | None):
        p.bad("metadata.annotations", f"must be a mapping of strings, not {annotations!r}")
    elif pf is not None and not isinstance(pf, str):
        p.bad(f"metadata.annotations[{POLICY_FOR_ANNOTATION!r}]", f"{pf!r} is not a string")
    elif pf is None or not pf.strip():
        p.bad("metadata.annotations", f"{POLICY_FOR_ANNOTATION!r} is missing or empty")
    else:
        networks, more = _policy_for(pf, ns)
        p.problems.extend(more)
    return networks


def parse_policy(obj: KubeObject) -> Policy:
    """The policy, or `InvalidNetworkConfigError` listing every problem of it."""
    ns, name, uid = namespace_of(obj), name_of(obj), uid_of(obj)
    label = f"MultiNetworkPolicy {ns or '?'}/{name or '?'}"
    if not isinstance(ns, str) or not isinstance(name, str):
        label = f"MultiNetworkPolicy {ns!r}/{name!r}"
    p = _Parser()
    kind, api = obj.get("kind"), obj.get("apiVersion")
    if kind is not None and kind != POLICY:
        p.bad("kind", f"{kind!r} is not {POLICY!r}")
    if api is not None and api != API_VERSIONS[POLICY]:
        p.bad("apiVersion", f"{api!r} is not {API_VERSIONS[POLICY]!r}")
    networks = _check_metadata(p, obj)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        p.bad("spec", f"must be an object, not {spec!r}")
        spec = {}
    for key in spec:
        if key not in ("podSelector", "policyTypes", "ingress", "egress"):
            p.bad("spec", f"unknown field {key!r}")
    if "podSelector" not in spec:
        p.bad("spec.podSelector", "is required (use {} to select every pod)")
    selector = p.selector(spec.get("podSelector"), "spec.podSelector")
    types_raw = spec.get("policyTypes")
    types: list[Direction] = []
    if types_raw is None:
        types = ["ingress"]
        if spec.get("egress") is not None:
            types.append("egress")
    elif not isinstance(types_raw, list):
        p.bad("spec.policyTypes", f"must be a list, not {types_raw!r}")
    else:
        for t in types_raw:
            if t == "Ingress":
                types.append("ingress")
            elif t == "Egress":
                types.append("egress")
            else:
                p.bad("spec.policyTypes", f"{t!r} is not 'Ingress' or 'Egress'")
    ingress = p.rules(spec.get("ingress"), "spec.ingress", "from")
    egress = p.rules(spec.get("egress"), "spec.egress", "to")
    if p.problems:
        raise errors.InvalidNetworkConfigError(f"invalid {label}", "; ".join(p.problems))
    return Policy(
        namespace=ns,
        name=name,
        uid=uid,
        networks=networks,
        pod_selector=selector,
        policy_types=tuple(d for d in DIRECTIONS if d in types),
        ingress=ingress,
        egress=egress,
    )


def parse_policies(
    objs: Sequence[KubeObject],
) -> tuple[tuple[Policy, ...], tuple[errors.InvalidNetworkConfigError, ...]]:
    """The valid policies (sorted by namespace, name, UID) and the errors of the invalid ones."""
    good: list[Policy] = []
    bad: list[errors.InvalidNetworkConfigError] = []
    for obj in objs:
        try:
            good.append(parse_policy(obj))
        except errors.InvalidNetworkConfigError as exc:
            bad.append(exc)
    good.sort(key=lambda pol: (pol.namespace, pol.name, pol.uid))
    return tuple(good), tuple(bad)
