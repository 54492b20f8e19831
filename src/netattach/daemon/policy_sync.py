"""MultiNetworkPolicy on the pods this node attached: keep each pod's nftables table converged.

The inputs are the cluster view (policies, namespaces, pods and their network-status) and the
pod records (which pods live here, in which netns, with which interfaces and addresses). The
output is, per local pod, one rendered nft script (`policy.render`) or none. A pod's table is
replaced only when its script changes (POL-UPDATE); a pod no policy governs has no table.

Triggers, all coalesced into one debounced pass:
    the view changed      a policy, pod, namespace or NAD was added, changed or deleted
    an ADD/DEL finished   a peer address appeared or went away
    a failed apply        retried after `RETRY_DELAY`
A new pod's own table is applied inside its ADD, before the runtime hears of success, so a
governed pod never runs unprotected (`enforce`). At start every recorded pod is reconciled: a
table whose policy went away while the daemon was down is removed.

Each pod's table is changed by one task at a time (a lock per container). `nft` runs as its own
process under `nsenter` (`policy.apply`): no thread of ours changes namespace.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from netattach.cluster import model, store
from netattach.cni import errors
from netattach.daemon import metrics, orchestrator, passes
from netattach.daemon import records as records_mod
from netattach.policy import apply, compile, render
from netattach.policy.model import Policy, parse_policy

log = logging.getLogger("netattach.policy")

DEBOUNCE = 0.05  # quiet time before a pass: a burst of changes (a relist) makes one pass
RETRY_DELAY = 5.0  # a failed apply is tried again after this long
NFT_TIMEOUT = 10.0

StatusEntries = Callable[[records_mod.PodRecord], list[dict[str, object]]]


@dataclasses.dataclass(slots=True)
class _Applied:
    """What is in a pod's netns now, as far as we know."""

    script: str | None  # None: no table
    interfaces: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    error: str | None = None


_UNKNOWN = _Applied(script="<unknown>")  # never equal to a rendered script


class PolicySync:
    def __init__(
        self,
        *,
        view: store.ClusterStore,
        records: records_mod.PodRecords,
        status_entries: StatusEntries,
        events: orchestrator.EventRecorder | None = None,  # Warnings on policies and pods
        status_file: Callable[[str, str], list[dict[str, object]] | None] | None = None,
    ) -> None:
        self._view = view
        self._records = records
        self._status_entries = status_entries
        self._events = events
        self._status_file = status_file
        self._applied: dict[str, _Applied] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._dirty = asyncio.Event()
        self._reported: dict[str, str] = {}  # policy key -> the problem last reported
        self._parsed: dict[tuple[str, str, str], Policy | errors.CNIError] = {}
        self._last_good: dict[tuple[str, str], Policy] = {}
        self._views = compile.ViewCache()
        self._tasks: set[asyncio.Task[None]] = set()
        self.passes = 0

    # -- triggers -------------------------------------------------------------------------------

    def notify(self, _kind: str = "") -> None:
        """Something changed: a pass will follow (debounced)."""
        self._dirty.set()

    async def run(self) -> None:
        """Reconcile every recorded pod, then converge after every change, until cancelled."""
        await self.reconcile()
        await passes.debounced_passes(
            self._dirty,
            self.converge,
            debounce=DEBOUNCE,
            log=log,
            what="policy",
            after_failure=self._retry_later,
        )

    def _retry_later(self) -> None:
        asyncio.get_running_loop().call_later(RETRY_DELAY, self._dirty.set)

    # -- passes ---------------------------------------------------------------------------------

    async def reconcile(self) -> None:
        """Forget what we believe is applied and converge every recorded pod (start-up)."""
        for container_id in self._records.container_ids():
            self._applied[container_id] = _UNKNOWN
        await self.converge()

    async def converge(self) -> None:
        """One pass: every local pod's table made what the view says it should be."""
        started = time.perf_counter()
        self.passes += 1
        records = self._load_records()
        local = self._local_pods(records)
        for gone in set(self._applied) - {r.container_id for r, _ in local}:
            self._applied.pop(gone, None)
            self._locks.pop(gone, None)
        if not local:
            return
        policies = self._policies()
        if not policies and all(
            self._applied.get(r.container_id) == _Applied(None) for r, _ in local
        ):
            return  # nothing governed before, nothing governs now
        peers = self._peers(records)
        targets = [self._target(pod, record) for record, pod in local]
        compiled = compile.compile_pods(
            targets, self._view.objects(model.NAMESPACE), peers, policies, cache=self._views
        )
        for (record, _), target in zip(local, targets, strict=True):
            rules = compiled[compile.pod_key(target)]
            await self._apply(record, rules)
        metrics.POLICY_PASS_SECONDS.observe(time.perf_counter() - started)

    async def enforce(
        self, record: records_mod.PodRecord, pod: model.KubeObject | None = None
    ) -> None:
        """Apply the table of a pod being added, now (inside its ADD). Raises PolicyApplyError.

        `pod`: the object the ADD planned with (it may not be in the view yet)."""
        pod = pod or self._view.lookup_pod(record.namespace, record.pod)
        if pod is None:
            return
        policies = self._policies()
        self._applied.setdefault(record.container_id, _Applied(None))
        if not policies:
            self.notify()  # a new peer for nobody yet; cheap
            return
        target = self._target(pod, record)
        others = [r for r in self._load_records() if r.container_id != record.container_id]
        rules = compile.compile_pods(
            [target],
            self._view.objects(model.NAMESPACE),
            self._peers([record, *others]),
            policies,
            cache=self._views,
        )[compile.pod_key(target)]
        await self._apply(record, rules, raise_errors=True)
        self.notify()  # the others may allow (or deny) the newcomer

    async def discard(self, record: records_mod.PodRecord) -> None:
        """The pod's attachments are going away (DEL, a failed ADD): its table goes too."""
        applied = self._applied.pop(record.container_id, None)
        lock = self._locks.pop(record.container_id, None)
        if applied is not None and applied.script is not None and os.path.exists(record.netns):  # noqa: ASYNC240
            async with lock or asyncio.Lock():
                try:
                    await apply.remove_table(record.netns, timeout=NFT_TIMEOUT)
                except errors.PolicyApplyError as exc:
                    log.warning("%s cannot remove the policy table: %s", record.prefix(), exc)
        self.notify()

    def state(self, container_id: str) -> dict[str, object] | None:
        """What is enforced on a container now (None: not one of ours, or not known yet)."""
        applied = self._applied.get(container_id)
        if applied is None or applied is _UNKNOWN:
            return None
        return {
            "applied": applied.script is not None,
            "interfaces": list(applied.interfaces),
            "policies": list(applied.policies),
            "error": applied.error,
        }

    # -- inputs ---------------------------------------------------------------------------------

    def _load_records(self) -> list[records_mod.PodRecord]:
        """The completed records of Kubernetes pods, sorted by container (stable passes)."""
        out = []
        for container_id in sorted(self._records.container_ids()):
            try:
                record = self._records.load(container_id)
            except records_mod.CorruptPodRecordError:
                continue  # reported by whoever DELs it
            if record is not None and record.complete and record.pod:
                out.append(record)
        return out

    def _local_pods(
        self, records: Iterable[records_mod.PodRecord]
    ) -> list[tuple[records_mod.PodRecord, model.KubeObject]]:
        """The records whose pod the view holds with the same UID."""
        out = []
        for record in records:
            pod = self._view.lookup_pod(record.namespace, record.pod)
            if pod is None:
                continue  # not in the view (yet, or any more): leave its table as it is
            uid = model.uid_of(pod)
            if record.uid and uid and uid != record.uid:
                continue  # a namesake, not this container's pod
            out.append((record, pod))
        return out

    def _policies(self) -> list[Policy]:
        """The valid policies of the view; each invalid one reported once per content.

        A policy updated into an invalid one keeps being enforced as its last valid version
        (same UID) until it is fixed or deleted: an edit with a typo must not open the pods it
        isolates. One invalid since the daemon started has no such version and is skipped.
        """
        good: list[Policy] = []
        seen: set[tuple[str, str, str]] = set()
        for obj in self._view.objects(model.POLICY):
            name = (model.namespace_of(obj), model.name_of(obj))
            key = (
                *name,
                model.meta(obj).get("resourceVersion", "") or json.dumps(obj, sort_keys=True),
            )
            seen.add(key)
            parsed = self._parsed.get(key)
            if parsed is None:
                try:
                    parsed = parse_policy(obj)
                except errors.CNIError as exc:
                    parsed = exc
                    self._report_invalid(obj, exc, self._last_good.get(name))
                self._parsed[key] = parsed
            if isinstance(parsed, Policy):
                self._last_good[name] = parsed
                good.append(parsed)
            elif (last := self._last_good.get(name)) is not None and last.uid == model.uid_of(obj):
                good.append(last)
        for stale in set(self._parsed) - seen:
            del self._parsed[stale]
        for gone in set(self._last_good) - {key[:2] for key in seen}:
            del self._last_good[gone]
        good.sort(key=lambda p: (p.namespace, p.name, p.uid))
        return good

    def _report_invalid(
        self, obj: model.KubeObject, exc: errors.CNIError, last: Policy | None
    ) -> None:
        ns, name = model.namespace_of(obj), model.name_of(obj)
        message = f"{exc.msg}: {exc.details}" if exc.details else exc.msg
        if last is not None and last.uid == model.uid_of(obj):
            message += "; its last valid version stays in force"
            log.warning("MultiNetworkPolicy %s/%s: %s", ns, name, message)
        else:
            log.warning("MultiNetworkPolicy %s/%s skipped: %s", ns, name, message)
        if self._events is not None:
            # record_event only queues: the task ends at once; a reference keeps it alive.
            task = asyncio.get_running_loop().create_task(
                self._events.record_event(
                    ns,
                    name,
                    reason="InvalidPolicy",
                    message=message,
                    type_="Warning",
                    uid=model.uid_of(obj),
                    kind=model.POLICY,
                )
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _entries(self, record: records_mod.PodRecord) -> list[dict[str, object]]:
        return self._status_entries(record)

    def _with_status(
        self, pod: model.KubeObject, entries: Sequence[Mapping[str, object]]
    ) -> model.KubeObject:
        meta = model.ObjectMeta(**model.meta(pod))
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            model.STATUS_ANNOTATION: json.dumps(list(entries)),
        }
        out = model.KubeObject(**pod)
        out["metadata"] = meta
        return out

    def _target(self, pod: model.KubeObject, record: records_mod.PodRecord) -> model.KubeObject:
        """The pod as compile sees it: its secondary interfaces as this node attached them.
        The default network's interface is never governed."""
        entries = [e for e in self._entries(record) if not e.get("default")]
        return self._with_status(pod, entries)

    def _peers(self, records: Iterable[records_mod.PodRecord]) -> list[model.KubeObject]:
        """Every pod of the view with its network-status: the record's for a pod attached
        here, else the annotation, else (directory feed) the pod's status file."""
        by_pod: dict[tuple[str, str], records_mod.PodRecord] = {}
        for rec in records:
            by_pod.setdefault((rec.namespace, rec.pod), rec)
        out = []
        for pod in self._view.objects(model.POD):
            key = (model.namespace_of(pod), model.name_of(pod))
            found = by_pod.get(key)
            uid = model.uid_of(pod)
            if found is not None and (not found.uid or not uid or found.uid == uid):
                out.append(self._with_status(pod, self._entries(found)))
            elif model.annotation(pod, model.STATUS_ANNOTATION) is None and self._status_file:
                entries = self._read_status_file(*key)
                out.append(pod if entries is None else self._with_status(pod, entries))
            else:
                out.append(pod)
        return out

    def _read_status_file(self, namespace: str, name: str) -> list[dict[str, object]] | None:
        assert self._status_file is not None
        try:
            return self._status_file(namespace, name)
        except errors.CNIError:
            return None

    # -- the kernel -----------------------------------------------------------------------------

    async def _apply(
        self,
        record: records_mod.PodRecord,
        rules: Mapping[str, compile.InterfaceRules],
        *,
        raise_errors: bool = False,
    ) -> None:
        key = f"{record.namespace}/{record.pod}"
        script = render.render_table(key, rules)
        governing = sorted(
            {
                uid
                for ir in rules.values()
                for d in (ir.ingress, ir.egress)
                if d is not None
                for uid in d.policy_uids
            }
        )
        want = _Applied(
            script=script,
            interfaces=tuple(sorted(rules)) if script is not None else (),
            policies=tuple(self._policy_names(governing)),
        )
        container_id = record.container_id
        lock = self._locks.setdefault(container_id, asyncio.Lock())
        async with lock:
            current = self._applied.get(container_id, _UNKNOWN)
            if current.script == script and current.error is None and current is not _UNKNOWN:
                self._applied[container_id] = want
                return
            if not os.path.exists(record.netns):  # noqa: ASYNC240 (one stat)
                return  # the sandbox is gone: the sweep will DEL it
            try:
                if script is None:
                    removed = await apply.remove_table(record.netns, timeout=NFT_TIMEOUT)
                    if removed:
                        log.info("%s policy table removed", record.prefix())
                else:
                    await apply.apply_ruleset(record.netns, script, timeout=NFT_TIMEOUT)
                    log.info(
                        "%s policy applied on %s (%s)",
                        record.prefix(),
                        ", ".join(want.interfaces),
                        ", ".join(want.policies),
                    )
            except errors.PolicyApplyError as exc:
                metrics.POLICY_APPLIES.labels(result="error").inc()
                self._applied[container_id] = dataclasses.replace(
                    _UNKNOWN, error=str(exc), interfaces=want.interfaces, policies=want.policies
                )
                log.error("%s %s", record.prefix(), exc)
                if raise_errors:
                    raise
                self._retry_later()
                await self._warn_pod(record, str(exc))
                return
            metrics.POLICY_APPLIES.labels(result="removed" if script is None else "applied").inc()
            self._applied[container_id] = want

    def _policy_names(self, uids: Iterable[str]) -> list[str]:
        by_uid = {p.uid: p.key for p in self._last_good.values()}
        return [by_uid.get(uid, uid) for uid in uids]

    async def _warn_pod(self, record: records_mod.PodRecord, message: str) -> None:
        if self._events is not None:
            await self._events.record_event(
                record.namespace,
                record.pod,
                reason="PolicyApplyFailed",
                message=message,
                type_="Warning",
                uid=record.uid,
            )


__all__ = ["PolicySync"]
