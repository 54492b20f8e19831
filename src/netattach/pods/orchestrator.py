"""A pod's ADD, CHECK, DEL, GC and STATUS: the standard's operations over the CNI runtime.

ADD attaches the default network and then every selected network, in order, each through the
runtime; any failure undoes what was made, in reverse (RT-ADDFAIL). Before each attachment runs,
the pod record names it, so DEL can always undo exactly what ADD attempted (RT-DEL), from the
record alone (RT-NOAPI). One operation per container at a time (RT-SERIAL).

The orchestrator is given its collaborators at construction (ports.py) and owns the parts it is
made of, each in its own module:

    checks            the guards at ADD: delegate policy, plugins installed, the node guard
    attachments       one attachment's steps: its intent in the record, its DEL, its route
    events            the Kubernetes Events on the pod
    status_removals   a DEL's removal of the network-status, never waited on for long
    replug            hot-plug (RT-HOTPLUG): the diff and its replug, made at the first one
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Mapping, Sequence

from netattach import ipam, loggers, offload
from netattach.attach import delegate
from netattach.cluster import model
from netattach.cni import env, errors, result, spec
from netattach.pods import attachments, call_log, devices, pod_identity, status_removals
from netattach.pods import checks as checks_mod
from netattach.pods import events as events_mod
from netattach.pods import locks as locks_mod
from netattach.pods import plan as plan_mod
from netattach.pods import records as records_mod
from netattach.pods import refs as refs_mod
from netattach.runtime import chain, memory
from netattach.settings import settings as settings_mod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeGuard

    from netattach.pods import ports
    from netattach.pods import replug as replug_mod

log = loggers.get("netattach.orchestrator")

SYNC_TIMEOUT = 10.0


def _fetches_pods(view: object) -> TypeGuard[ports.PodFetcher]:
    return callable(getattr(view, "fetch_pod", None))


def _fetches_nads(view: object) -> TypeGuard[ports.NADFetcher]:
    return callable(getattr(view, "fetch_nad", None))


class Orchestrator:
    def __init__(
        self,
        *,
        settings: settings_mod.Settings,
        view: ports.ClusterView,
        sink: ports.StatusSink,
        runtime: chain.Runtime,
        records: records_mod.PodRecords,
        locks: locks_mod.ContainerLocks,
        policy: ports.PolicyEnforcer | None = None,
        addresses: ports.AddressPools | None = None,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.addresses = addresses
        self.view = view
        self.sink = sink
        self.runtime = runtime
        self.records = records
        self.locks = locks
        self.checks = checks_mod.PlanChecks(
            networks=settings.networks, view=view, records=records, runtime=runtime
        )
        self.events = events_mod.PodEvents(sink)
        self.removals = status_removals.StatusRemovals(sink)
        self._replug: replug_mod.Replug | None = None  # made at the first hot-plug
        self._gone_pods: set[str] = set()  # containers whose pod the last sweep saw gone

    # -- ADD ------------------------------------------------------------------------------------

    async def add(self, call: env.Environment, netconf: Mapping[str, Any]) -> result.Result:
        async with self.locks.hold(call.container_id):
            waits = memory.count_waits()
            try:
                return await self._add(call, netconf)
            finally:
                # SEC-NODE: the addresses this ADD claimed are in its record now, or nowhere.
                self.checks.release(call.container_id)
                await self._waited_for_memory(call, sum(waits))

    async def _waited_for_memory(self, call: env.Environment, seconds: float) -> None:
        """REL-BURST: an Event on a pod whose delegates waited `memoryWaitEvent` or longer for
        memory, so that the wait is seen where the pod's start is looked at."""
        if seconds < self.settings.daemon.memory_wait_event:
            return
        ref = refs_mod.pod_ref(call)
        if ref is not None:
            await self.events.record(
                ref,
                "DelegatesWaitedForMemory",
                f"its network plugins waited {seconds:.1f}s for memory: netattach runs them "
                "inside its memory limit, which others filled (docs/deploy.md, sizing the limit)",
                "Warning",
            )

    async def _add(self, call: env.Environment, netconf: Mapping[str, Any]) -> result.Result:
        ref = refs_mod.pod_ref(call) or refs_mod.PodRef(namespace="", name="", uid="")
        await self._undo_earlier_add(call)
        try:
            plan, pod = await self._plan(call, netconf, ref)
        except errors.CNIError as exc:
            log.error("%s", exc)  # refused before any plugin ran; the message names the pod
            await self.events.failed(ref, exc)
            raise
        # The API pod's UID: a static pod's status and Events go to its mirror (RT-STATIC).
        ref = ref._replace(uid=(model.uid_of(pod) if pod else "") or ref.uid)
        record = records_mod.PodRecord(
            container_id=call.container_id,
            netns=call.netns,
            namespace=ref.namespace,
            pod=ref.name,
            uid=ref.uid,
            selection=None if pod is None else plan_mod.selection_text(pod),
        )
        intents: list[records_mod.AttachmentRecord] = []
        made: list[records_mod.AttachmentRecord] = []
        results: list[result.Result] = []
        current = ""
        write_ahead: Awaitable[object] | None = None
        try:
            for planned in plan:
                current = planned.status_name
                intents.append(attachments.intent(planned, intents))
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
                    attachments.runtime_conf(call, call.netns, made[-1]),
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
            await attachments.apply_default_route(call.netns, plan)
            record = record._replace(attachments=tuple(made), complete=True)
            await self._added(ref, pod, plan, record, results)
        except Exception as exc:
            failed = await self._add_failed(ref, current, exc, write_ahead)
            await self._undo(call, record._replace(attachments=tuple(made)))
            await self.events.failed(ref, failed)
            raise failed from exc
        from netattach.cni import result_convert  # only once an ADD has a result to return

        want = str(netconf.get("cniVersion", spec.CURRENT_VERSION))
        return result_convert.convert(results[0], want)

    async def _added(
        self,
        ref: refs_mod.PodRef,
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
            self.removals.cancel(ref)
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
            await self.events.added(ref, plan, entries)

    async def _add_failed(
        self,
        ref: refs_mod.PodRef,
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
        failed = refs_mod.as_cni_error(exc, ref.prefix(current))
        log.error("%s", failed)
        return failed

    async def _plan(
        self, call: env.Environment, netconf: Mapping[str, Any], ref: refs_mod.PodRef
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
            self.checks.check_installed([only])
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
            self.checks.check_plan(planned)
            await self.checks.check_node(planned, call.container_id)
            # DEV-RESOURCE: last, as the NAD wrote it was judged above; the device the kubelet
            # allocated is the operator's grant.
            planned = await devices.assign(
                planned,
                pod=pod,
                container_id=call.container_id,
                cfg=self.settings.networks,
            )
            planned = await self._assign_addresses(planned, ref, call.container_id)
        except errors.CNIError as exc:
            raise exc.with_prefix(ref.prefix()) from exc
        log.debug(
            "%s plan: %s", ref.prefix(), ", ".join(f"{p.ifname} {p.status_name}" for p in planned)
        )
        return planned, pod

    async def _assign_addresses(
        self, plan: list[plan_mod.PlannedAttachment], ref: refs_mod.PodRef, container_id: str
    ) -> list[plan_mod.PlannedAttachment]:
        """IPAM-UNIQUE: the addresses of every attachment with netattach's IPAM, taken last (a
        plan refused above holds none); all of them, or none."""
        if not ipam.uses_netattach(p.network for p in plan):
            return plan
        if self.addresses is None:
            raise errors.InvalidNetworkConfigError(
                f"ipam of type {ipam.TYPE!r} is served by the netattach daemon (thick mode); "
                "this node runs the thin plugin, which cannot give addresses that are the cluster's"
            )
        pod = f"{ref.namespace}/{ref.name}" if ref.name else ""
        return await self.addresses.assign(plan, container_id=container_id, pod=pod, uid=ref.uid)

    def _release_addresses(self, container_id: str) -> None:
        if self.addresses is not None:
            self.addresses.release(container_id)

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
            self._release_addresses(call.container_id)

    def _entries(
        self, record: records_mod.PodRecord, parsed: Sequence[result.Result] | None = None
    ) -> list[dict[str, object]]:
        return devices.network_status(
            record, parsed, device_info_dir=self.settings.networks.device_info_dir
        )

    async def _delete_attachments(
        self, call: env.Environment, record: records_mod.PodRecord
    ) -> list[errors.CNIError]:
        return await attachments.delete(
            self.runtime, call, record, device_info_dir=self.settings.networks.device_info_dir
        )

    async def _undo(self, call: env.Environment, record: records_mod.PodRecord) -> None:
        """Roll back a failed ADD: DEL what it made, newest first; keep the record if any fails."""
        if self.policy is not None:
            await self.policy.discard(record)
        failed = await self._delete_attachments(call, record)
        if not failed:
            self.records.delete(record.container_id)
            self._release_addresses(record.container_id)

    # -- DEL / CHECK ----------------------------------------------------------------------------

    async def delete(self, call: env.Environment) -> None:
        """DEL every attachment ADD attempted, newest first, past failures (RT-DEL, RT-DELERR).

        No record means nothing was attached: success. A corrupt record is reported and the
        runtime's own per-attachment records still free what was made (RT-ATOMIC).
        """
        async with self.locks.hold(call.container_id) as lock:
            ref = refs_mod.pod_ref(call)
            try:
                record = self.records.load(call.container_id)
            except records_mod.CorruptPodRecordError as exc:
                log.error("%s; deleting from the attachment cache instead", exc)
                record = None
            if record is None:
                log.debug("DEL of %s: no pod record (nothing attached, or gone)", call.container_id)
                await self.runtime.del_container(call.container_id)
                self.records.delete(call.container_id)
                # An ADD that took addresses and stopped before its record was written.
                self._release_addresses(call.container_id)
                lock.discard()  # nothing of this container is left: neither is its lock file
                if ref is not None and self._status_is_ours(ref, call.container_id):
                    await self.removals.settle(self.removals.start(ref))
                return
            call_log.note_record(record)
            ref = refs_mod.PodRef(namespace=record.namespace, name=record.pod, uid=record.uid)
            # The status goes while the delegates run, not after them (an API round trip off
            # the DEL's path); Multus too clears it before its delegates' DEL.
            ours = self._status_is_ours(ref, call.container_id)
            clearing = self.removals.start(ref) if ours else None
            try:
                failures = await self._delete_attachments(call, record)
            finally:
                if clearing is not None:
                    await self.removals.settle(clearing)
            if failures:
                raise failures[-1]
            if self.policy is not None:
                await self.policy.discard(record)
            self.records.delete(call.container_id)
            self._release_addresses(call.container_id)
            lock.discard()

    def _status_is_ours(self, ref: refs_mod.PodRef, container_id: str) -> bool:
        """Is the pod's network-status the DEL of `container_id` removes? Not when another
        sandbox of the pod has a record: the status is that one's. Kubelet tears a pod's failed
        or dead sandbox down after its next one attached (a sandbox whose ADD found no daemon,
        retried once the daemon was back); that DEL would leave a running pod with no status."""
        if not ref.name:
            return False
        others = self.records.sandboxes_of(ref.namespace, ref.name, ref.uid, but=container_id)
        if others:
            log.debug(
                "%s DEL of %s keeps the network-status: it is sandbox %s's",
                ref.prefix(), container_id[:12], others[0][:12],
            )  # fmt: skip
        return not others

    async def check(self, call: env.Environment) -> None:
        async with self.locks.hold(call.container_id):
            record = self.records.load(call.container_id)
            if record is None or not record.complete:
                raise errors.UnknownContainerError(
                    f"container {call.container_id} has no completed ADD to check"
                )
            call_log.note_record(record)
            ref = refs_mod.PodRef(namespace=record.namespace, name=record.pod, uid=record.uid)
            for att in record.attachments:
                try:
                    await self.runtime.check_network_list(
                        attachments.network_of(att), attachments.runtime_conf(call, call.netns, att)
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
            if await self._delete_stale(container_id, failures):
                swept.append(container_id)
        swept.extend(await self._sweep_gone_pods(failures))
        swept.extend(await self._sweep_addresses())
        if failures:
            raise failures[-1]
        return swept

    async def _sweep_gone_pods(self, failures: list[errors.CNIError]) -> list[str]:
        """IPAM-NOLEAK: a container holding addresses of netattach's IPAM whose pod the API shows
        gone (no pod of that name, or one of another UID), at this sweep and the one before, is
        DELeted: its netns lives on (the sandbox left behind by a kubelet whose state was wiped,
        a pod force-deleted while its node was away), and no DEL is coming. Seen once, it is
        left to the kubelet's DEL, which is on its way for a pod deleted a moment ago."""
        fetcher = self.view if _fetches_pods(self.view) else None
        if self.addresses is None or fetcher is None:
            return []
        gone: set[str] = set()
        swept: list[str] = []
        for container_id in sorted(self.addresses.containers()):
            try:
                record = self.records.load(container_id)
            except records_mod.CorruptPodRecordError:
                continue  # the address sweep's: a container with no readable record
            if record is None or not record.complete or not record.uid:
                continue
            cached = self.view.lookup_pod(record.namespace, record.pod)
            if cached is not None and pod_identity.is_same_pod(record.uid, cached):
                continue
            try:
                pod = await fetcher.fetch_pod(record.namespace, record.pod)
            except errors.CNIError:
                continue  # the API cannot say: not gone for us
            if pod is not None and pod_identity.is_same_pod(record.uid, pod):
                continue
            gone.add(container_id)
            if container_id not in self._gone_pods:
                continue
            log.warning(
                "%s the pod is gone from the API and no DEL came: container %s deleted",
                record.prefix(), container_id[:12],
            )  # fmt: skip
            if await self._delete_stale(container_id, failures):
                swept.append(container_id)
        self._gone_pods = gone - set(swept)
        return swept

    async def _delete_stale(self, container_id: str, failures: list[errors.CNIError]) -> bool:
        """The DEL no runtime sent for `container_id`; False (and its error in `failures`) when
        it failed, to be tried again at the next sweep."""
        try:
            await self.delete(env.Environment(command=spec.DEL, container_id=container_id))
        except errors.CNIError as exc:
            failures.append(exc)
            return False
        return True

    async def _sweep_addresses(self) -> list[str]:
        """IPAM-NOLEAK: the addresses of containers with no record (an ADD that took them and
        stopped before its record was written, a record lost), freed. Under each container's
        lock: an ADD under way holds it, and has its record once it lets go."""
        if self.addresses is None:
            return []
        freed = []
        for container_id in sorted(self.addresses.containers() - set(self.records.container_ids())):
            async with self.locks.hold(container_id):
                if self.records.load(container_id) is None:
                    log.warning(
                        "freeing the addresses of container %s: it has no record", container_id
                    )
                    self.addresses.release(container_id)
                    freed.append(container_id)
        return freed

    async def status(self) -> None:
        """CNI 1.1 STATUS: ready when the default network is and its plugins say so."""
        try:
            _, network = plan_mod.resolve_default(self.view, self.settings.networks)
        except errors.CNIError as exc:
            raise errors.PluginNotAvailableError(
                f"the cluster default network is not available: {exc.msg}", exc.details
            ) from exc
        await self.runtime.get_status_network_list(network)

    async def finish_status_removals(self, timeout: float) -> None:
        """At shutdown: let the status removals DELs left running end, `timeout` at most."""
        await self.removals.finish(timeout)

    # -- hot-plug (RT-HOTPLUG) ------------------------------------------------------------------

    async def replug(self, container_id: str) -> bool:
        """Make a running pod's attachments match its selection annotation now (RT-HOTPLUG):
        `replug.Replug.run`. Returns False when some attachment failed; raises the error of a
        selection that cannot be planned, in which case nothing changed."""
        if self._replug is None:
            # The daemon's only: the thin plugin's calls never load hot-plug.
            from netattach.pods import replug

            self._replug = replug.Replug(
                networks=self.settings.networks,
                view=self.view,
                sink=self.sink,
                runtime=self.runtime,
                records=self.records,
                locks=self.locks,
                policy=self.policy,
                events=self.events,
                checks=self.checks,
            )
        return await self._replug.run(container_id)
