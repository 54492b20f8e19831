"""What a pod's attachments look like and what is wrong with them: `netattach status`'s report.

The report of one pod (`PodReport`) lists its attachments as its network-status shows them
(network, interface, IPs, MAC, default) with the MultiNetworkPolicies governing each and whether
they are enforced, plus the problems found. Three sources build it: the daemon from its pod
records (`pods_reply`, served as `GET /v1/pods` on its socket), and `netattach status` from a
directory feed or from the API (`netattach.cli.cluster_pods`); the daemon's reply travels as
`PodReport.to_raw()` and is read back, checked, with `PodReport.from_raw()`.

Problems a report names, each quoting the values involved:
    an ADD that has not completed (in flight, or failed and not yet deleted)
    a record or result that cannot be read
    an attachment whose network has IPAM (or whose selection asked for IPs) without an IP
    a policy the daemon failed to enforce
and, from the cluster sources, a selection with no network-status or no entry for a selection.
"""

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from netattach.attach import status
from netattach.cni import errors, result
from netattach.pods import records as records_mod

KIND: Final = "netattachPodReport"
QUERY_KEYS: Final = ("namespace", "name")

# The daemon's policy state of a container (`PolicySync.state`): None when no policy is known
# for it, else {"applied": bool, "interfaces": [...], "policies": ["ns/name"], "error": str|None}.
PolicyState = Callable[[str], Mapping[str, object] | None]


class ReportFormatError(ValueError):
    """A report (the daemon's reply) without the shape `to_raw` gives it."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AttachmentReport:
    network: str  # the status name: "ns/name" for a NAD, the config's name for the default
    interface: str
    ips: tuple[str, ...] = ()
    mac: str = ""
    default: bool = False
    # Whether the network should give this interface addresses (IPAM, requested ips); None when
    # the source cannot tell (a NAD whose config lives on a node).
    expects_ips: bool | None = None
    policies: tuple[str, ...] = ()  # "ns/name" of every MultiNetworkPolicy governing it
    # Whether `policies` are enforced; None when the source cannot tell (only the daemon can).
    policy_applied: bool | None = None
    device: str = ""  # DEV-RESOURCE: the allocated device it was given (the daemon's source)

    def to_raw(self) -> dict[str, object]:
        return {
            "network": self.network,
            "interface": self.interface,
            "ips": list(self.ips),
            "mac": self.mac,
            "default": self.default,
            "expectsIPs": self.expects_ips,
            "policies": list(self.policies),
            "policyApplied": self.policy_applied,
            **({"device": self.device} if self.device else {}),
        }

    @classmethod
    def from_raw(cls, raw: object, where: str) -> "AttachmentReport":
        fields = _mapping(raw, where)
        return cls(
            network=_text(fields, "network", where),
            interface=_text(fields, "interface", where),
            ips=_texts(fields, "ips", where),
            mac=_text(fields, "mac", where),
            default=_optional_flag(fields, "default", where) or False,
            expects_ips=_optional_flag(fields, "expectsIPs", where),
            policies=_texts(fields, "policies", where),
            policy_applied=_optional_flag(fields, "policyApplied", where),
            device=_text(fields, "device", where),
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PodReport:
    namespace: str
    name: str
    uid: str = ""
    container_id: str = ""  # the daemon's source only
    attachments: tuple[AttachmentReport, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_raw(self) -> dict[str, object]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "containerId": self.container_id,
            "attachments": [a.to_raw() for a in self.attachments],
            "problems": list(self.problems),
        }

    @classmethod
    def from_raw(cls, raw: object, where: str) -> "PodReport":
        fields = _mapping(raw, where)
        attachments = fields.get("attachments", [])
        if not isinstance(attachments, list):
            raise ReportFormatError(f"{where}.attachments: not a list, got {attachments!r:.80}")
        return cls(
            namespace=_text(fields, "namespace", where),
            name=_text(fields, "name", where),
            uid=_text(fields, "uid", where),
            container_id=_text(fields, "containerId", where),
            attachments=tuple(
                AttachmentReport.from_raw(item, f"{where}.attachments[{index}]")
                for index, item in enumerate(attachments)
            ),
            problems=_texts(fields, "problems", where),
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolReport:
    """One pool of netattach's IPAM on this node (IPAM-NOLEAK): its blocks, the addresses held,
    free, and freed but waiting out the pool's reuse delay."""

    pool: str
    blocks: tuple[str, ...]
    held: int
    free: int
    waiting: int

    def to_raw(self) -> dict[str, object]:
        return {"pool": self.pool, "blocks": list(self.blocks), "held": self.held,
                "free": self.free, "waiting": self.waiting}  # fmt: skip

    @classmethod
    def from_raw(cls, raw: object, where: str) -> "PoolReport":
        fields = _mapping(raw, where)
        counts = {}
        for key in ("held", "free", "waiting"):
            value = fields.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ReportFormatError(f"{where}.{key}: not a count, got {value!r:.80}")
            counts[key] = value
        return cls(
            pool=_text(fields, "pool", where),
            blocks=_texts(fields, "blocks", where),
            **counts,
        )


def parse_pools(raw: object) -> list[PoolReport]:
    """The pools of the daemon's answer; none from a daemon that does not send them."""
    pools = _mapping(raw, "reply").get("pools", [])
    if not isinstance(pools, list):
        raise ReportFormatError(f"reply.pools: not a list, got {pools!r:.80}")
    return [PoolReport.from_raw(item, f"reply.pools[{index}]") for index, item in enumerate(pools)]


def parse_reply(raw: object) -> list[PodReport]:
    """The daemon's `GET /v1/pods` answer, checked field by field (`ReportFormatError`)."""
    fields = _mapping(raw, "reply")
    if fields.get("kind") != KIND:
        raise ReportFormatError(f"reply: kind must be {KIND!r}, got {fields.get('kind')!r:.80}")
    pods = fields.get("pods")
    if not isinstance(pods, list):
        raise ReportFormatError(f"reply.pods: not a list, got {pods!r:.80}")
    return [PodReport.from_raw(item, f"reply.pods[{index}]") for index, item in enumerate(pods)]


def parse_problems(raw: object) -> list[str]:
    """The problems of the daemon's answer beyond its pods (NADs its delegate policy refuses,
    SEC-DELEGATE); none from a daemon that does not send them."""
    return list(_texts(_mapping(raw, "reply"), "problems", "reply"))


# -- what is wrong ----------------------------------------------------------------------------


def network_gives_ips(config: Mapping[str, Any]) -> bool:
    """Whether a delegate config (one plugin or a list) assigns addresses: a plugin with an
    `ipam` type, or a request for IPs (`args.cni.ips`, `runtimeConfig.ips`)."""
    plugins = config.get("plugins")
    members = plugins if isinstance(plugins, list) else [config]
    for plugin in members:
        if not isinstance(plugin, Mapping):
            continue
        ipam = plugin.get("ipam")
        if isinstance(ipam, Mapping) and ipam.get("type"):
            return True
        args = plugin.get("args")
        cni_args = args.get("cni") if isinstance(args, Mapping) else None
        if isinstance(cni_args, Mapping) and cni_args.get("ips"):
            return True
    return False


def attachment_problems(att: AttachmentReport) -> list[str]:
    if att.expects_ips and not att.ips:
        return [
            f"interface {att.interface!r} of network {att.network!r} has no IP address, but "
            "its network assigns addresses (IPAM or requested ips)"
        ]
    return []


def attachment_from_status(entry: Mapping[str, object]) -> AttachmentReport:
    """The report of one network-status entry (keys the standard does not define ignored)."""
    ips = entry.get("ips")
    return AttachmentReport(
        network=str(entry.get("name", "")),
        interface=str(entry.get("interface", "")),
        ips=tuple(str(ip) for ip in ips) if isinstance(ips, list) else (),
        mac=str(entry.get("mac", "")),
        default=entry.get("default") is True,
    )


# -- the daemon's source: pod records ---------------------------------------------------------


def _attachment(
    record: records_mod.PodRecord, att: records_mod.AttachmentRecord
) -> tuple[AttachmentReport, list[str]]:
    """The attachment as its status entry shows it (the same code that builds the status)."""
    parsed = None
    problems: list[str] = []
    if att.result is not None:
        version = str(att.config.get("cniVersion", "0.1.0"))
        try:
            parsed = result.parse_result(att.result, default_version=version)
        except errors.CNIError as exc:
            problems.append(f"the recorded result of {att.ifname} ({att.status_name}): {exc}")
    entry = status.build_entry(
        name=att.status_name,
        ifname=att.ifname,
        result=parsed,
        default=att.is_default,
        gateways=att.gateways,
    )
    found = dataclasses.replace(
        attachment_from_status(entry),
        expects_ips=network_gives_ips(att.config) or bool(att.capability_args.get("ips")),
        device=att.device,
    )
    if record.complete:
        problems += attachment_problems(found)
    return found, problems


def _with_policy(
    attachments: Sequence[AttachmentReport], state: Mapping[str, object] | None
) -> tuple[list[AttachmentReport], list[str]]:
    if state is None:
        return list(attachments), []
    interfaces = state.get("interfaces")
    policies = state.get("policies")
    governed = {str(i) for i in interfaces} if isinstance(interfaces, list) else set()
    names = tuple(str(p) for p in policies) if isinstance(policies, list) else ()
    applied = state.get("applied") is True
    out = [
        dataclasses.replace(att, policies=names, policy_applied=applied)
        if att.interface in governed
        else att
        for att in attachments
    ]
    failure = state.get("error")
    problems = [f"policy not enforced: {failure}"] if failure else []
    return out, problems


def record_report(record: records_mod.PodRecord, policy_state: PolicyState) -> PodReport:
    attachments: list[AttachmentReport] = []
    problems: list[str] = []
    for att in record.attachments:
        found, more = _attachment(record, att)
        attachments.append(found)
        problems += more
    if not record.complete:
        problems.insert(
            0,
            f"ADD of container {record.container_id} has not completed ({len(attachments)} "
            "attachments recorded): still running, or it failed and its DEL is pending",
        )
    attachments, more = _with_policy(attachments, policy_state(record.container_id))
    return PodReport(
        namespace=record.namespace,
        name=record.pod,
        uid=record.uid,
        container_id=record.container_id,
        attachments=tuple(attachments),
        problems=tuple(problems + more),
    )


def parse_query(query: Mapping[str, str]) -> tuple[str, str]:
    """(namespace, name) of a `GET /v1/pods` query; ValueError names an unknown parameter."""
    for key in query:
        if key not in QUERY_KEYS:
            raise ValueError(
                f"unknown query parameter {key[:40]!r} (known: {', '.join(QUERY_KEYS)})"
            )
    namespace, name = query.get("namespace", ""), query.get("name", "")
    if name and not namespace:
        raise ValueError(f"query parameter name={name[:60]!r} needs a namespace")
    return namespace, name


def _load(
    store: records_mod.PodRecords, namespace: str, name: str
) -> list[records_mod.PodRecord | records_mod.CorruptPodRecordError]:
    found: list[records_mod.PodRecord | records_mod.CorruptPodRecordError] = []
    for container_id in store.container_ids():
        try:
            record = store.load(container_id)
        except records_mod.CorruptPodRecordError as exc:
            if not namespace:  # whose it is cannot be read: shown only when nothing is filtered
                found.append(exc)
            continue
        if record is None:  # deleted since the listing
            continue
        if namespace and record.namespace != namespace:
            continue
        if name and record.pod != name:
            continue
        found.append(record)
    return found


def _corrupt_report(exc: records_mod.CorruptPodRecordError) -> PodReport:
    return PodReport(
        namespace="?",
        name="?",
        container_id=exc.path.stem,
        problems=(f"{exc}; `netattach gc` or the container's DEL frees what it holds",),
    )


def build_reports(
    loaded: Iterable[records_mod.PodRecord | records_mod.CorruptPodRecordError],
    policy_state: PolicyState,
) -> list[PodReport]:
    reports = [
        _corrupt_report(item)
        if isinstance(item, records_mod.CorruptPodRecordError)
        else record_report(item, policy_state)
        for item in loaded
    ]
    return sorted(reports, key=lambda r: (r.namespace, r.name, r.container_id))


async def pods_reply(
    store: records_mod.PodRecords,
    policy_state: PolicyState,
    query: Mapping[str, str],
    problems: Sequence[str] = (),
    pools: Sequence[PoolReport] = (),
) -> dict[str, object]:
    """The answer to `GET /v1/pods?namespace=&name=`: the records are read in a worker thread,
    the policy state on the caller's loop (it belongs to the loop's policy sync); `problems`
    of the node beyond its pods (the NADs its delegate policy refuses)."""
    namespace, name = parse_query(query)
    loaded = await asyncio.to_thread(_load, store, namespace, name)
    reply: dict[str, object] = {
        "kind": KIND,
        "pods": [r.to_raw() for r in build_reports(loaded, policy_state)],
    }
    if problems:  # a reply without them reads as before
        reply["problems"] = list(problems)
    if pools:
        reply["pools"] = [p.to_raw() for p in pools]
    return reply


# -- reading raw fields -------------------------------------------------------------------------


def _mapping(raw: object, where: str) -> Mapping[str, object]:
    if not isinstance(raw, Mapping):
        raise ReportFormatError(f"{where}: not an object, got {raw!r:.80}")
    return raw


def _text(fields: Mapping[str, object], key: str, where: str) -> str:
    value = fields.get(key, "")
    if not isinstance(value, str):
        raise ReportFormatError(f"{where}.{key}: not a string, got {value!r:.80}")
    return value


def _texts(fields: Mapping[str, object], key: str, where: str) -> tuple[str, ...]:
    value = fields.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ReportFormatError(f"{where}.{key}: not a list of strings, got {value!r:.80}")
    return tuple(value)


def _optional_flag(fields: Mapping[str, object], key: str, where: str) -> bool | None:
    value = fields.get(key)
    if value is not None and not isinstance(value, bool):
        raise ReportFormatError(f"{where}.{key}: not a boolean, got {value!r:.80}")
    return value
