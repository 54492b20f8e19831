"""Delegate configs: which network a NAD stands for, and what one selection changes in it.

This module owns three steps of an attachment, all pure but for reading config files:

    resolve_delegate   NAD -> the network to run (standard §3.4: spec.config, else a conflist,
                       else a conf on disk named like the NAD); NAD-RESOLVE, NAD-IMPLICIT,
                       NAD-NAMEINJ, NAD-NAMEWARN, NAD-BADCONF
    apply_selection    the network as this attachment runs it: `args.cni` gets the selection's
                       `cni-args`, `ips` and `mac`; the runtime requests are checked against the
                       plugins' capabilities; SEL-CNIARGS, SEL-IPS, SEL-MAC, SEL-CAPS
    with_device        the network given the device the kubelet allocated (DEV-RESOURCE):
                       `deviceID` and `pciBusID` in every plugin, as Multus passes them
    verify_result      after ADD: the result really carries the requested IPs and MAC (SEL-IPS,
                       SEL-MAC)

Configs are never re-serialised from the model (the habit "parse at the edge, once"): every
change is made to a deep copy of the raw dicts the operator wrote, so plugin-specific fields
survive untouched, and the caller's NetworkConfigList is never mutated.

Errors:
    InvalidNetworkConfigError (7)    bad spec.config, naming the NAD; a plugin whose `args` cannot
                                     carry `args.cni`; a result that does not honour the request
    AttachmentNotFoundError (101)    no spec.config and no file on disk, naming the NAD and the
                                     directory searched
    InvalidSelectionError (102)      a runtime request no plugin of the network can carry
"""

from __future__ import annotations

import copy
import ipaddress
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from netattach.cni import conf, errors
from netattach.cni import result as cni_result
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# spec.config is read from the API server, which accepts objects up to ~1.5 MiB; a CNI config is a
# few KiB. Bounding it before json.loads keeps a hostile NAD from costing the daemon memory/time.
SPEC_CONFIG_MAX_BYTES = 256 * 1024

# SEL-CAPS: the requests the standard also sends through `args.cni` (§4.1.2.1.3.2, §4.1.2.1.4.2),
# so a network without the capability can still receive them.
_ALSO_IN_ARGS = ("ips", "mac")


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class Delegate(NamedTuple):
    """The network a NAD resolved to.

    `source` is "spec.config" or the path of the file on disk; `name_mismatch` is the warning to
    log and record as an Event when spec.config names its network differently from the NAD
    (NAD-NAMEWARN, §3.4.3), else None.
    """

    network: conf.NetworkConfigList
    source: str
    name_mismatch: str | None = None


def resolve_delegate(
    *,
    namespace: str,
    name: str,
    spec_config: str | None,
    has_spec: bool,
    networks_dir: Path,
) -> Delegate:
    """The delegate config of NAD `namespace/name`, in the order of standard §3.4.1.

    (1) a non-empty `spec_config` is parsed (a config or a config list); without `name` it gets
    the NAD's (§3.4.2), with a different one it is used as written and `name_mismatch` says so
    (§3.4.3). (2)/(3) otherwise (no spec at all, §3.2.4, or a spec without config) the network
    named like the NAD in `networks_dir`, a config list preferred over a single config.
    (4) otherwise AttachmentNotFoundError. `has_spec` only shapes that error's message.
    """
    nad = f"{namespace}/{name}"
    if spec_config is not None and not isinstance(spec_config, str):
        # The CRD schema makes spec.config a string; an object from a looser API is refused.
        raise errors.InvalidNetworkConfigError(
            f"NetworkAttachmentDefinition {nad}: spec.config must be a string holding JSON, "
            f"not {type(spec_config).__name__}"
        )
    if spec_config:
        return _from_spec(nad, name, spec_config)
    skipped: list[errors.CNIError] = []
    network = conf.find_network(networks_dir, name, skipped)
    if network is None:
        what = "has no spec.config" if has_spec else "has no spec"
        raise errors.AttachmentNotFoundError(
            f"NetworkAttachmentDefinition {nad} {what}, and no CNI config list or config named "
            f"{name!r} was found in {str(networks_dir)!r}",
            # a broken file there may be the one meant: say which were passed over and why
            "; ".join(f"skipped {exc}" for exc in skipped),
        )
    return Delegate(network=network, source=network.source)


def _bad_spec(nad: str, problem: str) -> errors.InvalidNetworkConfigError:
    return errors.InvalidNetworkConfigError(
        f"NetworkAttachmentDefinition {nad}: invalid spec.config: {problem}"
    )


def _from_spec(nad: str, nad_name: str, spec_config: str) -> Delegate:
    # Count characters first: a string longer than the limit in characters is longer in bytes.
    # "surrogatepass": a lone surrogate from a JSON "\ud800" escape still has a size.
    if (
        len(spec_config) > SPEC_CONFIG_MAX_BYTES
        or len(spec_config.encode("utf-8", "surrogatepass")) > SPEC_CONFIG_MAX_BYTES
    ):
        raise _bad_spec(
            nad,
            f"it is larger than the limit of {SPEC_CONFIG_MAX_BYTES} bytes "
            f"({SPEC_CONFIG_MAX_BYTES // 1024} KiB); a CNI config is a few KiB",
        )
    try:
        raw = json.loads(spec_config, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        # RecursionError: nesting deeper than the parser's stack is bad input, not a crash.
        if isinstance(exc, RecursionError):
            raise _bad_spec(
                nad,
                f"objects and lists nest more than {conf.MAX_DEPTH} deep, the limit for a "
                "network configuration",
            ) from exc
        raise _bad_spec(nad, f"not valid JSON ({str(exc)[:200]})") from exc
    if not isinstance(raw, dict):
        raise _bad_spec(nad, f"a network configuration must be a JSON object, not {_kind(raw)}")
    deep = conf.depth_problem(raw)
    if deep:
        raise _bad_spec(nad, deep)
    if "type" not in raw and "plugins" not in raw:
        raise _bad_spec(nad, "it has neither 'type' (a config) nor 'plugins' (a config list)")
    declared = raw.get("name")
    if declared is None or declared == "":
        # §3.4.2: the NAD's name goes into a copy of what the operator wrote; every other key
        # keeps its value and its place.
        raw = {**raw, "name": nad_name}
    try:
        network = conf.parse_any(
            raw, source=f"NetworkAttachmentDefinition {nad} spec.config", require_name=False
        )
    except errors.CNIError as exc:
        raise errors.InvalidNetworkConfigError(
            f"NetworkAttachmentDefinition {nad}: invalid spec.config: " + (exc.details or exc.msg)
        ) from exc
    mismatch = None
    if network.name != nad_name:
        mismatch = (
            f"NetworkAttachmentDefinition {nad}: spec.config names its network "
            f"{network.name!r}, not {nad_name!r}; using {network.name!r} (standard §3.4.3 "
            "recommends the names match)"
        )
    return Delegate(network=network, source="spec.config", name_mismatch=mismatch)


def _refuse_constant(name: str) -> object:
    # Python's json reads NaN and Infinity; JSON has no such values and Go plugins reject them.
    raise ValueError(f"{name} is not a JSON value")


def _kind(value: object) -> str:
    return {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _requested(value: object) -> bool:
    """True unless `value` is no request at all (None or an empty string, list or map)."""
    if value is None:
        return False
    if isinstance(value, str | bytes | Mapping | list | tuple | set | frozenset):
        return len(value) > 0
    return True


def apply_selection(
    network: conf.NetworkConfigList,
    *,
    ips: Sequence[str] = (),
    mac: str = "",
    cni_args: Mapping[str, object] | None = None,
    runtime_requests: Mapping[str, object],
) -> tuple[conf.NetworkConfigList, Mapping[str, object]]:
    """`network` as this attachment runs it, and the capability args for the runtime.

    Every plugin's raw dict gets `args.cni` = its own `args.cni`, then `cni_args` over it (the
    annotation wins, SEL-CNIARGS), then `ips` and `mac` when requested (the selection's own keys
    win over a same-named `cni-args` entry); other `args` keys are kept. This is how Multus hands
    them to plugins such as static IPAM.

    `runtime_requests` maps capability names ("ips", "mac", "portMappings", "bandwidth",
    "infinibandGUID", ...) to values; None or an empty value is no request. Non-empty `ips` and
    `mac` count as requests too, so a plugin declaring those capabilities always receives them
    in `runtimeConfig` (SEL-CAPS says they travel both ways; a value already in
    `runtime_requests` is kept for `runtimeConfig`). The returned mapping holds the
    requests some plugin of the list declares; `runtime.chain.build_plugin_config` then gives each
    plugin only its own.

    SEL-CAPS decision: a request no plugin declares fails with InvalidSelectionError (102) naming
    every such capability, instead of being dropped silently. `ips` and `mac` are the exception:
    when given as `ips`/`mac` they always reach the plugins through `args.cni`, so an undeclared
    capability is not an error here; whether the plugins honoured them is checked after ADD by
    `verify_result`, which is the only way to know. An `ips`/`mac` request that arrives only in
    `runtime_requests` has no `args.cni` route and is treated like any other capability.

    The input is never mutated; the plugins of the returned list carry deep copies of the raw
    dicts. A plugin whose `args` or `args.cni` is not an object cannot receive the merge and
    raises InvalidNetworkConfigError naming the plugin.
    """
    requests: dict[str, object] = {k: v for k, v in runtime_requests.items() if _requested(v)}
    extra: dict[str, object] = copy.deepcopy(dict(cni_args)) if cni_args else {}
    carried: set[str] = set()
    if ips:
        extra["ips"] = list(ips)
        requests.setdefault("ips", list(ips))
        carried.add("ips")
    if mac:
        extra["mac"] = mac
        requests.setdefault("mac", mac)
        carried.add("mac")

    declared: frozenset[str] = frozenset().union(*(p.capabilities for p in network.plugins))
    missing = [cap for cap in requests if cap not in declared and cap not in carried]
    if missing:
        plural = "capability" if len(missing) == 1 else "capabilities"
        raise errors.InvalidSelectionError(
            f"network {network.name!r} cannot carry the requested "
            f"{', '.join(repr(cap) for cap in missing)}: no plugin of its config list declares "
            f"the {plural} (declared: {', '.join(sorted(declared)) or 'none'})"
        )

    def merge(index: int, plugin: conf.NetworkConfig, raw: dict[str, Any]) -> None:
        if extra:
            where = f"network {network.name!r} ({network.source}) plugin {index} ({plugin.type})"
            _merge_cni_args(raw, extra, where)

    applied = _each_plugin(network, merge)
    capability_args = {cap: copy.deepcopy(v) for cap, v in requests.items() if cap in declared}
    return applied, capability_args


# DEV-RESOURCE: the keys Multus sets to the allocated device in every plugin of a list, so
# sriov-cni (`deviceID`) and host-device (`pciBusID`) work unchanged.
DEVICE_KEYS = ("deviceID", "pciBusID")
# The capabilities (CNI conventions) that carry a device and its device-info file at run time.
DEVICE_CAPABILITY = "deviceID"
DEVICE_INFO_CAPABILITY = "CNIDeviceInfoFile"


def with_device(
    network: conf.NetworkConfigList,
    capability_args: Mapping[str, object],
    *,
    device: str,
    device_info_file: str = "",
) -> tuple[conf.NetworkConfigList, dict[str, object]]:
    """`network` and its capability args as the attachment given `device` runs them.

    Every plugin gets `deviceID` and `pciBusID` set to the device (over any the NAD wrote: the
    kubelet's allocation is the one that holds), as Multus sets them; a plugin declaring the
    `deviceID` capability gets it in `runtimeConfig` too, and one declaring `CNIDeviceInfoFile`
    gets `device_info_file` (when given), the path where it reads and writes the NPWG
    device-info. The input is never mutated.
    """

    def give(index: int, plugin: conf.NetworkConfig, raw: dict[str, Any]) -> None:
        for key in DEVICE_KEYS:
            raw[key] = device

    given = _each_plugin(network, give)
    declared: frozenset[str] = frozenset().union(*(p.capabilities for p in network.plugins))
    args = {key: copy.deepcopy(value) for key, value in capability_args.items()}
    if DEVICE_CAPABILITY in declared:
        args[DEVICE_CAPABILITY] = device
    if device_info_file and DEVICE_INFO_CAPABILITY in declared:
        args[DEVICE_INFO_CAPABILITY] = device_info_file
    return given, args


def with_ipam(
    network: conf.NetworkConfigList, ipams: Mapping[int, Mapping[str, Any]]
) -> conf.NetworkConfigList:
    """`network` with plugin `index`'s `ipam` replaced by `ipams[index]` (netattach's IPAM
    turned into the addresses it gave: ipam/service.py). The input is never mutated."""

    def give(index: int, plugin: conf.NetworkConfig, raw: dict[str, Any]) -> None:
        if index in ipams:
            raw["ipam"] = copy.deepcopy(dict(ipams[index]))

    return _each_plugin(network, give)


def _each_plugin(
    network: conf.NetworkConfigList,
    change: Callable[[int, conf.NetworkConfig, dict[str, Any]], None],
) -> conf.NetworkConfigList:
    """`network` with `change(index, plugin, raw)` made to a deep copy of each plugin's raw dict
    (the list's raw dict copied around them): the input is never mutated."""
    plugin_raws: list[dict[str, Any]] = []
    plugins: list[conf.NetworkConfig] = []
    for index, plugin in enumerate(network.plugins):
        raw = copy.deepcopy(plugin.raw)
        change(index, plugin, raw)
        plugin_raws.append(raw)
        plugins.append(plugin._replace(raw=raw))
    list_raw: dict[str, Any] = {
        key: plugin_raws if key == "plugins" else copy.deepcopy(value)
        for key, value in network.raw.items()
    }
    return network._replace(raw=list_raw, plugins=tuple(plugins))


def _merge_cni_args(raw: dict[str, Any], extra: Mapping[str, object], where: str) -> None:
    """`extra` over `raw["args"]["cni"]`, in place on `raw` (a deep copy the caller owns)."""
    args = raw.get("args")
    if args is None:
        args = {}
    elif not isinstance(args, dict):
        raise errors.InvalidNetworkConfigError(
            f"{where}: 'args' must be an object to carry args.cni, not {_kind(args)}"
        )
    cni = args.get("cni")
    if cni is None:
        cni = {}
    elif not isinstance(cni, dict):
        raise errors.InvalidNetworkConfigError(
            f"{where}: 'args.cni' must be an object to carry the selection's arguments, "
            f"not {_kind(cni)}"
        )
    raw["args"] = {**args, "cni": {**cni, **copy.deepcopy(dict(extra))}}


def verify_result(
    result: cni_result.Result | None,
    *,
    ifname: str,
    ips: Sequence[str],
    mac: str,
    network: str = "",
) -> None:
    """Raise unless `result` gives interface `ifname` every requested IP and the requested MAC.

    SEL-IPS / SEL-MAC: "the attachment fails unless the returned result assigns ...". The
    addresses considered are those whose `interface` index points at the sandbox interface named
    `ifname`; a result with no sandbox interface at all offers its unindexed IPs instead (as
    §5.3.3.1 does for the status), and a 0.1.0/0.2.0 result its `ip4`/`ip6`. A requested IP with
    a prefix must match address and prefix; one without matches the address alone. MACs compare
    by their hex digits, ignoring case and the `:`/`-`/`.` spelling. A result that cannot show a
    MAC (no interface, or an old version) fails a MAC request: nothing proves it was applied.

    Why InvalidNetworkConfigError (7): by now the selection was valid (a bad `ips`/`mac` fails
    earlier with 102) and every plugin succeeded; what failed is the network's config, whose
    plugins ignore the request (an IPAM that reads neither `args.cni.ips` nor `runtimeConfig.ips`,
    a plugin without MAC support). That is for the operator to fix in the NAD, so code 7, with the
    network (when `network` is given), the interface and everything missing in the message. The
    caller deletes the attachment again (RT-ADDFAIL).
    """
    subject = f"network {network!r}: " if network else ""
    _check_interface_name(result, ifname, subject)
    if not ips and not mac:
        return
    if result is None:
        raise errors.InvalidNetworkConfigError(
            f"{subject}the delegates returned no result, so the requested "
            f"{_requests_text(ips, mac)} on interface {ifname!r} cannot be confirmed"
        )
    assigned, found_mac, note = _assigned(result, ifname)
    missing: list[str] = []
    for requested in ips:
        if not _ip_assigned(requested, assigned):
            missing.append(f"IP {requested}")
    if mac and (found_mac is None or _mac_digits(found_mac) != _mac_digits(mac)):
        found = "no MAC" if not found_mac else f"MAC {found_mac}"
        missing.append(f"MAC {mac} (the result reports {found})")
    if missing:
        got = ", ".join(str(a) for a in assigned) or "none"
        raise errors.InvalidNetworkConfigError(
            f"{subject}the result does not give interface {ifname!r} the requested "
            f"{', '.join(missing)}; addresses it does give: {got}{note}"
        )


def _check_interface_name(result: cni_result.Result | None, ifname: str, subject: str) -> None:
    """A result that lists sandbox interfaces must name `ifname` (CNI_IFNAME) among them.

    Otherwise the delegate made (or claims) an interface the pod did not ask for: the status
    would name an interface the pod lacks. Exempt: results without sandbox interfaces (IPAM
    only, 0.1.0/0.2.0) and the reference `loopback` plugin, which answers for `lo` whatever
    CNI_IFNAME says.
    """
    if result is None or isinstance(result, cni_result.Result020):
        return
    names = [iface.name for iface in result.interfaces if iface.sandbox]
    if names and ifname not in names and set(names) != {"lo"}:
        shown = ", ".join(repr(name) for name in names)
        raise errors.InvalidNetworkConfigError(
            f"{subject}the result gives the sandbox no interface {ifname!r} (CNI_IFNAME); "
            f"the result's sandbox interfaces are {shown}"
        )


def _mac_digits(mac: str) -> str:
    """The hex digits of a MAC in any of Go's net.ParseMAC spellings (`:`, `-`, `.`), lower-case."""
    return "".join(ch for ch in mac.lower() if ch in "0123456789abcdef")


def _requests_text(ips: Sequence[str], mac: str) -> str:
    parts = [f"IP {ip}" for ip in ips]
    if mac:
        parts.append(f"MAC {mac}")
    return ", ".join(parts)


_Prefixed = ipaddress.IPv4Interface | ipaddress.IPv6Interface


def _assigned(result: cni_result.Result, ifname: str) -> tuple[list[_Prefixed], str | None, str]:
    """The addresses `result` gives `ifname`, its MAC (None when unknown), and a note on why."""
    if isinstance(result, cni_result.Result020):
        texts = [config.ip for config in (result.ip4, result.ip6) if config is not None]
        return _parse_all(texts), None, f" (a {result.cni_version} result has no interfaces)"
    sandboxed = [(i, iface) for i, iface in enumerate(result.interfaces) if iface.sandbox]
    if not sandboxed:
        texts = [ip.address for ip in result.ips if ip.interface is None or ip.interface < 0]
        return _parse_all(texts), None, " (the result lists no sandbox interface)"
    for index, interface in sandboxed:
        if interface.name == ifname:
            texts = [ip.address for ip in result.ips if ip.interface == index]
            return _parse_all(texts), interface.mac or None, ""
    names = ", ".join(repr(iface.name) for _, iface in sandboxed)
    return [], None, f" (the result's sandbox interfaces are {names})"


def _parse_all(texts: Sequence[str]) -> list[_Prefixed]:
    parsed: list[_Prefixed] = []
    for text in texts:
        try:
            parsed.append(ipaddress.ip_interface(text))
        except ValueError:
            continue  # the result parser validates addresses; a hand-built one may not be
    return parsed


def _ip_assigned(requested: str, assigned: Sequence[_Prefixed]) -> bool:
    try:
        wanted = ipaddress.ip_interface(requested)
    except ValueError as exc:
        raise errors.InvalidSelectionError(
            f"requested IP {requested!r} is not an IP address or CIDR"
        ) from exc
    if "/" in requested:
        return wanted in assigned  # address and prefix length
    return any(a.ip == wanted.ip for a in assigned)
