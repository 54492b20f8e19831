"""A pod's ADD, CHECK, DEL, GC and STATUS: the standard's operations over the CNI runtime.

ADD attaches the default network and then every selected network, in order, each through the
runtime; any failure undoes what was made, in reverse (RT-ADDFAIL). Before each attachment runs,
the pod record names it, so DEL can always undo exactly what ADD attempted (RT-DEL), from the
record alone (RT-NOAPI). One operation per container at a time (RT-SERIAL).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path

from netattach import loggers, offload
from netattach.attach import delegate, selection, status
from netattach.cluster import model
from netattach.cni import conf, env, errors, result, spec
from netattach.pods import call_log, delegate_guard, devices, pod_identity
from netattach.pods import locks as locks_mod
from netattach.pods import plan as plan_mod
from netattach.pods import records as records_mod
from netattach.pods import replug as replug_mod
from netattach.runtime import chain, find
from netattach.settings import network as network_settings
from netattach.settings import settings as settings_mod
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    from typing import Any, Protocol, TypeGuard

log = loggers.get("netattach.orchestrator")

# CNI_ARGS keys the kubelet passes (KUBE-ARGS).
POD_NAMESPACE = "K8S_POD_NAMESPACE"
POD_NAME = "K8S_POD_NAME"
POD_UID = "K8S_POD_UID"

SYNC_TIMEOUT = 10.0
# How long a DEL waits, once its delegates are done, for the removal of the pod's
# network-status: a healthy API answers well within it. Past it the removal goes on in the
# background, retried within the sink's own budget, so no DEL waits on an API that is down
# (KUBE-NADREAD, RT-NOAPI); a new ADD of that pod cancels it (its status is the one to keep).
STATUS_REMOVAL_WAIT = 0.2


# The seams the orchestrator is given, as the type checker sees them: `typing` stays off the
# thin plugin's path (netattach.values says why), so they are not classes at run time.
if TYPE_CHECKING:

    class ClusterView(Protocol):
        def lookup_pod(self, namespace: str, name: str) -> model.KubeObject | None: ...
        def lookup_nad(self, namespace: str, name: str) -> model.KubeObject | None: ...
        async def wait_synced(self, timeout: float) -> bool: ...

    class EventRecorder(Protocol):
        """A sink that can also record Kubernetes Events on the pod (KUBE-EVENTS), or on another
        object of the namespace (`kind`: a MultiNetworkPolicy, say) named `pod`."""

        async def record_event(
            self,
            namespace: str,
            pod: str,
            *,
            reason: str,
            message: str,
            type_: str = "Normal",
            uid: str = "",
            kind: str = model.POD,
        ) -> None: ...

    class PodFetcher(Protocol):
        """A view that can read a pod the cache has not seen yet (KUBE-CACHE)."""

        async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None: ...

    class NADFetcher(Protocol):
        """A view that can read a NAD the cache has not seen yet (KUBE-NADREAD)."""

        async def fetch_nad(self, namespace: str, name: str) -> model.KubeObject | None: ...

    class PolicyEnforcer(Protocol):
        """MultiNetworkPolicy on the pods of this node (daemon/policy_sync.py)."""

        async def enforce(
            self, record: records_mod.PodRecord, pod: model.KubeObject | None = None
        ) -> None: ...
        async def discard(self, record: records_mod.PodRecord) -> None: ...

    class StatusSink(Protocol):
        # `uid`: the pod's, when known, so a status is never written on a recreated namesake.
        async def publish_status(
            self, namespace: str, pod: str, entries: list[dict[str, object]], *, uid: str = ""
        ) -> None: ...
        async def remove_status(self, namespace: str, pod: str, *, uid: str = "") -> None: ...


def _fetches_pods(view: object) -> TypeGuard[PodFetcher]:
    return callable(getattr(view, "fetch_pod", None))


def _fetches_nads(view: object) -> TypeGuard[NADFetcher]:
    return callable(getattr(view, "fetch_nad", None))


def _records_events(sink: object) -> TypeGuard[EventRecorder]:
    return callable(getattr(sink, "record_event", None))


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class PodRef(NamedTuple):
    namespace: str
    name: str
    uid: str

    def prefix(self, network: str = "") -> str:
        return f"[{self.namespace}/{self.name}/{self.uid}{':' + network if network else ''}]"


def pod_ref(call: env.Environment) -> PodRef | None:
    """The pod named by CNI_ARGS, or None when the runtime is not Kubernetes."""
    args = dict(call.args)
    if not args.get(POD_NAMESPACE) or not args.get(POD_NAME):
        return None
    return PodRef(namespace=args[POD_NAMESPACE], name=args[POD_NAME], uid=args.get(POD_UID, ""))


def _runtime_conf(
    call: env.Environment, netns: str, att: records_mod.AttachmentRecord
) -> chain.RuntimeConf:
    args = call.args
    if not any(key == "IgnoreUnknown" for key, _ in args):
        # The K8S_POD_* keys mean nothing to most delegates, which refuse unknown keys unless
        # told to ignore them (Multus adds it too): without it a DEL could never succeed.
        args = (("IgnoreUnknown", "1"), *args)
    return chain.RuntimeConf(
        container_id=call.container_id,
        ifname=att.ifname,
        netns=netns,
        args=args,
        capability_args=att.capability_args,
    )


def _network(att: records_mod.AttachmentRecord) -> conf.NetworkConfigList:
    return conf.parse_any(att.config, source=f"record of {att.status_name}")


def status_entries(
    record: records_mod.PodRecord,
    parsed: Sequence[result.Result] | None = None,
    *,
    device_info_dir: Path = network_settings.DEFAULT_DEVICE_INFO_DIR,
) -> list[dict[str, object]]:
    """The pod's network-status entries (standard §5), built from what its ADD recorded;
    `parsed`: the attachments' results as the ADD got them, so they are not parsed again;
    `device_info_dir`: where the attachments' device-info files are (DEV-INFO)."""
    entries = []
    for index, att in enumerate(record.attachments):
        res = None
        if parsed is not None:
            res = parsed[index]
        elif att.result is not None:
            version = str(att.config.get("cniVersion", "0.1.0"))
            res = result.parse_result(att.result, default_version=version)
        device_info = devices.device_info(att, record.container_id, device_info_dir)
        entries.append(
            status.build_entry(
                name=att.status_name,
                ifname=att.ifname,
                result=res,
                default=att.is_default,
                device_info=device_info,
                gateways=att.gateways,
            )
        )
    return status.build_status(entries)


class Orchestrator:
    def __init__(
        self,
        *,
        settings: settings_mod.Settings,
        view: ClusterView,
        sink: StatusSink,
        runtime: chain.Runtime,
        records: records_mod.PodRecords,
        locks: locks_mod.ContainerLocks,
        policy: PolicyEnforcer | None = None,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.view = view
        self.sink = sink
        self.runtime = runtime
        self.records = records
        self.locks = locks
        # Status removals DELs left running (under the daemon's loop only), by pod.
        self._removals: dict[tuple[str, str], asyncio.Future[None]] = {}

    # -- ADD ------------------------------------------------------------------------------------

    async def add(self, call: env.Environment, netconf: Mapping[str, Any]) -> result.Result:
        async with self.locks.hold(call.container_id):
            try:
                return await self._add(call, netconf)
            finally:
                # SEC-NODE: the addresses this ADD claimed are in its record now, or nowhere.
                _release_claims(call.container_id)

    async def _add(self, call: env.Environment, netconf: Mapping[str, Any]) -> result.Result:
        ref = pod_ref(call) or PodRef(namespace="", name="", uid="")
        await self._undo_earlier_add(call)
        try:
            plan, pod = await self._plan(call, netconf, ref)
        except errors.CNIError as exc:
            log.error("%s", exc)  # refused before any plugin ran; the message names the pod
            await self._failed(ref, exc)
            raise
        # The API pod's UID: a static pod's status and Events go to its mirror (RT-STATIC).
        ref = ref._replace(uid=(model.uid_of(pod) if pod else "") or ref.uid)
        record = records_mod.PodRecord(
            container_id=call.container_id,
            netns=call.netns,
            namespace=ref.namespace,
            pod=ref.name,
            uid=ref.uid,
            selection=None if pod is None else replug_mod.selection_text(pod),
        )
        intents: list[records_mod.AttachmentRecord] = []
        made: list[records_mod.AttachmentRecord] = []
        results: list[result.Result] = []
        current = ""
        write_ahead: Awaitable[object] | None = None
        try:
            for planned in plan:
                current = planned.status_name
                intents.append(self._intent(planned, intents))
            current = ""
            call_log.note_record(record, intents)
            # One durable write names every attachment before the first plugin reads its
            # config: after a crash at any point, DEL finds all that may hold resources (a
            # DEL of one that never ran is a DEL of nothing, which every plugin must
            # accept). Its fsyncs run in a worker thread while the first plugin starts up:
            # the plugin is gated, and reads its config only once the record is durable.
            write_ahead = offload.start(
                offload.to_thread(self.records.save, record._replace(attachments=tuple(intents)))
            )
            gate: Awaitable[object] | None = write_ahead
            for planned, intent in zip(plan, intents, strict=True):
                current = planned.status_name
                made.append(intent)
                devices.prepare_device_info(planned, self.settings.networks.device_info_dir)
                # The pod record saved above is the write-ahead record: no second one.
                res = await self.runtime.add_network_list(
                    planned.network,
                    _runtime_conf(call, call.netns, made[-1]),
                    record_intent=False,
                    gate=gate,
                )
                gate = None
                delegate.verify_result(
                    res,
                    ifname=planned.ifname,
                    ips=planned.ips,
                    mac=planned.mac,
                    network=planned.status_name,
                )
                made[-1] = made[-1]._replace(result=res.to_raw())
                results.append(res)
            current = ""
            await write_ahead  # done already, unless no plugin ran
            await self._apply_default_route(call.netns, plan)
            record = record._replace(attachments=tuple(made), complete=True)
            await self._added(ref, pod, plan, record, results)
        except Exception as exc:
            failed = await self._add_failed(ref, current, exc, write_ahead)
            await self._undo(call, record._replace(attachments=tuple(made)))
            await self._failed(ref, failed)
            raise failed from exc
        want = str(netconf.get("cniVersion", spec.CURRENT_VERSION))
        return result.convert(results[0], want)

    async def _added(
        self,
        ref: PodRef,
        pod: model.KubeObject | None,
        plan: Sequence[plan_mod.PlannedAttachment],
        record: records_mod.PodRecord,
        results: Sequence[result.Result],
    ) -> None:
        """What a successful ADD does once its plugins are done: its record, its policy and
        its status, the status written while the other two are done (an API round trip on
        the Kubernetes feed). A failure of any fails the ADD; the runtime's DEL that follows
        removes a status already written."""
        entries = self._entries(record, results) if ref.name else []
        publishing = None
        if ref.name:
            self._cancel_status_removal(ref)
            publishing = offload.start(
                self.sink.publish_status(ref.namespace, ref.name, entries, uid=ref.uid)
            )
            await offload.sleep(0)  # under the daemon's loop: the request leaves now
        try:
            # Every attachment is already named by the durable version: this one need not be.
            self.records.save(record, durable=False)
            if self.policy is not None and ref.name:
                # Before the runtime hears of success: a governed pod never runs unprotected.
                await self.policy.enforce(record, pod)
        finally:
            if publishing is not None:
                await publishing
        if ref.name:
            await self._events_added(ref, plan, entries)

    async def _add_failed(
        self,
        ref: PodRef,
        current: str,
        exc: Exception,
        write_ahead: Awaitable[object] | None,
    ) -> errors.CNIError:
        """What the runtime hears of a failed ADD (logged): `exc` named after the pod and the
        attachment it happened in. Once it returns, the write-ahead record is no longer being
        written (the undo rewrites it); when that write failed, its error is the one reported,
        since a plugin gated on it was stopped because of it."""
        if write_ahead is not None:
            try:
                await write_ahead
            except Exception as saving:
                exc, current = saving, ""  # the pod's record: before any attachment's
        failed = _as_cni_error(exc, ref.prefix(current))
        log.error("%s", failed)
        return failed

    async def _plan(
        self, call: env.Environment, netconf: Mapping[str, Any], ref: PodRef
    ) -> tuple[list[plan_mod.PlannedAttachment], model.KubeObject | None]:
        runtime_config = netconf.get("runtimeConfig") or {}
        if not isinstance(runtime_config, dict):
            raise errors.InvalidNetworkConfigError("runtimeConfig must be an object")
        if not ref.name:
            # Not a Kubernetes pod (no K8S_POD_* in CNI_ARGS): the default network only.
            name, network = plan_mod.resolve_default(self.view, self.settings.networks)
            only = plan_mod.PlannedAttachment(
                status_name=name,
                ifname=call.ifname,
                is_default=True,
                network=network,
                capability_args=dict(runtime_config),
            )
            self._check_installed([only])
            return [only], None
        if not await self.view.wait_synced(SYNC_TIMEOUT):
            raise errors.TryAgainLaterError(
                f"{ref.prefix()} the cluster view is not synced yet", f"waited {SYNC_TIMEOUT:g}s"
            )
        pod = self.view.lookup_pod(ref.namespace, ref.name)
        stale = pod is not None and not pod_identity.is_same_pod(ref.uid, pod)
        if (pod is None or stale) and _fetches_pods(self.view):
            # KUBE-CACHE: a pod created a moment ago (or recreated under the same name) may not
            # have reached the watch yet: read it directly before calling it missing or stale.
            why = "stale" if stale else "not"
            log.debug("%s %s in the cache: read from the API", ref.prefix(), why)
            try:
                pod = await self.view.fetch_pod(ref.namespace, ref.name) or pod
            except errors.CNIError as exc:
                raise exc.with_prefix(ref.prefix()) from exc
        # RT-UID: a deleted-and-recreated pod of the same name is another pod; RT-STATIC: a
        # static pod is its mirror pod's, and no mirror pod yet is "try again".
        pod = pod_identity.check_pod(ref.prefix(), ref.uid, pod)
        try:
            planned = await self._build_plan(pod, call.ifname, runtime_config)
            self._check_plan(planned)
            await self._check_node(planned, call.container_id)
            # DEV-RESOURCE: last, as the NAD wrote it was judged above; the device the kubelet
            # allocated is the operator's grant.
            planned = await devices.assign(
                planned,
                pod=pod,
                container_id=call.container_id,
                cfg=self.settings.networks,
            )
        except errors.CNIError as exc:
            raise exc.with_prefix(ref.prefix()) from exc
        log.debug(
            "%s plan: %s", ref.prefix(), ", ".join(f"{p.ifname} {p.status_name}" for p in planned)
        )
        return planned, pod

    async def _build_plan(
        self, pod: model.KubeObject, ifname: str, runtime_config: Mapping[str, Any]
    ) -> list[plan_mod.PlannedAttachment]:
        """The pod's plan; each NAD missing from the cache read from the API once first.

        KUBE-NADREAD: a watch cache is never known complete (a NAD created a moment ago, or
        every NAD while the watch reconnects after an API restart), so its miss is no 101 until
        the API says so too, as a missing pod is read (`fetch_pod`).
        """
        read: set[tuple[str, str]] = set()
        while True:
            try:
                return plan_mod.build_plan(
                    pod=pod,
                    default_ifname=ifname,
                    runtime_config=runtime_config,
                    view=self.view,
                    cfg=self.settings.networks,
                )
            except plan_mod.NADNotFoundError as exc:
                key = (exc.namespace, exc.name)
                if key in read or not _fetches_nads(self.view):
                    raise
                read.add(key)
                log.debug("NAD %s/%s not in the cache: read from the API", *key)
                if await self.view.fetch_nad(*key) is None:
                    raise

    def _check_plan(self, plan: Sequence[plan_mod.PlannedAttachment]) -> None:
        """Before anything is recorded or run: the delegate policy allows every NAD of the plan
        (SEC-DELEGATE), and every plugin is installed."""
        delegate_guard.check_plan(plan, self.settings.networks.delegate_policy, self.view)
        self._check_installed(plan)

    async def _check_node(
        self, plan: Sequence[plan_mod.PlannedAttachment], container_id: str
    ) -> None:
        """SEC-NODE: no NAD of the plan takes the node's addresses or another attachment's (a
        pod's default-network NAD too, DEV-DEFAULT: only the cluster default is the operator's)."""
        policy = self.settings.networks.delegate_policy
        if not policy.enabled or all(p.is_default and not p.pod_default for p in plan):
            return
        # Imported only with a NAD to check: the thin plugin's every ADD would pay for it.
        from netattach.pods import node_guard

        await node_guard.check_plan(
            plan,
            policy,
            self.view,
            self.records,
            container_id,
            cluster_nad=plan_mod.cluster_nad(self.settings.networks),
        )

    def _check_installed(self, plan: Sequence[plan_mod.PlannedAttachment]) -> None:
        """Every delegate of the plan can be found, so no ADD starts that its DEL could not undo."""
        for planned in plan:
            for plugin in planned.network.plugins:
                try:
                    find.find_plugin(plugin.type, self.runtime.path)
                except errors.CNIError as exc:
                    raise exc.with_prefix(f"[{planned.status_name}]") from exc

    async def _undo_earlier_add(self, call: env.Environment) -> None:
        """A second ADD without DEL (CNI spec forbids it, a crashed runtime retries it):
        undo what the first one left, so its interfaces and addresses are not orphaned."""
        try:
            earlier = self.records.load(call.container_id)
        except records_mod.CorruptPodRecordError as exc:
            log.error("%s; deleting from the attachment cache", exc)
            await self.runtime.del_container(call.container_id)
            self.records.delete(call.container_id)
            return
        if earlier is not None:
            log.warning("%s ADD again without DEL: undoing the earlier ADD", earlier.prefix())
            failures = await self._delete_attachments(call, earlier)
            if failures:
                raise failures[-1]
            self.records.delete(call.container_id)

    @staticmethod
    def _intent(
        planned: plan_mod.PlannedAttachment, made: Sequence[records_mod.AttachmentRecord]
    ) -> records_mod.AttachmentRecord:
        if any(att.ifname == planned.ifname for att in made):
            # standard §4.1.2.1.5: an interface name already used fails this attachment
            raise errors.InvalidSelectionError(
                f"interface {planned.ifname!r} is already used by an earlier attachment of the pod"
            )
        return records_mod.AttachmentRecord(
            status_name=planned.status_name,
            ifname=planned.ifname,
            is_default=planned.is_default,
            config=planned.network.raw,
            capability_args=dict(planned.capability_args),
            gateways=planned.gateways,
            resource=planned.resource,
            device=planned.device,
        )

    async def _event(self, ref: PodRef, reason: str, message: str, type_: str = "Normal") -> None:
        if ref.name and _records_events(self.sink):
            # A static pod's config hash names no API object: the sink finds the mirror's UID.
            uid = "" if pod_identity.is_config_hash(ref.uid) else ref.uid
            await self.sink.record_event(
                ref.namespace, ref.name, reason=reason, message=message, type_=type_, uid=uid
            )

    async def _failed(self, ref: PodRef, exc: errors.CNIError) -> None:
        """The Warning Event of a failed ADD or hot-plug: the reason is the error's own, an
        attribute of its class (cni/errors.py: `NetworkAttachmentDefinitionNotFound`, ...)."""
        await self._event(ref, exc.event_reason, str(exc), "Warning")

    async def _events_added(
        self,
        ref: PodRef,
        plan: Sequence[plan_mod.PlannedAttachment],
        entries: Sequence[Mapping[str, object]],
    ) -> None:
        for planned, entry in zip(plan, entries, strict=True):
            if planned.warning:
                await self._event(ref, "NetworkNameMismatch", planned.warning, "Warning")
            ips = entry.get("ips", [])
            shown = ", ".join(str(ip) for ip in ips) if isinstance(ips, list) else ""
            await self._event(
                ref,
                "AddedInterface",
                f"Add {planned.ifname} [{shown}] from {planned.status_name}",
            )

    async def _apply_default_route(
        self, netns: str, plan: Sequence[plan_mod.PlannedAttachment]
    ) -> None:
        for planned in plan:
            if planned.gateways:
                # Only a pod asking for default-route imports it (a few small stdlib modules).
                from netattach.netns import routes

                try:
                    await offload.to_thread(
                        routes.apply_default_route, netns, planned.ifname, planned.gateways
                    )
                except (OSError, LookupError) as exc:  # the kernel's refusal, no such ifname
                    raise errors.IOFailureError(
                        f"cannot set the default route via {planned.ifname}", str(exc)
                    ) from exc

    def _entries(
        self, record: records_mod.PodRecord, parsed: Sequence[result.Result] | None = None
    ) -> list[dict[str, object]]:
        return status_entries(
            record, parsed, device_info_dir=self.settings.networks.device_info_dir
        )

    async def _undo(self, call: env.Environment, record: records_mod.PodRecord) -> None:
        """Roll back a failed ADD: DEL what it made, newest first; keep the record if any fails."""
        if self.policy is not None:
            await self.policy.discard(record)
        failed = await self._delete_attachments(call, record)
        if not failed:
            self.records.delete(record.container_id)

    async def _delete_attachments(
        self, call: env.Environment, record: records_mod.PodRecord
    ) -> list[errors.CNIError]:
        failures: list[errors.CNIError] = []
        ref = PodRef(namespace=record.namespace, name=record.pod, uid=record.uid)
        # DEL may come without a netns (CNI spec); a recorded one that is gone is no use either.
        netns = call.netns or (record.netns if os.path.exists(record.netns) else "")  # noqa: ASYNC240 (one stat)
        for att in reversed(record.attachments):
            try:
                try:
                    network = _network(att)
                except errors.CNIError as exc:
                    # RT-ATOMIC: the pod record's copy is unreadable; the runtime's own record
                    # of this attachment (written at its ADD) still says what to DEL.
                    log.warning("%s %s; deleting from the attachment cache", ref.prefix(), exc)
                    if await self.runtime.del_container(call.container_id, ifname=att.ifname):
                        continue
                    raise
                # netattach goes on past a plugin that fails DEL (and reports it) so the others
                # still free their addresses: a deliberate deviation from "stop the list".
                await self.runtime.del_network_list(
                    network, _runtime_conf(call, netns, att), keep_going=True
                )
                devices.discard_device_info(
                    att, call.container_id, self.settings.networks.device_info_dir
                )
            except errors.CNIError as exc:
                failure = exc.with_prefix(ref.prefix(att.status_name))
                log.error("%s", failure)
                failures.append(failure)
        return failures

    # -- DEL / CHECK ----------------------------------------------------------------------------

    async def delete(self, call: env.Environment) -> None:
        """DEL every attachment ADD attempted, newest first, past failures (RT-DEL, RT-DELERR).

        No record means nothing was attached: success. A corrupt record is reported and the
        runtime's own per-attachment records still free what was made (RT-ATOMIC).
        """
        async with self.locks.hold(call.container_id) as lock:
            ref = pod_ref(call)
            try:
                record = self.records.load(call.container_id)
            except records_mod.CorruptPodRecordError as exc:
                log.error("%s; deleting from the attachment cache instead", exc)
                record = None
            if record is None:
                log.debug("DEL of %s: no pod record (nothing attached, or gone)", call.container_id)
                await self.runtime.del_container(call.container_id)
                self.records.delete(call.container_id)
                lock.discard()  # nothing of this container is left: neither is its lock file
                if ref is not None and ref.name:
                    await self._settle_status_removal(self._start_status_removal(ref))
                return
            call_log.note_record(record)
            ref = PodRef(namespace=record.namespace, name=record.pod, uid=record.uid)
            # The status goes while the delegates run, not after them (an API round trip off
            # the DEL's path); Multus too clears it before its delegates' DEL.
            clearing = self._start_status_removal(ref) if ref.name else None
            try:
                failures = await self._delete_attachments(call, record)
            finally:
                if clearing is not None:
                    await self._settle_status_removal(clearing)
            if failures:
                raise failures[-1]
            if self.policy is not None:
                await self.policy.discard(record)
            self.records.delete(call.container_id)
            lock.discard()

    async def _remove_status(self, ref: PodRef) -> None:
        try:
            await self.sink.remove_status(ref.namespace, ref.name, uid=ref.uid)
        except (OSError, errors.CNIError) as exc:
            log.warning("%s cannot remove the network status: %s", ref.prefix(), exc)

    def _start_status_removal(self, ref: PodRef) -> Awaitable[None]:
        """The removal of the pod's network-status, begun: under the daemon's loop a task,
        kept until it ends; without a loop (the thin plugin: a status file) a coroutine that
        runs where `_settle_status_removal` awaits it."""
        removal = offload.start(self._remove_status(ref))
        if offload.loop_running():
            import asyncio

            self._cancel_status_removal(ref)
            key = (ref.namespace, ref.name)
            task = asyncio.ensure_future(removal)  # the task `offload.start` made
            self._removals[key] = task
            task.add_done_callback(lambda done: self._removal_ended(ref, done))
        return removal

    async def _settle_status_removal(self, removal: Awaitable[None]) -> None:
        """Wait for a removal `_start_status_removal` began; under the daemon's loop
        `STATUS_REMOVAL_WAIT` at most, the rest of it left to run in the background."""
        if not offload.loop_running():
            await removal
            return
        import asyncio

        task = asyncio.ensure_future(removal)
        await asyncio.wait({task}, timeout=STATUS_REMOVAL_WAIT)
        if task.done() and not task.cancelled():
            task.result()  # an unexpected failure fails the DEL, as it did when awaited

    def _removal_ended(self, ref: PodRef, task: asyncio.Future[None]) -> None:
        key = (ref.namespace, ref.name)
        if self._removals.get(key) is task:
            del self._removals[key]

    def _cancel_status_removal(self, ref: PodRef) -> None:
        """Stop a removal a DEL of this pod left running: what is published next is current."""
        task = self._removals.pop((ref.namespace, ref.name), None)
        if task is not None:
            task.cancel()

    async def finish_status_removals(self, timeout: float) -> None:
        """At shutdown: let the removals DELs left running end, `timeout` at most, then stop
        them (the sink's connections close next)."""
        if not self._removals:
            return
        import asyncio

        _, late = await asyncio.wait(set(self._removals.values()), timeout=timeout)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    async def check(self, call: env.Environment) -> None:
        async with self.locks.hold(call.container_id):
            record = self.records.load(call.container_id)
            if record is None or not record.complete:
                raise errors.UnknownContainerError(
                    f"container {call.container_id} has no completed ADD to check"
                )
            call_log.note_record(record)
            ref = PodRef(namespace=record.namespace, name=record.pod, uid=record.uid)
            for att in record.attachments:
                try:
                    await self.runtime.check_network_list(
                        _network(att), _runtime_conf(call, call.netns, att)
                    )
                except errors.CNIError as exc:
                    raise exc.with_prefix(ref.prefix(att.status_name)) from exc

    # -- GC / STATUS ----------------------------------------------------------------------------

    async def gc(self, valid_container_ids: set[str]) -> None:
        """Delete every recorded container the runtime no longer knows (RT-GC, CNI 1.1 GC)."""
        failures: list[errors.CNIError] = []
        for container_id in list(self.records.container_ids()):
            if container_id in valid_container_ids:
                continue
            stale = env.Environment(command=spec.DEL, container_id=container_id)
            try:
                await self.delete(stale)
            except errors.CNIError as exc:
                failures.append(exc)
        if failures:
            raise failures[-1]

    async def sweep(self) -> list[str]:
        """The periodic GC (RT-GC): delete every recorded container whose netns is gone.

        A pod whose sandbox no longer exists was torn down without a DEL reaching us (a runtime
        crash, a node reboot): its attachments still hold addresses on the host side. Returns
        the containers deleted. The daemon runs this on a timer; `netattach gc` runs it once.
        """
        swept: list[str] = []
        failures: list[errors.CNIError] = []
        for container_id in list(self.records.container_ids()):
            try:
                record = self.records.load(container_id)
            except records_mod.CorruptPodRecordError:
                record = None  # unreadable: its netns is unknown, so it is gone for us too
            if record is not None and record.netns and os.path.exists(record.netns):  # noqa: ASYNC240
                continue
            try:
                await self.delete(env.Environment(command=spec.DEL, container_id=container_id))
            except errors.CNIError as exc:
                failures.append(exc)
                continue
            swept.append(container_id)
        if failures:
            raise failures[-1]
        return swept

    async def status(self) -> None:
        """CNI 1.1 STATUS: ready when the default network is and its plugins say so."""
        try:
            _, network = plan_mod.resolve_default(self.view, self.settings.networks)
        except errors.CNIError as exc:
            raise errors.PluginNotAvailableError(
                f"the cluster default network is not available: {exc.msg}", exc.details
            ) from exc
        await self.runtime.get_status_network_list(network)

    # -- hot-plug (RT-HOTPLUG) ------------------------------------------------------------------

    async def replug(self, container_id: str) -> bool:
        """Make a running pod's attachments match its selection annotation now (RT-HOTPLUG).

        Under the container's lock, so never beside its ADD, CHECK or DEL. Attachments that stay
        are not touched; the ones no longer selected are deleted, newest first; then the new ones
        are added, each named in the record before it runs (as ADD does), so whatever a crash
        interrupts, the pod's DEL still undoes it. A new attachment that fails is undone alone
        and reported (a Warning Event); the other changes stand. The default network is never
        touched. Returns False when some attachment failed; raises the error of a selection
        that cannot be planned, in which case nothing changed (a Warning Event says why).
        """
        async with self.locks.hold(container_id):
            found = self._replug_target(container_id)
            if found is None:
                return True
            record, pod = found
            ref = PodRef(namespace=record.namespace, name=record.pod, uid=record.uid)
            text = replug_mod.selection_text(pod)
            try:
                plan, chosen = self._replan(record, pod, text)
                change = replug_mod.build_change(record, plan, chosen)
                self._check_plan(change.add)
                await self._check_node(change.add, container_id)
                # The devices of the attachments about to go are free for the new ones.
                change = await self._with_devices(change, record, pod, freed=change.remove)
            except errors.CNIError as exc:
                failed = exc.with_prefix(ref.prefix())
                log.error("%s; the pod's attachments stay as they are", failed)
                await self._failed(ref, failed)
                raise failed from exc
            before = self._entries(record)
            call = _replug_call(record)
            record, stuck = await self._unplug(call, ref, record, change.remove)
            removed = [att for att in change.remove if att not in stuck]
            if stuck:
                # Their names are still taken: the new attachments are named around them.
                busy = frozenset(att.ifname for att in stuck)
                change = replug_mod.build_change(record, plan, chosen, busy=busy)
                try:
                    # The record holds what stayed, the attachments that would not go included.
                    change = await self._with_devices(change, record, pod, freed=())
                except errors.CNIError as exc:
                    failed = exc.with_prefix(ref.prefix())
                    log.error("%s; the new attachments are not made", failed)
                    await self._failed(ref, failed)
                    change = change._replace(wanted=change.keep)
            record, made, failures = await self._plug(call, ref, record, change)
            record = record._replace(attachments=_replugged(record, change, made))
            self.records.save(record)
            _release_claims(container_id)
            if self.policy is not None and (made or removed):
                try:
                    await self.policy.enforce(record, pod)
                except errors.CNIError as exc:
                    log.error("%s %s", ref.prefix(), exc)
                    await self._event(ref, "PolicyApplyFailed", str(exc), "Warning")
            entries = self._entries(record)
            await self.sink.publish_status(ref.namespace, ref.name, entries, uid=ref.uid)
            await self._events_replugged(
                ref, before=before, removed=removed, after=entries, change=change, made=made
            )
            if stuck or failures:
                return False
            # Only now: a pass after a crash or a failed status write finds the pod changed.
            self.records.save(record._replace(selection=text))
            return True

    async def _with_devices(
        self,
        change: replug_mod.Change,
        record: records_mod.PodRecord,
        pod: model.KubeObject,
        *,
        freed: Sequence[records_mod.AttachmentRecord],
    ) -> replug_mod.Change:
        """`change` with a device for each new attachment of a resource (DEV-RESOURCE), none of
        them held by an attachment of `record` other than those `freed`."""
        if not devices.wanted(change.add):
            return change
        given = iter(
            await devices.assign(
                change.add,
                pod=pod,
                container_id=record.container_id,
                cfg=self.settings.networks,
                held={a.device for a in record.attachments if a.device and a not in freed},
            )
        )
        wanted = tuple(
            next(given) if isinstance(w, plan_mod.PlannedAttachment) else w for w in change.wanted
        )
        return change._replace(wanted=wanted)

    def _replug_target(
        self, container_id: str
    ) -> tuple[records_mod.PodRecord, model.KubeObject] | None:
        """The completed record of a running Kubernetes pod, and the pod the view holds."""
        try:
            record = self.records.load(container_id)
        except records_mod.CorruptPodRecordError as exc:
            log.error("%s; not hot-plugged", exc)
            return None
        if record is None or not record.complete or not record.pod:
            return None
        if not any(att.is_default for att in record.attachments):
            return None
        if not os.path.exists(record.netns):
            return None  # the sandbox is gone: the sweep deletes it
        pod = self.view.lookup_pod(record.namespace, record.pod)
        if pod is None:
            return None
        uid = model.uid_of(pod)
        if record.uid and uid and uid != record.uid:
            return None  # a namesake, not this container's pod
        return record, pod

    def _replan(
        self, record: records_mod.PodRecord, pod: model.KubeObject, text: str
    ) -> tuple[list[plan_mod.PlannedAttachment], tuple[selection.Selection, ...]]:
        default = next(att for att in record.attachments if att.is_default)
        plan = plan_mod.build_plan(
            pod=pod,
            default_ifname=default.ifname,
            runtime_config=default.capability_args,
            view=self.view,
            cfg=self.settings.networks,
            pod_default_network=False,
        )
        chosen = selection.parse_selections(text, pod_namespace=record.namespace, pod=record.pod)
        return plan, chosen

    async def _unplug(
        self,
        call: env.Environment,
        ref: PodRef,
        record: records_mod.PodRecord,
        remove: Sequence[records_mod.AttachmentRecord],
    ) -> tuple[records_mod.PodRecord, list[records_mod.AttachmentRecord]]:
        """DEL each of `remove`, newest first; the record forgets each once it is gone. Returns
        the record and the attachments whose DEL failed (they stay recorded for the pod's DEL)."""
        stuck: list[records_mod.AttachmentRecord] = []
        for att in reversed(remove):
            one = record._replace(attachments=(att,))
            failures = await self._delete_attachments(call, one)
            if failures:
                stuck.append(att)
                await self._event(ref, "FailedRemovingInterface", str(failures[-1]), "Warning")
                continue
            left = tuple(a for a in record.attachments if a.ifname != att.ifname)
            record = record._replace(attachments=left)
            self.records.save(record)
        return record, stuck

    async def _plug(
        self,
        call: env.Environment,
        ref: PodRef,
        record: records_mod.PodRecord,
        change: replug_mod.Change,
    ) -> tuple[
        records_mod.PodRecord, dict[int, records_mod.AttachmentRecord], list[errors.CNIError]
    ]:
        """ADD each new attachment of `change` in selection order. Returns the record, the
        attachments made by their position in `change.wanted`, and the failures."""
        made: dict[int, records_mod.AttachmentRecord] = {}
        failures: list[errors.CNIError] = []
        for index, planned in enumerate(change.wanted):
            if not isinstance(planned, plan_mod.PlannedAttachment):
                continue
            try:
                intent = self._intent(planned, record.attachments)
            except errors.CNIError as exc:
                failure = exc.with_prefix(ref.prefix(planned.status_name))
                await self._plug_failed(ref, failure, failures)
                continue
            record = record._replace(attachments=(*record.attachments, intent))
            self.records.save(record)
            try:
                if self.policy is not None:
                    # Govern the interface before it exists (nft matches it by name), so no
                    # packet reaches it unfiltered; refined with its address once it is made.
                    await self.policy.enforce(record)
                res = await self.runtime.add_network_list(
                    planned.network, _runtime_conf(call, record.netns, intent), record_intent=False
                )
                delegate.verify_result(
                    res,
                    ifname=planned.ifname,
                    ips=planned.ips,
                    mac=planned.mac,
                    network=planned.status_name,
                )
                await self._apply_default_route(record.netns, [planned])
            except Exception as exc:
                failure = _as_cni_error(exc, ref.prefix(planned.status_name))
                undo = await self._delete_attachments(call, record._replace(attachments=(intent,)))
                if not undo:  # else it stays recorded, for the pod's DEL to free
                    record = record._replace(attachments=record.attachments[:-1])
                    self.records.save(record)
                await self._plug_failed(ref, failure, failures)
                continue
            made[index] = intent._replace(result=res.to_raw())
            record = record._replace(attachments=(*record.attachments[:-1], made[index]))
            self.records.save(record)
        return record, made, failures

    async def _plug_failed(
        self, ref: PodRef, failure: errors.CNIError, failures: list[errors.CNIError]
    ) -> None:
        log.error("%s", failure)
        failures.append(failure)
        await self._event(ref, "FailedAddingInterface", str(failure), "Warning")

    async def _events_replugged(
        self,
        ref: PodRef,
        *,
        before: Sequence[Mapping[str, object]],
        removed: Sequence[records_mod.AttachmentRecord],
        after: Sequence[Mapping[str, object]],
        change: replug_mod.Change,
        made: Mapping[int, records_mod.AttachmentRecord],
    ) -> None:
        for att in removed:
            shown = _shown_ips(before, att.ifname)
            message = f"Remove {att.ifname} [{shown}] from {att.status_name}"
            await self._event(ref, "RemovedInterface", message)
        for index, planned in enumerate(change.wanted):
            if index not in made or not isinstance(planned, plan_mod.PlannedAttachment):
                continue
            if planned.warning:
                await self._event(ref, "NetworkNameMismatch", planned.warning, "Warning")
            shown = _shown_ips(after, planned.ifname)
            message = f"Add {planned.ifname} [{shown}] from {planned.status_name}"
            await self._event(ref, "AddedInterface", message)


def _replug_call(record: records_mod.PodRecord) -> env.Environment:
    """The CNI environment of a hot-plugged attachment: the pod's sandbox, and CNI_ARGS as the
    kubelet passes them."""
    args = [
        ("IgnoreUnknown", "1"),
        (POD_NAMESPACE, record.namespace),
        (POD_NAME, record.pod),
        ("K8S_POD_INFRA_CONTAINER_ID", record.container_id),
    ]
    if record.uid:
        args.append((POD_UID, record.uid))
    return env.Environment(
        command=spec.ADD, container_id=record.container_id, netns=record.netns, args=tuple(args)
    )


def _replugged(
    record: records_mod.PodRecord,
    change: replug_mod.Change,
    made: Mapping[int, records_mod.AttachmentRecord],
) -> tuple[records_mod.AttachmentRecord, ...]:
    """The record's attachments in the new selection's order: the default network first, then
    what is kept or was made, then what could not be deleted (the pod's DEL retries them)."""
    placed: list[records_mod.AttachmentRecord] = []
    for index, wanted in enumerate(change.wanted):
        if isinstance(wanted, records_mod.AttachmentRecord):
            placed.append(wanted)
        elif index in made:
            placed.append(made[index])
    names = {att.ifname for att in placed}
    defaults = [att for att in record.attachments if att.is_default]
    rest = [a for a in record.attachments if not a.is_default and a.ifname not in names]
    return (*defaults, *placed, *rest)


def _as_cni_error(exc: Exception, prefix: str) -> errors.CNIError:
    """`exc` named after the pod and attachment (`prefix`); anything but a CNI error is a bug:
    999, the traceback in the log only."""
    if isinstance(exc, errors.CNIError):
        return exc.with_prefix(prefix)
    log.error("%s unexpected failure", prefix, exc_info=exc)
    return errors.InternalError.unexpected(exc, prefix)


def _shown_ips(entries: Sequence[Mapping[str, object]], ifname: str) -> str:
    for entry in entries:
        if entry.get("interface") == ifname:
            ips = entry.get("ips", [])
            return ", ".join(str(ip) for ip in ips) if isinstance(ips, list) else ""
    return ""


def _release_claims(container_id: str) -> None:
    """Forget the addresses `container_id`'s ADD claimed while it had no record (SEC-NODE),
    once its record holds them or it failed. node_guard is imported only by an ADD with a NAD to
    check (the thin plugin's path stays without it): not loaded, nothing was claimed."""
    guard = sys.modules.get("netattach.pods.node_guard")
    if guard is not None:
        guard.release(container_id)
