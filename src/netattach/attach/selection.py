"""The network selection annotation `k8s.v1.cni.cncf.io/networks` (standard §4), parsed once.

`parse_selections` turns the annotation's text into `Selection` values, one per requested
attachment, in the order written (§4.2: the same network may be selected several times). Both
forms of §4.1 are read, with Multus's extensions:

    comma form   net-a, other-ns/net-b, net-c@eth5        (`@ifname` is Multus's extension)
    JSON form    [{"name": "net-a", "ips": ["10.1.1.5/24"], "interface": "eth5"}, ...]

The text is the JSON form when it contains any of `[`, `{` or `"`, as in Multus
(`strings.ContainsAny(podNetworks, "[{\\"")`); a JSON value other than a list is then an error.

Every problem is collected and raised together as one `errors.InvalidSelectionError` (102) that
names the pod and quotes each bad value. The standard (§4.1.2.1.3-5) says an invalid annotation
is ignored; netattach fails the pod's network setup instead, as Multus does (SEL-INVALID), so a
typo never silently leaves a pod without the network it asked for.

Sizes are bounded before anything is parsed deeply (SEL-LIMITS): the text's bytes, the number of
selections, the JSON nesting depth and the length of every string.

What this module does not do: namespace isolation, NetworkAttachmentDefinition lookup and
interface name generation belong to the modules that have the cluster view and the whole pod.
"""

from __future__ import annotations

import json
import math
import re
import types
from collections.abc import Mapping

from netattach.attach.selection_values import (
    check_int,
    check_interface,
    check_label,
    check_object,
    check_str,
    check_subdomain,
    hardware_address_bytes,
    is_ipv4_mapped,
    parse_address,
    parse_address_or_cidr,
    show,
)
from netattach.cni import errors
from netattach.values import NamedTuple

ANNOTATION = "k8s.v1.cni.cncf.io/networks"

MAX_ANNOTATION_BYTES = 64 * 1024
MAX_SELECTIONS = 64
MAX_DEPTH = 8  # the list is level 1, a selection level 2, `cni-args` level 3
MAX_STRING_CHARS = 1024

# Standard §4.1.2.1.4: 6-byte Ethernet or 20-byte IP-over-InfiniBand (RFC 4391 §9.1.1).
_MAC_BYTES = (6, 20)
_GUID_BYTES = 8

_PROTOCOLS = ("tcp", "udp", "sctp")
_PORT_MAX = 65535
# Go decodes these into int64; a larger value would not reach a Go delegate intact.
_INT64_MAX = 2**63 - 1

# The JSON form's keys: standard v1 (§4.1.2.1), v1.1, v1.2, v1.3, and Multus's legacy
# `interfaceRequest`. Keys with a '.' are implementations' own and are ignored (§4.1.2.1).
_KEYS = frozenset(
    {
        "name",
        "namespace",
        "ips",
        "mac",
        "interface",
        "interfaceRequest",
        "cni-args",
        "portMappings",
        "bandwidth",
        "default-route",
        "infiniband-guid",
        "ipam-claim-reference",
    }
)
_PORT_MAPPING_KEYS = ("hostPort", "containerPort", "protocol", "hostIP")
_BANDWIDTH_KEYS = ("ingressRate", "ingressBurst", "egressRate", "egressBurst")

# Patterns as text: `re` compiles each on first use and caches it, so a start of the thin
# plugin compiles only those its call needs.

# A JSON string or a bracket; strings are skipped so brackets inside them do not count. The
# unrolled loop matches in linear time even on an unterminated string.
_JSON_NESTING_TOKEN = r'(?s)"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]'  # noqa: S105 (a pattern)
_SIMPLE_KEY = r"[A-Za-z0-9_-]{1,40}"


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class PortMapping(NamedTuple):
    """One `portMappings` entry (standard v1.1), for the portmap capability."""

    host_port: int
    container_port: int
    protocol: str = "tcp"  # as written; any case of tcp, udp, sctp
    host_ip: str = ""

    def to_runtime_config(self) -> dict[str, object]:
        """The `runtimeConfig.portMappings` entry (CNI CONVENTIONS.md)."""
        # Lower-case, as the kubelet's container runtimes send it: the portmap plugin's rules are
        # written for "tcp"/"udp"/"sctp".
        raw: dict[str, object] = {
            "hostPort": self.host_port,
            "containerPort": self.container_port,
            "protocol": self.protocol.lower(),
        }
        if self.host_ip:
            raw["hostIP"] = self.host_ip
        return raw


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class Bandwidth(NamedTuple):
    """The `bandwidth` request (standard v1.1), for the bandwidth capability."""

    ingress_rate: int | None = None
    ingress_burst: int | None = None
    egress_rate: int | None = None
    egress_burst: int | None = None

    def to_runtime_config(self) -> dict[str, object]:
        """The `runtimeConfig.bandwidth` value, with only the keys that were given."""
        pairs = (
            ("ingressRate", self.ingress_rate),
            ("ingressBurst", self.ingress_burst),
            ("egressRate", self.egress_rate),
            ("egressBurst", self.egress_burst),
        )
        return {key: value for key, value in pairs if value is not None}


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class Selection(NamedTuple):
    """One requested attachment: a NetworkAttachmentDefinition reference and its options."""

    namespace: str  # the pod's namespace when the annotation names none
    name: str
    interface: str = ""  # the requested ifname; "" lets the caller generate one
    ips: tuple[str, ...] = ()  # as written: plain addresses and CIDRs
    mac: str = ""  # as written
    # A read-only view of the JSON object; `dict(...)` it before `json.dumps`.
    cni_args: Mapping[str, object] | None = None
    port_mappings: tuple[PortMapping, ...] = ()
    bandwidth: Bandwidth | None = None
    default_route: tuple[str, ...] = ()  # gateway IPs, at most one per family
    infiniband_guid: str = ""
    ipam_claim_reference: str = ""

    def reference(self) -> str:
        """`namespace/name`, as the standard writes a reference (§4.1.1)."""
        return f"{self.namespace}/{self.name}"

    def __hash__(self) -> int:
        # Every field but `cni_args`: a mapping view has no hash.
        fields = zip(self._fields, self, strict=True)
        return hash(tuple(value for name, value in fields if name != "cni_args"))


def parse_selections(text: str, *, pod_namespace: str, pod: str) -> tuple[Selection, ...]:
    """The selections the annotation's text asks for, in order; `()` when it is blank.

    Raises `errors.InvalidSelectionError` listing every problem found.
    """
    problems: list[str] = []
    selections = _parse(text, pod_namespace, problems)
    if problems:
        raise errors.InvalidSelectionError(
            f"invalid network selection annotation of pod {pod_namespace}/{pod}",
            "; ".join(problems),
        )
    return selections


def _parse(text: str, pod_namespace: str, problems: list[str]) -> tuple[Selection, ...]:
    # Bytes, as the API server counts them; surrogatepass so that no text makes encoding fail.
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_ANNOTATION_BYTES:
        problems.append(
            f"networks: the annotation has {size} bytes, more than the limit of "
            f"{MAX_ANNOTATION_BYTES}: {show(text)}"
        )
        return ()
    if not text.strip():
        return ()
    if any(c in text for c in '[{"'):
        return _parse_json(text, pod_namespace, problems)
    return _parse_comma(text, pod_namespace, problems)


# --- comma form (§4.1.1) ---------------------------------------------------------------------


def _parse_comma(text: str, pod_namespace: str, problems: list[str]) -> tuple[Selection, ...]:
    count = text.count(",") + 1
    if count > MAX_SELECTIONS:
        problems.append(
            f"networks: {count} selections, more than the limit of {MAX_SELECTIONS}: {show(text)}"
        )
        return ()
    selections: list[Selection] = []
    for index, item in enumerate(text.split(",")):
        selection = _parse_comma_item(item.strip(), index, text, pod_namespace, problems)
        if selection is not None:
            selections.append(selection)
    return tuple(selections)


def _parse_comma_item(
    item: str, index: int, text: str, pod_namespace: str, problems: list[str]
) -> Selection | None:
    """`name`, `namespace/name`, and Multus's `name@ifname`, `namespace/name@ifname`."""
    path = f"networks[{index}]"
    if not item:
        problems.append(f"{path}: empty item in {show(text)}")
        return None
    start = len(problems)
    if item.count("/") > 1:
        problems.append(f"{path}: {show(item)} has more than one '/'")
        return None
    if item.count("@") > 1:
        problems.append(f"{path}: {show(item)} has more than one '@'")
        return None
    namespace = pod_namespace
    rest = item
    if "/" in item:
        written, rest = (part.strip() for part in item.split("/"))
        if not written:
            problems.append(f"{path}: {show(item)} has an empty namespace before '/'")
        else:
            namespace = check_label(written, f"{path}.namespace", problems)
    name, at, interface = (part.strip() for part in rest.partition("@"))
    if not name:
        problems.append(f"{path}: {show(item)} names no network")
    else:
        check_label(name, f"{path}.name", problems)
    if at:
        check_interface(interface, f"{path}.interface", problems)
    if len(problems) > start:
        return None
    return Selection(namespace=namespace, name=name, interface=interface)


# --- JSON form (§4.1.2) ----------------------------------------------------------------------


def _parse_json(text: str, pod_namespace: str, problems: list[str]) -> tuple[Selection, ...]:
    depth = _nesting_depth(text)
    if depth > MAX_DEPTH:
        problems.append(f"{_depth_problem(depth)}: {show(text)}")
        return ()
    try:
        raw = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:  # unreachable after the depth scan; kept as a guard
        problems.append(f"networks: the JSON nests too deep to parse, the limit is {MAX_DEPTH}")
        return ()
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, over-long integer literals
        problems.append(f"networks: not valid JSON ({exc}): {show(text)}")
        return ()
    if not isinstance(raw, list):
        problems.append(f"networks: the JSON form is a list of objects, not {show(raw)}")
        return ()
    if len(raw) > MAX_SELECTIONS:
        problems.append(
            f"networks: {len(raw)} selections, more than the limit of {MAX_SELECTIONS}: "
            f"{show(text)}"
        )
        return ()
    problems.extend(_bounds_problems(raw))
    if problems:
        return ()

    selections: list[Selection] = []
    first_default_route: int | None = None
    for index, element in enumerate(raw):
        path = f"networks[{index}]"
        if isinstance(element, dict) and element.get("default-route") is not None:
            # v1.1: the pod has one default route, so only one selection may claim it.
            if first_default_route is None:
                first_default_route = index
            else:
                problems.append(
                    f"{path}.default-route: only one selection may carry 'default-route', "
                    f"networks[{first_default_route}] already does"
                )
        selection = _parse_element(element, path, pod_namespace, problems)
        if selection is not None:
            selections.append(selection)
    return tuple(selections)


def _parse_element(
    element: object, path: str, pod_namespace: str, problems: list[str]
) -> Selection | None:
    if not isinstance(element, dict):
        problems.append(f"{path}: {show(element)} is not a JSON object")
        return None
    start = len(problems)
    for key in element:
        if "." not in key and key not in _KEYS:
            problems.append(
                f"{path}: unknown key {show(key)} (keys without a '.' are reserved for the "
                "standard, an implementation's own keys are reverse-domain names such as "
                "'org.example.key')"
            )

    # None stands for a missing key and for JSON null alike, as Go's decoder treats null.
    raw_name = element.get("name")
    name = ""
    if raw_name is None:
        problems.append(f"{path}: 'name' is required")
    elif check_str(raw_name, f"{path}.name", problems):
        name = check_label(raw_name, f"{path}.name", problems)

    namespace = pod_namespace
    raw_namespace = element.get("namespace")
    # §4.1.2.1.1: a missing or empty namespace is the pod's.
    if raw_namespace not in (None, "") and check_str(raw_namespace, f"{path}.namespace", problems):
        namespace = check_label(raw_namespace, f"{path}.namespace", problems)

    interface = _parse_interface(element, path, problems)
    ips = _parse_ips(element.get("ips"), f"{path}.ips", problems)
    mac = _parse_hardware_address(
        element.get("mac"),
        f"{path}.mac",
        _MAC_BYTES,
        "a 6-byte Ethernet or 20-byte InfiniBand address",
        problems,
    )
    guid = _parse_hardware_address(
        element.get("infiniband-guid"),
        f"{path}.infiniband-guid",
        (_GUID_BYTES,),
        "an 8-byte InfiniBand GUID",
        problems,
    )
    cni_args = _parse_cni_args(element.get("cni-args"), f"{path}.cni-args", problems)
    port_mappings = _parse_port_mappings(
        element.get("portMappings"), f"{path}.portMappings", problems
    )
    bandwidth = _parse_bandwidth(element.get("bandwidth"), f"{path}.bandwidth", problems)
    default_route = _parse_default_route(
        element.get("default-route"), f"{path}.default-route", problems
    )
    claim = ""
    raw_claim = element.get("ipam-claim-reference")
    if raw_claim is not None and check_str(raw_claim, f"{path}.ipam-claim-reference", problems):
        claim = check_subdomain(raw_claim, f"{path}.ipam-claim-reference", problems)
        # v1.3: the claim decides the addresses; asking for both is contradictory.
        if element.get("ips") is not None:
            problems.append(f"{path}: 'ips' and 'ipam-claim-reference' cannot both be given")

    if len(problems) > start:
        return None
    return Selection(
        namespace=namespace,
        name=name,
        interface=interface,
        ips=ips,
        mac=mac,
        cni_args=cni_args,
        port_mappings=port_mappings,
        bandwidth=bandwidth,
        default_route=default_route,
        infiniband_guid=guid,
        ipam_claim_reference=claim,
    )


def _parse_interface(element: Mapping[str, object], path: str, problems: list[str]) -> str:
    """`interface`, or Multus's pre-3.2 `interfaceRequest` meaning the same."""
    found: dict[str, str] = {}
    for key in ("interface", "interfaceRequest"):
        value = element.get(key)
        if value is not None and check_str(value, f"{path}.{key}", problems):
            found[key] = check_interface(value, f"{path}.{key}", problems)
    if len(set(found.values())) > 1:
        problems.append(
            f"{path}: 'interface' {show(found['interface'])} and 'interfaceRequest' "
            f"{show(found['interfaceRequest'])} disagree"
        )
        return ""
    return next(iter(found.values()), "")


def _parse_ips(value: object, path: str, problems: list[str]) -> tuple[str, ...]:
    """§4.1.2.1.3: at least one address; each an IPv4 or IPv6 address (or CIDR, as Multus)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.append(f"{path}: {show(value)} is not a list of addresses")
        return ()
    if not value:
        problems.append(f"{path}: must list at least one address")
        return ()
    ips: list[str] = []
    for index, item in enumerate(value):
        item_path = f"{path}[{index}]"
        if not check_str(item, item_path, problems):
            continue
        if parse_address_or_cidr(item) is None:
            problems.append(f"{item_path}: {show(item)} is not an IPv4 or IPv6 address or CIDR")
            continue
        ips.append(item)
    return tuple(ips)


def _parse_hardware_address(
    value: object, path: str, sizes: tuple[int, ...], what: str, problems: list[str]
) -> str:
    if value is None or not check_str(value, path, problems):
        return ""
    if hardware_address_bytes(value) not in sizes:
        problems.append(f"{path}: {show(value)} is not {what}")
        return ""
    return value


def _parse_cni_args(value: object, path: str, problems: list[str]) -> Mapping[str, object] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        problems.append(f"{path}: {show(value)} is not a JSON object")
        return None
    return types.MappingProxyType(value)


def _parse_port_mappings(value: object, path: str, problems: list[str]) -> tuple[PortMapping, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.append(f"{path}: {show(value)} is not a list of port mappings")
        return ()
    mappings: list[PortMapping] = []
    for index, item in enumerate(value):
        mapping = _parse_port_mapping(item, f"{path}[{index}]", problems)
        if mapping is not None:
            mappings.append(mapping)
    return tuple(mappings)


def _parse_port_mapping(item: object, path: str, problems: list[str]) -> PortMapping | None:
    if not check_object(item, path, _PORT_MAPPING_KEYS, problems):
        return None
    start = len(problems)
    host_port = check_int(item.get("hostPort"), f"{path}.hostPort", 1, _PORT_MAX, problems)
    container_port = check_int(
        item.get("containerPort"), f"{path}.containerPort", 1, _PORT_MAX, problems
    )
    if item.get("hostPort") is None:
        problems.append(f"{path}: 'hostPort' is required")
    if item.get("containerPort") is None:
        problems.append(f"{path}: 'containerPort' is required")
    protocol = "tcp"
    raw_protocol = item.get("protocol")
    if raw_protocol is not None and check_str(raw_protocol, f"{path}.protocol", problems):
        if raw_protocol.lower() in _PROTOCOLS:
            protocol = raw_protocol
        else:
            problems.append(f"{path}.protocol: {show(raw_protocol)} is not TCP, UDP or SCTP")
    host_ip = ""
    raw_host_ip = item.get("hostIP")
    # "" is how Go writes "every host address" when it does not omit the field.
    if raw_host_ip not in (None, "") and check_str(raw_host_ip, f"{path}.hostIP", problems):
        if parse_address(raw_host_ip) is None:
            problems.append(f"{path}.hostIP: {show(raw_host_ip)} is not an IPv4 or IPv6 address")
        else:
            host_ip = raw_host_ip
    if len(problems) > start or host_port is None or container_port is None:
        return None
    return PortMapping(
        host_port=host_port, container_port=container_port, protocol=protocol, host_ip=host_ip
    )


# The bandwidth plugin's limit: a burst must be under 4 GB (8 * (2**32 - 1) bits).
_MAX_BURST_BITS = 8 * (2**32 - 1)


def _parse_bandwidth(value: object, path: str, problems: list[str]) -> Bandwidth | None:
    if value is None:
        return None
    if not check_object(value, path, _BANDWIDTH_KEYS, problems):
        return None
    start = len(problems)
    found = {
        key: check_int(value.get(key), f"{path}.{key}", 0, _INT64_MAX, problems)
        for key in _BANDWIDTH_KEYS
    }
    if all(value.get(key) is None for key in _BANDWIDTH_KEYS):
        problems.append(f"{path}: {show(value)} names none of {', '.join(_BANDWIDTH_KEYS)}")
    for direction in ("ingress", "egress"):
        rate, burst = value.get(f"{direction}Rate"), value.get(f"{direction}Burst")
        # A burst is the bucket size of a rate: on its own it limits nothing.
        if burst is not None and rate is None:
            problems.append(f"{path}: '{direction}Burst' is given without '{direction}Rate'")
        # What the bandwidth plugin refuses must be refused here, before anything runs: it
        # checks the request on DEL too, so a refused ADD could never be deleted again.
        elif rate is not None and burst is None:
            problems.append(f"{path}: '{direction}Rate' needs '{direction}Burst' as well")
        elif type(rate) is int and type(burst) is int:  # not bool: those are refused above
            if (rate == 0) != (burst == 0):
                problems.append(
                    f"{path}: '{direction}Rate' and '{direction}Burst' are both 0 (no limit) "
                    f"or both above 0, got {rate} and {burst}"
                )
            if burst >= _MAX_BURST_BITS:
                problems.append(
                    f"{path}.{direction}Burst: {burst} bits is 4 GB or more, "
                    f"the most a token bucket holds is {_MAX_BURST_BITS - 1}"
                )
    if len(problems) > start:
        return None
    return Bandwidth(
        ingress_rate=found["ingressRate"],
        ingress_burst=found["ingressBurst"],
        egress_rate=found["egressRate"],
        egress_burst=found["egressBurst"],
    )


def _parse_default_route(value: object, path: str, problems: list[str]) -> tuple[str, ...]:
    """v1.1: gateway addresses for the pod's default route, at most one per IP family."""
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.append(f"{path}: {show(value)} is not a list of gateway addresses")
        return ()
    if not value:
        problems.append(f"{path}: must list at least one gateway address")
        return ()
    gateways: list[str] = []
    by_family: dict[int, str] = {}
    for index, item in enumerate(value):
        item_path = f"{path}[{index}]"
        if not check_str(item, item_path, problems):
            continue
        address = parse_address(item)
        if address is None:
            problems.append(f"{item_path}: {show(item)} is not an IPv4 or IPv6 address")
            continue
        # An IPv4-mapped IPv6 address is IPv4 to Go's net.IP, which Multus decodes this into.
        family = 4 if address.version == 4 or is_ipv4_mapped(address) else 6
        if family in by_family:
            problems.append(
                f"{path}: at most one IPv{family} gateway, got {show(by_family[family])} "
                f"and {show(item)}"
            )
            continue
        by_family[family] = item
        gateways.append(item)
    return tuple(gateways)


# --- limits ----------------------------------------------------------------------------------


def _nesting_depth(text: str) -> int:
    """The bracket depth of JSON text, measured without parsing it (so without recursion)."""
    depth = deepest = 0
    for match in re.finditer(_JSON_NESTING_TOKEN, text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth = max(depth - 1, 0)
    return deepest


def _depth_problem(depth: int) -> str:
    return f"networks: the JSON nests {depth} levels deep, more than the limit of {MAX_DEPTH}"


def _bounds_problems(value: object) -> list[str]:
    """Depth and string-length problems of a parsed JSON value, walked without recursion."""
    problems: list[str] = []
    deepest = 0
    stack: list[tuple[object, str, int]] = [(value, "networks", 1)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, str):
            _check_length(node, path, "a string", problems)
        elif isinstance(node, list):
            deepest = max(deepest, depth)
            # Pushed in reverse, so problems come out in the order they are written.
            children = [(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(node)]
            stack.extend(reversed(children))
        elif isinstance(node, dict):
            deepest = max(deepest, depth)
            for key in node:
                _check_length(key, path, "a key", problems)
            children = [(item, _key_path(path, key), depth + 1) for key, item in node.items()]
            stack.extend(reversed(children))
    if deepest > MAX_DEPTH:
        problems.insert(0, _depth_problem(deepest))
    return problems


def _check_length(text: str, path: str, what: str, problems: list[str]) -> None:
    if len(text) > MAX_STRING_CHARS:
        problems.append(
            f"{path}: {what} of {len(text)} characters, more than the limit of "
            f"{MAX_STRING_CHARS}: {show(text)}"
        )


def _key_path(path: str, key: str) -> str:
    if re.fullmatch(_SIMPLE_KEY, key):
        return f"{path}.{key}"
    return f"{path}[{show(key)}]"


def _refuse_constant(name: str) -> object:
    # NaN and Infinity are not JSON; passed on in cni-args they would break Go delegates.
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of range")
    return number
