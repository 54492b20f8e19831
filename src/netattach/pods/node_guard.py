"""Node-safe defaults at ADD: what only the node knows (SEC-NODE).

`guard/node_rules.py` judges a config alone (passthru masters, gateway bridges, reserved
CIDRs). This module adds, once a plan stands and before anything is recorded or run:

    the node's own addresses and default gateways (read here, in the host network namespace,
    at most once a second: `NODE_FACTS_TTL`), when the NAD's `reservedRanges` has `node`:
        a pod address or a host address (ptp's host side, a bridge gateway) that is one of them,
        a range that hands one out, or a bridge `isGateway` subnet (a route on the node) over one
    the addresses live attachments hold (the pod records' results), always:
        a pod address (static IPAM, `ips`) or a ptp host side that another attachment holds

Not the node's own, for a host address or a bridge subnet: the addresses on the bridge the NAD
names (its gateway from an earlier pod: the bridge stays) and on the host side of live
attachments of NADs (ptp gives every pod's host veth the same gateway), a pod's default-network
NAD's included (DEV-DEFAULT); the cluster default network's host side stays the node's. A pod
address is compared with all of them.

and what the node's links and switches show (`guard/effects.py`, SEC-VALUES), when the config names
a host link or would change one: a name that is another link's alternative name, and a change
that outlives the pod (forwarding switched on, an existing bridge set up, promiscuous, its
accept_ra or MTU changed) that `nodeChanges` does not grant.

Each refusal is a `DelegateRefusedError` (7) naming the NAD, the key, the value and the rule.

What lasts from one ADD to the next (the node's facts, read at most once a second, and the
addresses of ADDs under way) is a `NodeGuard`'s, one per orchestrator (pods/checks.py makes it):
no module state. `judge_config` is the one judge of the node's rules, for every caller.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterable, Mapping, Sequence

from netattach import offload
from netattach.guard import delegate_policy, effects, keys, node_rules, node_state, refusal
from netattach.pods import delegate_guard
from netattach.pods import plan as plan_mod
from netattach.pods import records as records_mod
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Final

    from netattach.guard.node_rules import Address

# How long the node's addresses read at one ADD serve the next ones: a burst of pods pays one
# netlink dump, and an address added to the node counts within a second.
NODE_FACTS_TTL: Final = 1.0
LIVE_RULE: Final = "SEC-NODE (an address is one attachment's)"
# How long an ADD's claims count before its record is on disk (it is written at once).
PENDING_TTL: Final = 30.0
_JUDGED: Final = (node_rules.POD, node_rules.HOST, node_rules.SPAN, node_rules.SUBNET)


def read_node_facts() -> node_state.NodeFacts:
    """The addresses and default gateways of this network namespace (the node's). Blocking."""
    from netattach.netns import host  # only when a config hands out addresses

    addresses, gateways = host.read_addresses()
    links = tuple(host.read_links())
    accept_ra = tuple(
        (link.name, value)
        for link in links
        if link.kind == node_rules.BRIDGE
        and (value := host.read_sysctl(f"net/ipv6/conf/{link.name}/accept_ra")) is not None
    )
    forwarding = tuple(
        (family, None if value is None else value == "1")
        for family, value in (
            (4, host.read_sysctl("net/ipv4/ip_forward")),
            (6, host.read_sysctl("net/ipv6/conf/all/forwarding")),
        )
    )
    return node_state.NodeFacts(
        addresses=tuple((name, ip) for name, text in addresses if (ip := _ip_or_none(text))),
        gateways=tuple(ip for text in gateways if (ip := _ip_or_none(text))),
        links=links,
        forwarding=forwarding,
        accept_ra=accept_ra,
    )


def live_attachments(
    records: records_mod.PodRecords,
    container_id: str,
    *,
    cluster_nad: str = "",
    pending: PendingClaims | None = None,
) -> node_state.LiveAttachments:
    """What the records of every container but `container_id` hold: their results' addresses,
    and the pod addresses the config of an attachment without a result yet claims; with
    `pending`, what the other ADDs under way claimed before their record was on disk.

    `cluster_nad`: the cluster default network's `namespace/name` when it is a NAD. A recorded
    default attachment of another NAD is a pod's default-network NAD (DEV-DEFAULT; an on-disk
    network's name has no '/'), and its host side is a NAD's like a selection's."""
    held: dict[Address, str] = {}
    host_interfaces: set[str] = set()
    building: set[str] = set()
    recorded: set[str] = set()
    for other in records.container_ids():
        recorded.add(other)
        if other == container_id:
            continue
        try:
            record = records.load(other)
        except records_mod.CorruptPodRecordError:
            continue
        if record is None:
            continue
        for attachment in record.attachments:
            result = attachment.result or {}
            who = f"{attachment.status_name} of pod {record.namespace}/{record.pod}"
            for ip in _list(result.get("ips")):
                address = _ip_or_none(str(ip.get("address", "")).partition("/")[0])
                if address is not None:
                    held.setdefault(address, who)
            # An attachment still running has no result yet: the addresses its config claims.
            claims, _ = node_rules.claims(attachment.config) if result == {} else ([], [])
            if result == {}:
                building.update(effects.bridges_named(attachment.config))
            for claim in claims:
                if claim.kind == node_rules.POD:
                    held.setdefault(claim.first, who)
            if not _operators(attachment, cluster_nad):
                for interface in _list(result.get("interfaces")):
                    name = interface.get("name")
                    if not interface.get("sandbox") and isinstance(name, str):
                        host_interfaces.add(name)
    if pending is not None:
        for address, who in pending.held(recorded, container_id).items():
            held.setdefault(address, who)
    return node_state.LiveAttachments(
        addresses=held, host_interfaces=frozenset(host_interfaces), building=frozenset(building)
    )


def _operators(attachment: records_mod.AttachmentRecord, cluster_nad: str) -> bool:
    """Is the recorded `attachment` the cluster default network (the operator's own)?"""
    name = attachment.status_name
    return attachment.is_default and ("/" not in name or name == cluster_nad)


def refusals(
    claims: Iterable[node_rules.Claim],
    rules: delegate_policy.DelegateRules,
    facts: node_state.NodeFacts | None,
    live: node_state.LiveAttachments,
) -> list[refusal.Refusal]:
    """The claims the node's facts (None: not judged, `node` is not reserved) and the live
    attachments refuse."""
    found: list[refusal.Refusal] = []
    reserved = f"{rules.source}.reservedRanges [{', '.join(rules.reserved_ranges)}]"
    for claim in claims:
        if claim.kind not in _JUDGED:
            continue  # a route is the pod's own
        why = _node_conflict(claim, facts, live) if facts is not None else ""
        if why:
            found.append(refusal.Refusal(claim.key, claim.shown(), reserved, why))
            continue
        holder = _live_conflict(claim, live)
        if holder:
            why = f"is held by the live attachment {holder}, refused by"
            found.append(refusal.Refusal(claim.key, claim.shown(), LIVE_RULE, why))
    return found


def _node_conflict(
    claim: node_rules.Claim, facts: node_state.NodeFacts, live: node_state.LiveAttachments
) -> str:
    """Why `claim` takes the node's own address or gateway; "" when it does not."""
    on_node = claim.kind in (node_rules.HOST, node_rules.SUBNET)
    for name, address in facts.addresses:
        if on_node and (name == claim.bridge or name in live.host_interfaces):
            continue  # that bridge's own gateway, a live attachment's host side
        if claim.holds(address):
            return f"{_what(claim)} the node's own address {address} (on {name}), reserved by"
    for gateway in facts.gateways:
        if claim.holds(gateway):
            return f"{_what(claim)} the node's default gateway {gateway}, reserved by"
    return ""


def _what(claim: node_rules.Claim) -> str:
    if claim.kind == node_rules.SPAN:
        return "hands out"
    if claim.kind == node_rules.SUBNET:
        return "puts a route on the node over"
    return "is"


def _live_conflict(claim: node_rules.Claim, live: node_state.LiveAttachments) -> str:
    if claim.kind not in (node_rules.POD, node_rules.HOST) or claim.first != claim.last:
        return ""
    return live.addresses.get(claim.first, "")


def judge_config(
    raw: Mapping[str, object],
    rules: delegate_policy.DelegateRules,
    facts: node_state.NodeFacts,
    live: node_state.LiveAttachments | None = None,
    requested: Sequence[str] = (),
) -> list[refusal.Refusal]:
    """Every refusal of one config that the node's `facts` and the `live` attachments show
    (what `check.check_config` refuses from the config alone aside); `requested` the
    selection's `ips`. The one judge of the node's rules: the daemon, the thin plugin, hot-plug
    and `netattach validate --node` all come here."""
    claims, _ = node_rules.claims(raw, requested)
    node = facts if delegate_policy.NODE_RANGE in rules.reserved_ranges else None
    live = live or node_state.LiveAttachments()
    found = refusals(claims, rules, node, live)
    found.extend(effects.refusals(raw, rules, facts, effects.families_of(claims), live.building))
    return found


def touches_node(raw: Mapping[str, object]) -> bool:
    """Does `raw` name a host link or run a plugin that may change one (so the node's links and
    switches must be read to judge it)?"""
    for _, obj in node_rules.objects(raw):
        if obj.get("type") in (node_rules.PTP, node_rules.BRIDGE):
            return True
        if any(isinstance(obj.get(key), str) and obj[key] for key in keys.LINK_KEYS):
            return True
    return False


class NodeGuard:
    """SEC-NODE at ADD for one orchestrator, which makes it at the first ADD with a NAD to judge
    (the thin plugin's other ADDs never import this module): the node's facts, read at most once
    per `NODE_FACTS_TTL`, and the addresses ADDs that passed claim until their record is on disk.

    `view` gives the namespaces' labels (their delegate policy rules), `records` the live
    attachments; `read` reads the node (`read_node_facts` by default)."""

    def __init__(
        self,
        *,
        view: object,
        records: records_mod.PodRecords,
        read: Callable[[], node_state.NodeFacts] | None = None,
    ) -> None:
        self._view = view
        self._records = records
        self._read = read
        self._read_at = float("-inf")
        self._facts = node_state.NodeFacts()
        self._pending = PendingClaims()

    def release(self, container_id: str) -> None:
        """`container_id`'s ADD is over: what it claimed is in its record now, or was given up."""
        self._pending.claims.pop(container_id, None)

    async def node_facts(self, *, fresh: bool = False) -> node_state.NodeFacts:
        """The node's facts, read at most once per `NODE_FACTS_TTL` unless `fresh` (a blocking
        netlink dump: in a worker thread under the daemon's event loop, inline in the thin
        plugin)."""
        now = time.monotonic()
        if fresh or now - self._read_at >= NODE_FACTS_TTL:
            self._facts = await offload.to_thread(self._read or read_node_facts)
            self._read_at = time.monotonic()
        return self._facts

    async def check_plan(
        self,
        plan: Sequence[plan_mod.PlannedAttachment],
        policy: delegate_policy.DelegatePolicy,
        container_id: str,
        *,
        cluster_nad: str = "",
    ) -> None:
        """Raise `DelegateRefusedError` for the first NAD of `plan` that takes what is the node's
        or another attachment's. Before anything of the plan is recorded or run. `cluster_nad`:
        the cluster default network's `namespace/name` when it is a NAD (`live_attachments`).

        A refusal of a plan with a bridge NAD is judged twice before it stands: the second time
        with the node read afresh and every record loaded. The first look may have caught the
        bridge while another ADD's plugin was making it (up, accept_ra, MTU not yet written), in
        facts up to `NODE_FACTS_TTL` old."""
        if not policy.enabled:
            return
        judged = []
        for planned in plan:
            if planned.is_default and not planned.pod_default:
                continue  # the operator's own network (a pod's default-network NAD is judged)
            namespace = planned.status_name.partition("/")[0]
            labels = delegate_guard.namespace_labels(self._view, namespace)
            rules = policy.rules_for(namespace, labels)
            raw = planned.network.raw
            claims, _ = node_rules.claims(raw)  # unreadable: refused before
            if claims or touches_node(raw):
                judged.append(_Judged(planned.status_name, rules, claims, raw))
        if not judged:
            return
        wanted = any(
            (j.claims and delegate_policy.NODE_RANGE in j.rules.reserved_ranges)
            or touches_node(j.raw)
            for j in judged
        )
        facts = await self.node_facts() if wanted else None
        refused = self._judge(judged, facts, container_id, cluster_nad, every_record=False)
        if refused is not None and facts is not None and _bridges(judged):
            facts = await self.node_facts(fresh=True)
            refused = self._judge(judged, facts, container_id, cluster_nad, every_record=True)
        if refused is not None:
            raise delegate_guard.refused(*refused)

    def _judge(
        self,
        judged: Sequence[_Judged],
        facts: node_state.NodeFacts | None,
        container_id: str,
        cluster_nad: str,
        *,
        every_record: bool,
    ) -> tuple[str, list[refusal.Refusal]] | None:
        """The first NAD of `judged` refused, with its refusals; None when all pass, and then
        their claims are pending. Nothing awaits here: under the daemon's event loop, no other
        ADD can claim an address between this check and the claims noted as pending."""
        # Every record is read from disk for it: only when a claim is one that live attachments
        # can refuse (a pod or host address) or excuse (a host address or subnet beside the
        # node's), or `every_record` (a second look).
        kinds = {claim.kind for j in judged for claim in j.claims}
        needs_live = every_record or node_rules.POD in kinds or node_rules.HOST in kinds
        needs_live = needs_live or (facts is not None and node_rules.SUBNET in kinds)
        live = (
            live_attachments(
                self._records, container_id, cluster_nad=cluster_nad, pending=self._pending
            )
            if needs_live
            else node_state.LiveAttachments()
        )
        for j in judged:
            if facts is None:
                found = refusals(j.claims, j.rules, None, live)
            else:
                found = judge_config(j.raw, j.rules, facts, live)
            if found:
                return j.name, found
        self._pending.note(container_id, [(j.name, j.rules, j.claims) for j in judged])
        return None


def _bridges(judged: Sequence[_Judged]) -> bool:
    return any(next(effects.bridges_named(j.raw), None) is not None for j in judged)


class _Judged(NamedTuple):
    """One NAD of a plan that the node's rules judge."""

    name: str
    rules: delegate_policy.DelegateRules
    claims: list[node_rules.Claim]
    raw: Mapping[str, Any]


class PendingClaims:
    """The pod addresses ADDs that passed the check claim, until their record is on disk (it
    is written before any plugin runs) or `PENDING_TTL` passes: two ADDs running at once may not
    both claim one address (the daemon runs many; each thin plugin is alone in its process)."""

    def __init__(self) -> None:
        self.claims: dict[str, tuple[float, dict[Address, str]]] = {}

    def note(
        self, container_id: str, judged: Iterable[tuple[str, object, Iterable[node_rules.Claim]]]
    ) -> None:
        held: dict[Address, str] = {}
        for name, _, claims in judged:
            for claim in claims:
                if claim.kind in (node_rules.POD, node_rules.HOST) and claim.first == claim.last:
                    held.setdefault(
                        claim.first, f"{name} of container {container_id[:12]} (being added)"
                    )
        if held:
            self.claims[container_id] = (time.monotonic(), held)

    def held(self, recorded: set[str], container_id: str) -> dict[Address, str]:
        """What the other containers' ADDs without a record yet claim; forgets the rest."""
        now = time.monotonic()
        for other in [
            c for c, (at, _) in self.claims.items() if c in recorded or now - at > PENDING_TTL
        ]:
            del self.claims[other]
        found: dict[Address, str] = {}
        for other, (_, held) in self.claims.items():
            if other != container_id:
                for address, who in held.items():
                    found.setdefault(address, who)
        return found


def _list(value: object) -> list[Mapping[str, object]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _ip_or_none(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return None
