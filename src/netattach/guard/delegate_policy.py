"""The delegate policy: what a NetworkAttachmentDefinition may make netattach run (SEC-DELEGATE).

Whoever may create a NAD chooses a plugin that runs as root on the node, and its arguments. The
operator's settings key `delegatePolicy` bounds that choice; this module turns it into values:

    DelegatePolicy
    ├── enabled                 false: every NAD is trusted (netattach before the policy)
    ├── rules: DelegateRules    the cluster-wide lists
    └── namespaces: (NamespaceRules, ...)
            selector            a label selector on the pod's Namespace
            rules               the cluster-wide lists with the keys this entry names replaced

    DelegateRules               each an allowlist (`globs.Patterns` / `globs.Prefixes`)
        types       every plugin's `type` and every nested `ipam.type`
        master      `master` of macvlan, ipvlan and vlan (macvlan/ipvlan without one use the
                    node's default-route interface: allowed only by a list that allows anything)
        bridge      `bridge` of bridge (without one the plugin uses `cni0`, checked as such)
        device      `device` of host-device
        pciBusID    `pciBusID` (and `runtimeConfig.deviceID`) of host-device, as the NAD writes
                    it (a device the kubelet allocated to the pod is the operator's grant)
        resourceName  the NAD's `k8s.v1.cni.cncf.io/resourceName` annotation (DEV-RESOURCE)
        dataDir     `dataDir` of any plugin and of its `ipam` (host-local, tuning)
        sysctl      the keys of tuning's `sysctl`
        passthruMaster  the master a macvlan takes whole (`mode: passthru`)    (SEC-NODE,
        gatewayBridge   the bridge of `isGateway`/`isDefaultGateway`/`ipMasq`   checked by
        reservedRanges  CIDRs (and `node`) no address a NAD hands out may lie in  node_rules)
        nodeChanges     the node changes that outlive a pod a NAD may make (SEC-VALUES):
                        `NODE_CHANGES` by name, none by default

The first namespace entry whose selector takes the pod's namespace decides its lists; a namespace
no entry takes gets the cluster-wide ones. `parse_policy` checks a raw mapping in the settings'
manner: every problem collected as `key.path: reason, got value`.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping

from netattach.guard import globs
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

# The reference plugins that only make interfaces, addresses and rules for the pod (issue 16):
# anything else, `host-device` first, runs only when the operator lists it. `portmap` is not
# among them (SEC-NODE): it opens the node's own ports (DNAT of a host port into the pod), so
# listing it in `types` is the grant of host ports. Nor is `firewall` (SEC-VALUES): its chains
# (CNI-FORWARD, CNI-ADMIN, the isolation chains) and their jumps stay in the node's iptables
# after DEL, so listing it is the grant of those.
DEFAULT_TYPES: Final = (
    "bridge",
    "macvlan",
    "ipvlan",
    "ptp",
    "vlan",
    "host-local",
    "static",
    "dhcp",
    "tuning",
    "bandwidth",
    "sbr",
    "vrf",
    # netattach's own IPAM (ipam/): never exec'd, the daemon gives `static` its addresses
    "netattach",
)
# Which host interface a macvlan/ipvlan/vlan hangs off depends on the node's NICs, which a
# cluster-wide default cannot know: any, until the operator names them.
DEFAULT_MASTER: Final = ("*",)
# Which bridge is the cluster's own depends on its default network, which a built-in default
# cannot know: any, until the operator excludes it (deploy/configmap.yaml excludes the usual
# ones: bridge CNI's default cni0, kubenet's cbr0, Docker's docker0, kube-router's kube-bridge).
DEFAULT_BRIDGE: Final = ("*",)
# host-device moves a host interface into the pod: none, until the operator names one.
DEFAULT_DEVICE: Final = ()
DEFAULT_PCI_BUS_ID: Final = ()
# The device-plugin resources (and DRA claims) a NAD's `resourceName` may name: any, since a
# device reaches an attachment only when the kubelet allocated it to the pod (the operator's
# grant, through the pod's resource requests and quotas). An operator narrows it per namespace.
DEFAULT_RESOURCE_NAME: Final = ("*",)
# Anywhere but where a file written as root changes the node: its configuration (/etc, where the
# runtime reads CNI configs), its programs and kernel interfaces, and the state of the kubelet,
# etcd, the container runtime and netattach itself. docs/security.md shows a narrower list.
DEFAULT_DATA_DIR: Final = (
    "/",
    "!/etc",
    "!/usr",
    "!/bin",
    "!/sbin",
    "!/lib",
    "!/lib32",
    "!/lib64",
    "!/boot",
    "!/root",
    "!/proc",
    "!/sys",
    "!/dev",
    "!/opt",
    "!/var/lib/kubelet",
    "!/var/lib/etcd",
    "!/var/lib/containerd",
    "!/var/lib/netattach",
    "!/run/containerd",
    # Where a DaemonSet mounts the node's own directories (deploy/daemonset.yaml's /host/...).
    "!/host",
)
# Sysctls of the pod's own network namespace only.
DEFAULT_SYSCTL: Final = ("net.*",)
# SEC-NODE. Masters a macvlan may take whole (`mode: passthru`): none, until the operator names
# them (passthru on the node's uplink cuts the node off).
DEFAULT_PASSTHRU_MASTER: Final = ()
# Bridges on which a NAD may put its gateway on the node or masquerade for its pods
# (`isGateway`, `isDefaultGateway`, `ipMasq`): none, until the operator names them.
DEFAULT_GATEWAY_BRIDGE: Final = ()
# In `reservedRanges`: the node's own addresses and default gateways, read on the node at ADD.
NODE_RANGE: Final = "node"
# Where no address a NAD hands out may lie: the node's own, and the cloud metadata service
# (a pod or gateway there answers the node's own metadata requests). Pod and service CIDRs are
# the cluster's, which a built-in default cannot know: deploy/configmap.yaml names kubeadm's.
DEFAULT_RESERVED_RANGES: Final = (NODE_RANGE, "169.254.169.254/32", "fd00:ec2::254/128")
# SEC-VALUES: what a plugin the defaults allow would change on the node and never undo, each by
# the name `nodeChanges` grants it with. None is granted by default.
NODE_CHANGES: Final = {
    "forwarding": "net.ipv4.ip_forward / net.ipv6.conf.all.forwarding switched on (ptp; a "
    "bridge with isGateway)",
    "bridgeUp": "an existing host bridge that is down set up (bridge)",
    "bridgePromisc": "an existing host bridge made promiscuous (bridge promiscMode)",
    "bridgeAcceptRA": "an existing host bridge's net.ipv6.conf.<bridge>.accept_ra set to 0 "
    "(bridge)",
    "bridgeMtu": "an existing host bridge's MTU lowered by a port with a smaller one (bridge mtu)",
    "macspoofchk": "the nftables table 'bridge nat' and its PREROUTING chain (bridge macspoofchk)",
    "dhcpSocket": "a connection to a node socket other than the dhcp daemon's /run/cni/dhcp.sock "
    "(dhcp daemonSocketPath)",
}
DEFAULT_NODE_CHANGES: Final = ()
# Directories no `dataDir` may name whatever the lists say (SEC-NODE): where the runtime reads
# CNI configs and plugins and keeps its cached results, and netattach's own defaults. The
# settings add netattach's directories as configured (`with_protected`).
DEFAULT_PROTECTED_DIRS: Final = (
    "/etc/cni",
    "/opt/cni/bin",
    "/usr/lib/cni",
    "/var/lib/cni/results",
    "/var/lib/cni/cache",
    "/var/lib/netattach",
    "/run/netattach",
    # The NPWG device-info files netattach hands delegates (DEV-INFO), by both its names.
    "/var/run/k8s.cni.cncf.io/devinfo",
    "/run/k8s.cni.cncf.io/devinfo",
)

# The keys of a rule set, settings spelling, in the order docs/configuration.md lists them.
RULE_KEYS: Final = (
    "types",
    "master",
    "bridge",
    "device",
    "pciBusID",
    "resourceName",
    "dataDir",
    "sysctl",
    "passthruMaster",
    "gatewayBridge",
    "reservedRanges",
    "nodeChanges",
)
POLICY_KEYS: Final = ("enabled", *RULE_KEYS, "namespaces")
NAMESPACE_KEYS: Final = ("namespaceSelector", *RULE_KEYS)
SELECTOR_KEYS: Final = ("matchLabels", "matchExpressions")
EXPRESSION_KEYS: Final = ("key", "operator", "values")
OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")
# Kubernetes sets it on every Namespace; a directory feed's namespaces get it from us.
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"

_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlevel = 3


_DEFAULTS: Final = {
    "types": globs.Patterns(DEFAULT_TYPES),
    "master": globs.Patterns(DEFAULT_MASTER),
    "bridge": globs.Patterns(DEFAULT_BRIDGE),
    "device": globs.Patterns(DEFAULT_DEVICE),
    "pciBusID": globs.Patterns(DEFAULT_PCI_BUS_ID),
    "resourceName": globs.Patterns(DEFAULT_RESOURCE_NAME),
    "sysctl": globs.Patterns(DEFAULT_SYSCTL),
    "passthruMaster": globs.Patterns(DEFAULT_PASSTHRU_MASTER),
    "gatewayBridge": globs.Patterns(DEFAULT_GATEWAY_BRIDGE),
    "nodeChanges": globs.Patterns(DEFAULT_NODE_CHANGES),
}
_DEFAULT_DATA_DIR: Final = globs.Prefixes(DEFAULT_DATA_DIR)
DEFAULT_PROTECTED: Final = globs.Prefixes(DEFAULT_PROTECTED_DIRS)


# The value types below are NamedTuples rather than frozen dataclasses: the thin plugin imports
# this module on every exec, and a dataclass costs ~0.5 ms to create (it compiles each of its
# methods), a NamedTuple a fifth of that. They are built by keyword and never changed.
class DelegateRules(NamedTuple):
    types: globs.Patterns = _DEFAULTS["types"]
    master: globs.Patterns = _DEFAULTS["master"]
    bridge: globs.Patterns = _DEFAULTS["bridge"]
    device: globs.Patterns = _DEFAULTS["device"]
    pci_bus_id: globs.Patterns = _DEFAULTS["pciBusID"]
    resource_name: globs.Patterns = _DEFAULTS["resourceName"]
    data_dir: globs.Prefixes = _DEFAULT_DATA_DIR
    sysctl: globs.Patterns = _DEFAULTS["sysctl"]
    # SEC-NODE (guard/node_rules.py): masters a macvlan may take whole, bridges that may
    # carry a gateway on the node, ranges (CIDRs, `node`) no handed-out address may lie in.
    passthru_master: globs.Patterns = _DEFAULTS["passthruMaster"]
    gateway_bridge: globs.Patterns = _DEFAULTS["gatewayBridge"]
    reserved_ranges: tuple[str, ...] = DEFAULT_RESERVED_RANGES
    # SEC-VALUES (guard/effects.py, guard/node_rules.py): `NODE_CHANGES` granted.
    node_changes: globs.Patterns = _DEFAULTS["nodeChanges"]
    # Where these lists were written, for messages: "delegatePolicy" or
    # "delegatePolicy.namespaces[0]".
    source: str = "delegatePolicy"


class Requirement(NamedTuple):
    """One `matchExpressions` entry of a namespace selector."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels  # DoesNotExist


class NamespaceSelector(NamedTuple):
    """A Kubernetes label selector; the empty selector takes every namespace."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


class NamespaceRules(NamedTuple):
    selector: NamespaceSelector
    rules: DelegateRules


class DelegatePolicy(NamedTuple):
    enabled: bool = True
    rules: DelegateRules = DelegateRules()
    namespaces: tuple[NamespaceRules, ...] = ()
    # Not a settings list: the directories of netattach and the runtime (`with_protected`).
    protected: globs.Prefixes = DEFAULT_PROTECTED

    def with_protected(self, directories: tuple[str, ...]) -> DelegatePolicy:
        """This policy with `directories` (netattach's, as its settings place them) protected
        too; each normalised, each once."""
        entries: list[str] = []
        for directory in (*DEFAULT_PROTECTED_DIRS, *directories):
            normal = globs.normal_path(directory)
            if normal and normal != "/" and not any(globs.under(normal, e) for e in entries):
                entries.append(normal)
        return self._replace(protected=globs.Prefixes(tuple(entries)))

    def rules_for(self, namespace: str, labels: Mapping[str, str]) -> DelegateRules:
        """The lists that govern the NADs used by pods of `namespace` (labelled `labels`)."""
        labels = {**labels, NAMESPACE_NAME_LABEL: namespace}
        for entry in self.namespaces:
            if entry.selector.matches(labels):
                return entry.rules
        return self.rules


# What a settings file without `delegatePolicy` gets.
DEFAULT_POLICY: Final = DelegatePolicy()


# --- parsing -----------------------------------------------------------------------------------


def parse_policy(value: object, key: str, problems: list[str]) -> DelegatePolicy | None:
    """`value` (the settings' `delegatePolicy`) as a policy; None when absent or bad (after
    appending every problem, each starting with its key path)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(
            f"{key}: must be a mapping such as {{types: [bridge, macvlan], master: [eth1]}}, "
            f"got {_show(value)}"
        )
        return None
    start = len(problems)
    _check_keys(value, POLICY_KEYS, key, problems)
    enabled = value.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        problems.append(f"{key}.enabled: must be true or false, got {_show(enabled)}")
    rules = _rules(value, key, DelegateRules(source=key), problems)
    namespaces = _namespaces(value.get("namespaces"), f"{key}.namespaces", rules, problems)
    if len(problems) > start:
        return None
    return DelegatePolicy(
        enabled=True if enabled is None else bool(enabled), rules=rules, namespaces=namespaces
    )


def _rules(
    raw: Mapping[object, object], key: str, base: DelegateRules, problems: list[str]
) -> DelegateRules:
    """`base` with each list `raw` names replaced."""

    def names(name: str, inherited: globs.Patterns) -> globs.Patterns:
        found = _entries(raw.get(name), f"{key}.{name}", problems, paths=False)
        return inherited if found is None else globs.Patterns(found)

    # In the order of RULE_KEYS, so the problems come in the order the keys are documented.
    types = names("types", base.types)
    master = names("master", base.master)
    bridge = names("bridge", base.bridge)
    device = names("device", base.device)
    pci_bus_id = names("pciBusID", base.pci_bus_id)
    resource_name = names("resourceName", base.resource_name)
    directories = _entries(raw.get("dataDir"), f"{key}.dataDir", problems, paths=True)
    sysctl = names("sysctl", base.sysctl)
    passthru_master = names("passthruMaster", base.passthru_master)
    gateway_bridge = names("gatewayBridge", base.gateway_bridge)
    reserved = _ranges(raw.get("reservedRanges"), f"{key}.reservedRanges", problems)
    node_changes = names("nodeChanges", base.node_changes)
    for index, entry in enumerate(node_changes.entries if "nodeChanges" in raw else ()):
        body = entry.removeprefix(globs.EXCLUDE)
        if not any(c in body for c in "*?") and body not in NODE_CHANGES:
            problems.append(
                f"{key}.nodeChanges[{index}]: must be one of {', '.join(NODE_CHANGES)} "
                f"(or a glob of them), got {_show(entry)}"
            )
    return DelegateRules(
        types=types,
        master=master,
        bridge=bridge,
        device=device,
        pci_bus_id=pci_bus_id,
        resource_name=resource_name,
        data_dir=base.data_dir if directories is None else globs.Prefixes(directories),
        sysctl=sysctl,
        passthru_master=passthru_master,
        gateway_bridge=gateway_bridge,
        reserved_ranges=base.reserved_ranges if reserved is None else reserved,
        node_changes=node_changes,
        source=key,
    )


def _ranges(value: object, key: str, problems: list[str]) -> tuple[str, ...] | None:
    """`reservedRanges`: CIDRs (a bare address is its /32 or /128) and the word `node`, each
    written in its canonical form; None when absent or bad (after the problems)."""
    if value is None:
        return None
    if not isinstance(value, list):
        problems.append(f"{key}: must be a list of CIDRs and {NODE_RANGE!r}, got {_show(value)}")
        return None
    import ipaddress  # only when the settings name the list: the thin plugin reads them per call

    start, entries = len(problems), []
    for index, item in enumerate(value):
        try:
            if not isinstance(item, str):
                raise ValueError(item)  # ip_network takes integers too: not here
            entries.append(
                item if item == NODE_RANGE else str(ipaddress.ip_network(item, strict=False))
            )
        except ValueError:
            problems.append(
                f"{key}[{index}]: must be a CIDR such as 10.96.0.0/12 or {NODE_RANGE!r}, "
                f"got {_show(item)}"
            )
    if len(problems) > start:
        return None
    return tuple(dict.fromkeys(entries))


def _entries(
    value: object, key: str, problems: list[str], *, paths: bool
) -> tuple[str, ...] | None:
    """The entries of a list; None when it is absent (null) or bad (after the problems)."""
    if value is None:
        return None
    what = (
        "absolute directories ('!' in front excludes one)"
        if paths
        else "names or globs ('*' any run, '?' one character, '!' in front excludes)"
    )
    if not isinstance(value, list):
        problems.append(f"{key}: must be a list of {what}, got {_show(value)}")
        return None
    start = len(problems)
    for index, item in enumerate(value):
        where = f"{key}[{index}]"
        if not isinstance(item, str):
            problems.append(f"{where}: must be a string, got {_show(item)}")
            continue
        body = item.removeprefix(globs.EXCLUDE)
        if not body or not body.isprintable() or '"' in body or "\\" in body:
            # Printable and unquoted: each entry is also written into CEL and RE2 (admission).
            problems.append(
                f"{where}: must be a non-empty printable name without '\"' or '\\', "
                f"got {_show(item)}"
            )
        elif paths and (
            not body.startswith("/") or globs.has_dotdot(body) or "*" in body or "?" in body
        ):
            problems.append(
                f"{where}: must be an absolute directory without '..' or globs, got {_show(item)}"
            )
    if len(problems) > start:
        return None
    return tuple(str(item) for item in value)


def _namespaces(
    value: object, key: str, base: DelegateRules, problems: list[str]
) -> tuple[NamespaceRules, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.append(
            f"{key}: must be a list of {{namespaceSelector: {{matchLabels: ...}}, <lists>}}, "
            f"got {_show(value)}"
        )
        return ()
    entries: list[NamespaceRules] = []
    for index, item in enumerate(value):
        where = f"{key}[{index}]"
        if not isinstance(item, Mapping):
            problems.append(
                f"{where}: must be a mapping with a namespaceSelector, got {_show(item)}"
            )
            continue
        _check_keys(item, NAMESPACE_KEYS, where, problems)
        if item.get("namespaceSelector") is None:
            problems.append(
                f"{where}.namespaceSelector: required ({{}} takes every namespace), got nothing"
            )
            continue
        selector = _selector(item["namespaceSelector"], f"{where}.namespaceSelector", problems)
        rules = _rules(item, where, base, problems)
        if selector is not None:
            entries.append(NamespaceRules(selector=selector, rules=rules))
    return tuple(entries)


def _selector(value: object, key: str, problems: list[str]) -> NamespaceSelector | None:
    if not isinstance(value, Mapping):
        problems.append(f"{key}: must be a label selector mapping, got {_show(value)}")
        return None
    start = len(problems)
    _check_keys(value, SELECTOR_KEYS, key, problems)
    labels = value.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        problems.append(
            f"{key}.matchLabels: must map label names to string values, got {_show(labels)}"
        )
        labels = {}
    expressions = value.get("matchExpressions") or []
    requirements: list[Requirement] = []
    if not isinstance(expressions, list):
        problems.append(f"{key}.matchExpressions: must be a list, got {_show(expressions)}")
        expressions = []
    for index, raw in enumerate(expressions):
        requirement = _requirement(raw, f"{key}.matchExpressions[{index}]", problems)
        if requirement is not None:
            requirements.append(requirement)
    if len(problems) > start:
        return None
    return NamespaceSelector(
        match_labels=tuple((str(k), str(v)) for k, v in labels.items()),
        match_expressions=tuple(requirements),
    )


def _requirement(value: object, key: str, problems: list[str]) -> Requirement | None:
    if not isinstance(value, Mapping):
        problems.append(f"{key}: must be {{key, operator, values}}, got {_show(value)}")
        return None
    _check_keys(value, EXPRESSION_KEYS, key, problems)
    label, operator, values = value.get("key"), value.get("operator"), value.get("values") or []
    if not isinstance(label, str) or not label:
        problems.append(f"{key}.key: must be a label name, got {_show(label)}")
        return None
    if operator not in OPERATORS:
        problems.append(
            f"{key}.operator: must be one of {', '.join(OPERATORS)}, got {_show(operator)}"
        )
        return None
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        problems.append(f"{key}.values: must be a list of strings, got {_show(values)}")
        return None
    if (operator in ("In", "NotIn")) != bool(values):
        need = "a non-empty list" if operator in ("In", "NotIn") else "no values"
        problems.append(f"{key}.values: {operator} takes {need}, got {_show(values)}")
        return None
    return Requirement(key=label, operator=str(operator), values=tuple(str(v) for v in values))


def _check_keys(
    raw: Mapping[object, object], known: tuple[str, ...], key: str, problems: list[str]
) -> None:
    for name, value in raw.items():
        if name not in known:
            problems.append(
                f"{key}.{name}: unknown key (known: {', '.join(known)}), got {_show(value)}"
            )


def _show(value: object) -> str:
    return _REPR.repr(value)
