"""The network-status annotation: one map per attachment, built from its CNI result (standard §5).

This module owns the shape of an entry of `k8s.v1.cni.cncf.io/network-status` and the reading of
the device-information file a delegate leaves behind (NPWG device-info spec). Writing the
annotation to the pod is the cluster layer's job; nothing here touches the API.

An entry's keys, always in this order (stable output for golden files and for diffs of pods):

    name, interface, ips, mac, default, dns, gateway, default-route, device-info

Decisions the standard leaves open, taken here:
  * No sandbox interface in the result (a 0.1.0/0.2.0 result, or a 0.3.0+ result listing only
    host-side interfaces or none): `interface` is the CNI_IFNAME the attachment ran with (§5.3.2.1
    allows it for old results; for new ones the pod's interface does carry that name) and `mac`
    is left out (§5.3.4.1: populate it only from a sandbox interface).
  * `dns` holds only the three keys §5.3.6 defines; the CNI result's `options` has no status key.
  * Gateways (the selection's `default-route`, standard v1.1) are written twice: under
    `default-route`, the standard's key, and under `gateway`, the key the
    network-attachment-definition-client library reads (STAT-COMPAT). `gateway` is the one key
    here without a dot that the standard does not define; compatibility with that library's
    readers is worth the exception.
  * A device-info file that is present but malformed is skipped with a problem text for the
    caller to log, never an error: the attachment itself worked, and the status is informative.

`status_entries` builds a pod's whole list from what its ADD recorded (the pod record's
attachments, any object of that shape): the orchestrator publishes it, policy reads the pod's
addresses from it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from netattach.cni import errors
from netattach.cni import result as cni_result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    class RecordedAttachment(Protocol):
        """One attachment as the pod record keeps it (`pods.records.AttachmentRecord`)."""

        @property
        def status_name(self) -> str: ...
        @property
        def ifname(self) -> str: ...
        @property
        def is_default(self) -> bool: ...
        @property
        def config(self) -> Mapping[str, object]: ...
        @property
        def result(self) -> Mapping[str, object] | None: ...
        @property
        def gateways(self) -> tuple[str, ...]: ...
        @property
        def resource(self) -> str: ...
        @property
        def device(self) -> str: ...

    class RecordedPod(Protocol):
        """A pod's attachments as its record keeps them (`pods.records.PodRecord`)."""

        @property
        def container_id(self) -> str: ...
        @property
        def attachments(self) -> Sequence[RecordedAttachment]: ...


STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"

# Where delegates (`cni/`) and device plugins (`dp/`) write device-info files, by the NPWG
# device-info spec: the settings' `deviceInfoDir` by default; `cni_device_info_path` and
# `dp_device_info_path` name the files in it.
DEVICE_INFO_DIR = Path("/var/run/k8s.cni.cncf.io/devinfo")

# A device-info file is a small JSON object; anything bigger is not one, and must not be read
# whole into the daemon's memory.
DEVICE_INFO_MAX_BYTES = 64 * 1024


DEVICE_INFO_SUFFIX = "-device.json"


def cni_device_info_path(base: Path, network: str, container_id: str, ifname: str) -> Path:
    """Where the device-info of one attachment lives (`<base>/cni/`, NPWG device-info spec): the
    file handed to a delegate declaring `CNIDeviceInfoFile`, and the one a delegate leaves."""
    return base / "cni" / f"{_file_part(network)}-{container_id}-{ifname}{DEVICE_INFO_SUFFIX}"


def dp_device_info_path(base: Path, resource: str, device: str) -> Path:
    """Where a device plugin leaves the device-info of one of its devices (`<base>/dp/`): the
    resource name with `/` as `-`, then the device ID."""
    return base / "dp" / f"{_file_part(resource)}-{_file_part(device)}{DEVICE_INFO_SUFFIX}"


def _file_part(text: str) -> str:
    # A name from a NAD or a device plugin becomes one path component, never a way out of the
    # directory: `/` (and NUL) become `-`, and `..` cannot form a component on its own.
    return text.replace("/", "-").replace("\0", "-")


def build_entry(
    *,
    name: str,
    ifname: str,
    result: cni_result.Result | None,
    default: bool,
    device_info: Mapping[str, object] | None = None,
    gateways: Sequence[str] = (),
) -> dict[str, object]:
    """The status map of one attachment, from the result its delegates returned (§5.1.1).

    `name` is written as given (`namespace/name` for a NAD attachment, STAT-KEYS); `ifname` is
    the CNI_IFNAME the attachment ran with, used when the result names no sandbox interface.
    `result` None (a plugin that returned nothing) gives the minimal map: name, interface,
    default (STAT-SRC), plus the gateways and device-info, which do not come from the result.
    """
    interface, mac, ips, dns = _from_result(result, ifname)
    entry: dict[str, object] = {"name": name, "interface": interface}
    if ips:
        entry["ips"] = list(ips)
    if mac:
        # §5.3.4: "mac" only together with "interface", which every entry here has.
        entry["mac"] = mac
    entry["default"] = default
    if dns:
        entry["dns"] = dns
    if gateways:
        entry["gateway"] = list(gateways)
        entry["default-route"] = list(gateways)
    if device_info:
        entry["device-info"] = copy.deepcopy(dict(device_info))
    return entry


def status_entries(
    record: RecordedPod,
    parsed: Sequence[cni_result.Result] | None = None,
    *,
    device_info_dir: Path = DEVICE_INFO_DIR,
    problems: list[str] | None = None,
) -> list[dict[str, object]]:
    """The pod's network-status entries (§5), built from what its ADD recorded; `parsed`: the
    attachments' results as the ADD got them, so they are not parsed again; `device_info_dir`:
    where the attachments' device-info files are (DEV-INFO), whose problems are appended to
    `problems` (when given) for the caller to log."""
    entries = []
    for index, att in enumerate(record.attachments):
        res = None
        if parsed is not None:
            res = parsed[index]
        elif att.result is not None:
            version = str(att.config.get("cniVersion", "0.1.0"))
            res = cni_result.parse_result(att.result, default_version=version)
        device_info = recorded_device_info(
            att, record.container_id, device_info_dir, problems=problems
        )
        entries.append(
            build_entry(
                name=att.status_name,
                ifname=att.ifname,
                result=res,
                default=att.is_default,
                device_info=device_info,
                gateways=att.gateways,
            )
        )
    return build_status(entries)


def recorded_device_info(
    att: RecordedAttachment,
    container_id: str,
    base: Path,
    *,
    problems: list[str] | None = None,
) -> Mapping[str, object] | None:
    """The attachment's device-info for network-status (DEV-INFO): the file its delegate was
    handed or left (`cni/`), else its device plugin's (`dp/`) for the device it was given."""
    network = str(att.config.get("name", ""))
    found = load_device_info(
        cni_device_info_path(base, network, container_id, att.ifname), problems=problems
    )
    if found is None and att.device:
        found = load_device_info(
            dp_device_info_path(base, att.resource, att.device), problems=problems
        )
    return found


def build_status(entries: Sequence[dict[str, object]]) -> list[dict[str, object]]:
    """The annotation's list: the entries in attachment order, exactly one of them the default.

    §5.3.5: only one element may have `default` true, and §5.2: the cluster-wide default network
    must have an entry, so zero defaults is as wrong as two. Either is a bug in whoever built the
    entries, hence InternalError. The entries are copied, so the caller may keep changing its own.
    """
    problems: list[str] = []
    defaults: list[str] = []
    for index, entry in enumerate(entries):
        entry_name = entry.get("name")
        if not isinstance(entry_name, str) or not entry_name:
            problems.append(f"entry {index} has no name")
        flag = entry.get("default")
        if not isinstance(flag, bool):
            problems.append(f"entry {index} ({entry_name!r}) has default {flag!r}, not a boolean")
        elif flag:
            defaults.append(str(entry_name))
    if len(defaults) != 1:
        problems.append(
            f"exactly one entry must be the default network, found {len(defaults)}"
            + (f" ({', '.join(defaults)})" if defaults else "")
        )
    if problems:
        raise errors.InternalError("invalid network-status: " + "; ".join(problems))
    return [copy.deepcopy(entry) for entry in entries]


def load_device_info(
    path: Path, *, problems: list[str] | None = None
) -> Mapping[str, object] | None:
    """The device-info object a delegate (or device plugin) wrote at `path`, or None.

    A missing file is the common case (most delegates write none) and gives None silently.
    A file that cannot be read, is larger than DEVICE_INFO_MAX_BYTES, is not JSON, or is not an
    object with a string `type` gives None too, with a line appended to `problems` (when given)
    for the caller to log: a bad device-info file never fails an attachment that worked.
    The object is returned whole: unknown keys of newer device-info versions are kept.
    """
    try:
        with path.open("rb") as stream:
            data = stream.read(DEVICE_INFO_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        _note(problems, f"device-info file {str(path)!r} cannot be read: {exc.strerror or exc}")
        return None
    if len(data) > DEVICE_INFO_MAX_BYTES:
        _note(
            problems,
            f"device-info file {str(path)!r} is larger than {DEVICE_INFO_MAX_BYTES} bytes; ignored",
        )
        return None
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as exc:
        # ValueError covers UnicodeDecodeError; RecursionError is JSON nested past the stack.
        _note(problems, f"device-info file {str(path)!r} is not valid JSON: {str(exc)[:200]}")
        return None
    problem = _device_info_problem(raw)
    if problem is not None:
        _note(problems, f"device-info file {str(path)!r} {problem}; ignored")
        return None
    assert isinstance(raw, dict)
    return raw


def _note(problems: list[str] | None, text: str) -> None:
    if problems is not None:
        problems.append(text)


def _device_info_problem(raw: object) -> str | None:
    # NPWG device-info spec: an object whose required `type` says which of the type-specific
    # objects (pci, vdpa, vhost-user, memif, ...) it carries, and whose `version` is a string.
    if not isinstance(raw, dict):
        return f"holds {type(raw).__name__}, not an object"
    kind = raw.get("type")
    if not isinstance(kind, str) or not kind:
        return f"has type {kind!r}, not a non-empty string"
    found_version = raw.get("version")
    if found_version is not None and not isinstance(found_version, str):
        return f"has version {found_version!r}, not a string"
    return None


def _from_result(
    result: cni_result.Result | None, ifname: str
) -> tuple[str, str, tuple[str, ...], dict[str, object]]:
    """`interface`, `mac`, `ips` and `dns` of an entry ("" / () / {} where there are none)."""
    if result is None:
        return ifname, "", (), {}
    if isinstance(result, cni_result.Result020):
        # §5.3.3.1: results older than 0.3.0 give "ips" from `ip4` and `ip6`; they have no
        # interfaces, so `interface` is CNI_IFNAME (§5.3.2.1) and `mac` stays out (§5.3.4.1).
        ips = tuple(config.ip for config in (result.ip4, result.ip6) if config is not None)
        return ifname, "", ips, _dns(result.dns)
    sandbox = cni_result.first_sandbox_interface(result)
    if sandbox is None:
        # §5.3.3.1 (2): no interface with a sandbox: the IPs bound to no interface. An index
        # below zero is "no interface" too (the parser refuses one, a built Result may hold one).
        ips = tuple(ip.address for ip in result.ips if ip.interface is None or ip.interface < 0)
        return ifname, "", ips, _dns(result.dns)
    index, interface = sandbox
    # §5.3.3.1 (1): only the IPs of the first sandbox interface; a plugin also reports host-side
    # addresses (a bridge's own gateway address), which are not the pod's.
    ips = tuple(ip.address for ip in result.ips if ip.interface == index)
    return interface.name or ifname, interface.mac, ips, _dns(result.dns)


def _dns(dns: cni_result.DNS) -> dict[str, object]:
    found: dict[str, object] = {}
    if dns.nameservers:
        found["nameservers"] = list(dns.nameservers)
    if dns.domain:
        found["domain"] = dns.domain
    if dns.search:
        found["search"] = list(dns.search)
    return found
