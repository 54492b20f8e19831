"""MultiNetworkPolicy on the pods this node attached: keep each pod's nftables table converged.

The inputs are the cluster view (policies, namespaces, pods and their network-status) and the
pod records (which pods live here, in which netns, with which interfaces and addresses). The
output is, per local pod, one rendered nft script (`policy.render`) or none. A pod's table is
replaced only when its script changes (POL-UPDATE); a pod no policy governs has no table.

Triggers, all coalesced into one debounced pass (under churn, one every `MIN_PASS_INTERVAL`):
    the view changed      a policy, pod, namespace or NAD was added, changed or deleted
    an ADD/DEL finished   a peer address appeared or went away
    a failed apply        retried after `RETRY_DELAY`
A new pod's own table is applied inside its ADD, before the runtime hears of success, so a
governed pod never runs unprotected (`enforce`). At start every recorded pod is reconciled: a
table whose policy went away while the daemon was down is removed.

Each pod's table is changed by one task at a time (a lock per container). nft runs in a process
of its own, the long-lived nft helper (`policy.apply.NftHelper`): no thread of ours changes
namespace.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any

from netattach.cluster import model, store
from netattach.cni import errors
from netattach.daemon import metrics, orchestrator, passes
from netattach.daemon import records as records_mod
from netattach.policy import apply, compile, ir, render, update, views
from netattach.policy.model import Policy, parse_policy

log = logging.getLogger("netattach.policy")

DEBOUNCE = 0.005  # quiet time before a pass: a burst of changes (a relist) makes one pass
# Passes are rate-limited as kube-proxy's syncs (minSyncPeriod, burstSyncs: `passes`): up to
# PASS_BURST back to back, then one per MIN_PASS_INTERVAL. A change on a quiet node is enforced
# at once, a second one soon after too (a policy deleted and made again, a pod and then its
# policy), and a cluster that never stops changing costs a bounded number of passes a second,
# each taking in every change since the last, instead of passes back to back for as long as
# the churn lasts.
MIN_PASS_INTERVAL = 0.375
PASS_BURST = 2
RETRY_DELAY = 5.0  # a failed apply is tried again after this long
NFT_TIMEOUT = 10.0
# Tables of different pods are written side by side, by two helpers (each in its own netns at a
# time). The writes a pass prepares in one turn of the event loop reach each helper as one
# frame (`apply.NftHelper`), so a pass prepares many at once: a pipe write wakes the other
# process, and costs ~0.15 ms on each side on this VM.
APPLY_CONCURRENCY = 64
NFT_HELPERS = 2  # nft helper processes (each writes one table at a time)
# A records directory changed this recently is read again: a save within the same mtime tick as
# the last read would not change the stamp.
RECORDS_SETTLE_NS = 50_000_000

StatusEntries = Callable[[records_mod.PodRecord], list[dict[str, object]]]


@dataclasses.dataclass(slots=True)
class _Applied:
    """What is in a pod's netns now, as far as we know."""

    table: render.Table | None  # None: no table
    interfaces: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    error: str | None = None
    known: bool = True  # False: whatever is there is replaced whole by the next apply


_UNKNOWN = _Applied(table=None, known=False)
_NONE = _Applied(table=None)


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
        # policy (namespace, name) -> its content's key (resourceVersion) and what it parsed to
        self._read: dict[tuple[str, str], tuple[str, Policy | errors.CNIError]] = {}
        self._last_good: dict[tuple[str, str], Policy] = {}
        self._in_force: dict[tuple[str, str], Policy] = {}  # the valid one, or the last good
        self._policy_list: list[Policy] | None = None  # `_in_force`, sorted (None: made again)
        # the policies observed changing since they were last read (None: read every one)
        self._policy_changes: set[tuple[str, str]] | None = None
        self._names: dict[str, str] = {}  # policy UID -> "ns/name", of `_last_good`
        self._tasks: set[asyncio.Task[None]] = set()
        # The incremental compiler, while some valid policy exists (None: nothing is governed,
        # and pods are not even read).
        self._compiler: compile.Compiler | None = None
        self._pending_pods: set[tuple[str, str]] = set()
        self._pending_namespaces: set[str] = set()
        self._pending_policies = True
        self._resync = True  # every object to be read again (start, relist)
        self._loaded: list[records_mod.PodRecord] | None = None  # None: read the records again
        self._targets: dict[str, tuple[object, object]] = {}  # pod key -> (pod, record) seen
        self._unapplied: set[str] = set()  # pod keys compiled anew, not applied yet
        self._records_stamp: int | None = None  # the records directory's mtime when read
        # pod key -> the rules last rendered and their table: the next table is made from it
        # when only peers changed (`render.rebuild_table`)
        self._built: dict[str, render.Built] = {}
        # Element diffs of this pass's in-place updates (many tables share each set's change)
        self._diffs: update.Diffs = {}
        # nft runs in long-lived helper processes, not two execs per write (`apply`)
        self.nft = apply.NftHelpers(NFT_HELPERS)
        self.passes = 0
        view.observers.append(self.observe)

    # -- triggers -------------------------------------------------------------------------------

    def notify(self, _kind: str = "") -> None:
        """Something changed (an ADD or DEL: the pod records): a pass will follow."""
        self._loaded = None
        self._dirty.set()

    def observe(self, kind: str, namespace: str, name: str) -> None:
        """One object of the view changed (the store's observer): a pass will follow."""
        # One change at a time matters only to a compiler that is up to date: without one, or
        # with a resync due, every object is read anyway and `_update_compiler` drops the
        # pending ones unread (a list of thousands of pods would make a set of them all).
        pending = self._compiler is not None and not self._resync
        if kind == model.POD:
            if pending:
                self._pending_pods.add((namespace, name))
            if f"{namespace}/{name}" in self._targets:
                self._loaded = None  # a pod of this node: its record may have changed too
        elif kind == model.NAMESPACE:
            if pending:
                self._pending_namespaces.add(name)
        elif kind == model.POLICY:
            self._pending_policies = True
            if self._policy_changes is not None:
                self._policy_changes.add((namespace, name))
        elif not kind:
            self._resync = self._pending_policies = True
            self._policy_changes = None
        else:
            return  # a NAD: policy does not read it
        self._dirty.set()

    async def run(self) -> None:
        """Reconcile every recorded pod, then converge after every change, until cancelled."""
        try:
            await self.reconcile()
            await passes.debounced_passes(
                self._dirty,
                self.converge,
                debounce=DEBOUNCE,
                log=log,
                what="policy",
                after_failure=self._retry_later,
                min_interval=MIN_PASS_INTERVAL,
                burst=PASS_BURST,
            )
        finally:
            self.close()

    def close(self) -> None:
        """End the nft helper (a later write starts it again)."""
        self.nft.close()

    def _retry_later(self) -> None:
        asyncio.get_running_loop().call_later(RETRY_DELAY, self._dirty.set)

    # -- passes ---------------------------------------------------------------------------------

    async def reconcile(self) -> None:
        """Forget what we believe is applied and converge every recorded pod (start-up)."""
        for container_id in self._records.container_ids():
            self._applied[container_id] = _UNKNOWN
        self._loaded = None
        self._resync = self._pending_policies = True
        self._policy_changes = None
        await self.converge()

    async def converge(self) -> None:
        """One pass: every local pod's table made what the view says it should be, touching
        only the pods a change since the last pass can have altered."""
        started = time.perf_counter()
        self.passes += 1
        if self._nothing_governed() and all(a == _NONE for a in self._applied.values()):
            return  # no policy, no table anywhere: not even the records need reading
        local = self._local_pods(self._current_records())
        for gone in set(self._applied) - {r.container_id for r, _ in local}:
            self._applied.pop(gone, None)
            self._locks.pop(gone, None)
        compiler = self._update_compiler(local)
        if compiler is None:
            for record, _ in local:
                if self._applied.get(record.container_id) != _NONE:
                    await self._apply(record, {})
            return
        todo, self._unapplied = self._unapplied, set()
        writes = []
        for record, pod in local:
            key = views.pod_key(pod)
            applied = self._applied.get(record.container_id, _UNKNOWN)
            if key in todo or not applied.known or applied.error is not None:
                writes.append(self._apply(record, compiler.rules(key)))
        try:
            await _at_most(APPLY_CONCURRENCY, writes)
        finally:
            # The sets they held may go now: freed after the pass (thousands of old sets a
            # pass under churn, ~10 ms that no table waits for).
            held, self._diffs = self._diffs, {}
            asyncio.get_running_loop().call_soon(held.clear)
        metrics.POLICY_PASS_SECONDS.observe(time.perf_counter() - started)

    async def enforce(
        self, record: records_mod.PodRecord, pod: model.KubeObject | None = None
    ) -> None:
        """Apply the table of a pod being added, now (inside its ADD). Raises PolicyApplyError.

        `pod`: the object the ADD planned with (it may not be in the view yet)."""
        pod = pod or self._view.lookup_pod(record.namespace, record.pod)
        if pod is None:
            return
        self._applied.setdefault(record.container_id, _NONE)
        if self._nothing_governed():
            # No valid policy: the newcomer gets no table. Without this, every ADD would read
            # every pod record of the node: a burst of pods would cost its square in reads.
            self.notify()
            return
        records = [r for r in self._current_records() if r.container_id != record.container_id]
        self._loaded = [record, *records]
        local = [(r, p) for r, p in self._local_pods(self._loaded) if r is not record]
        compiler = self._update_compiler([(record, pod), *local])
        self.notify()  # the others may allow (or deny) the newcomer
        if compiler is None:
            return
        key = views.pod_key(pod)
        self._unapplied.discard(key)
        await self._apply(record, compiler.rules(key), raise_errors=True)

    def _nothing_governed(self) -> bool:
        """True when the last look at the policies found no valid one and none changed since
        (a pass or an ADD with a policy to enforce looks again)."""
        return self._compiler is None and not self._pending_policies

    async def discard(self, record: records_mod.PodRecord) -> None:
        """The pod's attachments are going away (DEL, a failed ADD): its table goes too."""
        applied = self._applied.pop(record.container_id, None)
        lock = self._locks.pop(record.container_id, None)
        if applied is not None and applied.table is not None and os.path.exists(record.netns):  # noqa: ASYNC240
            async with lock or asyncio.Lock():
                try:
                    await apply.remove_table(record.netns, timeout=NFT_TIMEOUT, helper=self.nft)
                except errors.PolicyApplyError as exc:
                    log.warning("%s cannot remove the policy table: %s", record.prefix(), exc)
        self.notify()

    def state(self, container_id: str) -> dict[str, object] | None:
        """What is enforced on a container now (None: not one of ours, or not known yet)."""
        applied = self._applied.get(container_id)
        if applied is None or not applied.known:
            return None
        return {
            "applied": applied.table is not None,
            "interfaces": list(applied.interfaces),
            "policies": list(applied.policies),
            "error": applied.error,
        }

    def audit(self) -> dict[str, tuple[render.Table | None, render.Table | None]]:
        """Every local pod whose table, as applied, differs from a from-scratch compile of the
        view now: container -> (applied, from scratch). Empty when the incremental state is
        exactly what compiling everything again gives."""
        local = self._local_pods(self._load_records())
        by_pod = {(r.namespace, r.pod): r for r, _ in reversed(local)}
        peers = [self._peer(pod, by_pod) for pod in self._view.objects(model.POD)]
        targets = [self._target(pod, by_pod.get((r.namespace, r.pod), r)) for r, pod in local]
        compiled = compile.compile_pods(
            targets, self._view.objects(model.NAMESPACE), peers, self._policies()
        )
        out: dict[str, tuple[render.Table | None, render.Table | None]] = {}
        for (record, pod), target in zip(local, targets, strict=True):
            key = views.pod_key(pod)
            want = render.build_table(key, compiled[views.pod_key(target)])
            applied = self._applied.get(record.container_id)
            have = applied.table if applied is not None and applied.known else None
            if applied is None or not applied.known or have != want:
                out[record.container_id] = (have, want)
        return out

    # -- the compiler ---------------------------------------------------------------------------

    def _update_compiler(
        self, local: Sequence[tuple[records_mod.PodRecord, model.KubeObject]]
    ) -> compile.Compiler | None:
        """Bring the compiler up to date with every change observed, and compile what they
        touched; None when no valid policy exists (nothing is governed)."""
        if self._pending_policies or self._compiler is None:
            self._pending_policies = False
            policies = self._policies()
            if not policies:
                # Nothing to compile, so nothing to catch up on: a first policy makes a new
                # compiler, which reads every object again (_resync).
                self._compiler = None
                self._targets.clear()
                self._built.clear()
                self._unapplied.clear()
                self._pending_pods.clear()
                self._pending_namespaces.clear()
                self._resync = False
                return None
            if self._compiler is None:
                self._compiler = compile.Compiler()
                self._resync = True
            self._compiler.set_policies(policies)
        compiler = self._compiler
        by_pod = {(r.namespace, r.pod): r for r, _ in reversed(local)}
        if self._resync:
            self._resync = False
            self._pending_pods.clear()
            self._pending_namespaces.clear()
            self._full_sync(compiler, by_pod)
        else:
            for name in self._pending_namespaces:
                ns = self._view.lookup_namespace(name)
                if ns is None:
                    compiler.remove_namespace(name)
                else:
                    compiler.set_namespace(name, model.labels(ns))
            self._pending_namespaces.clear()
            for ns_name, name in self._pending_pods:
                self._set_peer(compiler, ns_name, name, by_pod)
            self._pending_pods.clear()
        self._set_targets(compiler, local, by_pod)
        self._compile(compiler)
        return compiler

    def _compile(self, compiler: compile.Compiler) -> None:
        self._unapplied |= set(compiler.compile_changed())

    def _full_sync(
        self,
        compiler: compile.Compiler,
        by_pod: Mapping[tuple[str, str], records_mod.PodRecord],
    ) -> None:
        names = set()
        for ns in self._view.objects(model.NAMESPACE):
            names.add(model.name_of(ns))
            compiler.set_namespace(model.name_of(ns), model.labels(ns))
        for gone in compiler.namespaces() - names:
            compiler.remove_namespace(gone)
        keys = set()
        for pod in self._view.objects(model.POD):
            keys.add(views.pod_key(pod))
            compiler.set_pod(compiler.view(self._peer(pod, by_pod)))
        for gone in compiler.pods() - keys:
            compiler.remove_pod(gone)

    def _set_peer(
        self,
        compiler: compile.Compiler,
        namespace: str,
        name: str,
        by_pod: Mapping[tuple[str, str], records_mod.PodRecord],
    ) -> None:
        pod = self._view.lookup_pod(namespace, name)
        if pod is None:
            compiler.remove_pod(f"{namespace}/{name}")
        else:
            compiler.set_pod(compiler.view(self._peer(pod, by_pod)))

    def _set_targets(
        self,
        compiler: compile.Compiler,
        local: Sequence[tuple[records_mod.PodRecord, model.KubeObject]],
        by_pod: Mapping[tuple[str, str], records_mod.PodRecord],
    ) -> None:
        """The local pods as targets (and as peers, with the addresses their records hold);
        a pod and record seen before, the same objects, are not read again."""
        seen: set[str] = set()
        for first, pod in local:
            key = views.pod_key(pod)
            if key in seen:
                continue
            seen.add(key)
            record = by_pod.get((first.namespace, first.pod), first)
            if self._targets.get(key) == (pod, record):
                continue
            self._targets[key] = (pod, record)
            compiler.set_pod(compiler.view(self._with_status(pod, self._entries(record))))
            compiler.set_target(compiler.view(self._target(pod, record)))
        for gone in set(self._targets) - seen:
            del self._targets[gone]
            self._built.pop(gone, None)
            compiler.remove_target(gone)
            namespace, name = gone.split("/", 1)
            self._set_peer(compiler, namespace, name, by_pod)

    # -- inputs ---------------------------------------------------------------------------------

    def _current_records(self) -> list[records_mod.PodRecord]:
        """The records, read again after an ADD or DEL, or when the directory changed (records
        are written by rename: any save changes its mtime)."""
        try:
            stamp: int | None = os.stat(self._records.directory).st_mtime_ns
        except OSError:
            stamp = None
        recent = stamp is not None and time.time_ns() - stamp < RECORDS_SETTLE_NS
        if self._loaded is None or stamp != self._records_stamp or recent:
            self._records_stamp = stamp
            self._loaded = self._load_records()
        return self._loaded

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

        Only the policies observed changing are read again (every one after a relist).
        """
        changed, self._policy_changes = self._policy_changes, set()
        if changed is None:
            present = {
                (model.namespace_of(obj), model.name_of(obj)): obj
                for obj in self._view.objects(model.POLICY)
            }
            for name in self._in_force.keys() | self._last_good.keys() | self._read.keys():
                if name not in present:
                    self._read_policy(name, None)
            for name, obj in present.items():
                self._read_policy(name, obj)
        else:
            for name in changed:
                self._read_policy(name, self._view.lookup(model.POLICY, *name))
        if self._policy_list is None:
            self._policy_list = sorted(
                self._in_force.values(), key=lambda p: (p.namespace, p.name, p.uid)
            )
        return self._policy_list

    def _read_policy(self, name: tuple[str, str], obj: model.KubeObject | None) -> None:
        """The policy `name` as the view holds it now (None: gone): parsed once per content,
        and what is in force for it."""
        before = self._in_force.get(name)
        if obj is None:
            self._read.pop(name, None)
            self._in_force.pop(name, None)
            last = self._last_good.pop(name, None)
            if last is not None:
                self._names.pop(last.uid, None)
        else:
            key = model.meta(obj).get("resourceVersion", "") or json.dumps(obj, sort_keys=True)
            found = self._read.get(name)
            if found is None or found[0] != key:
                try:
                    parsed: Policy | errors.CNIError = parse_policy(obj)
                except errors.CNIError as exc:
                    parsed = exc
                    self._report_invalid(obj, exc, self._last_good.get(name))
                found = self._read[name] = (key, parsed)
            parsed = found[1]
            if isinstance(parsed, Policy):
                last = self._last_good.get(name)
                if last is not None and last is not parsed:
                    self._names.pop(last.uid, None)
                self._last_good[name] = parsed
                self._names[parsed.uid] = parsed.key
                self._in_force[name] = parsed
            elif (last := self._last_good.get(name)) is not None and last.uid == model.uid_of(obj):
                self._in_force[name] = last
            else:
                self._in_force.pop(name, None)
        if self._in_force.get(name) is not before:
            self._policy_list = None

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

    def _peer(
        self,
        pod: model.KubeObject,
        by_pod: Mapping[tuple[str, str], records_mod.PodRecord],
    ) -> model.KubeObject:
        """A pod of the view with its network-status: the record's for a pod attached here,
        else the annotation, else (directory feed) the pod's status file."""
        key = (model.namespace_of(pod), model.name_of(pod))
        found = by_pod.get(key)
        uid = model.uid_of(pod)
        if found is not None and (not found.uid or not uid or found.uid == uid):
            return self._with_status(pod, self._entries(found))
        if model.annotation(pod, model.STATUS_ANNOTATION) is None and self._status_file:
            entries = self._read_status_file(*key)
            return pod if entries is None else self._with_status(pod, entries)
        return pod

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
        rules: Mapping[str, ir.InterfaceRules],
        *,
        raise_errors: bool = False,
    ) -> None:
        key = f"{record.namespace}/{record.pod}"
        table = render.rebuild_table(key, rules, self._built.get(key))
        self._built[key] = (rules, table)
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
            table=table,
            interfaces=tuple(sorted(rules)) if table is not None else (),
            policies=tuple(self._policy_names(governing)),
        )
        container_id = record.container_id
        lock = self._locks.setdefault(container_id, asyncio.Lock())
        async with lock:
            current = self._applied.get(container_id, _UNKNOWN)
            if current.known and current.error is None and current.table == table:
                self._applied[container_id] = want  # no write: the netns holds it already
                return
            try:
                await self._write(record, current, table)
            except errors.PolicyApplyError as exc:
                if not os.path.exists(record.netns):  # noqa: ASYNC240 (one stat)
                    return  # the sandbox is gone: the sweep will DEL it
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
            metrics.POLICY_APPLIES.labels(result="removed" if table is None else "applied").inc()
            self._applied[container_id] = want
            # Said at info when what governs the pod changed; the peers of its rules coming
            # and going (every pass, for most pods, under churn) only at debug.
            same = current.table is not None and (current.interfaces, current.policies) == (
                want.interfaces,
                want.policies,
            )
            level = logging.DEBUG if same else logging.INFO
            if table is not None and log.isEnabledFor(level):
                log.log(
                    level,
                    "%s policy applied on %s (%s)",
                    record.prefix(),
                    ", ".join(want.interfaces),
                    ", ".join(want.policies),
                )

    async def _write(
        self, record: records_mod.PodRecord, current: _Applied, table: render.Table | None
    ) -> None:
        """Make the netns hold `table`: in place when what it holds is known (a failing
        in-place script, a table changed behind our back, falls back to a whole rewrite)."""
        if table is None:
            if await apply.remove_table(record.netns, timeout=NFT_TIMEOUT, helper=self.nft):
                log.info("%s policy table removed", record.prefix())
            return
        if current.known and current.error is None and current.table is not None:
            try:
                changes = update.set_changes(current.table, table, self._diffs)
                if changes is not None:
                    await apply.update_elements(
                        record.netns, changes, timeout=NFT_TIMEOUT, helper=self.nft
                    )
                    return
                script = update.render_update(current.table, table, self._diffs)
                if script is None:
                    return
                await apply.apply_ruleset(
                    record.netns, script, timeout=NFT_TIMEOUT, helper=self.nft
                )
                return
            except errors.PolicyApplyError as exc:
                if not os.path.exists(record.netns):  # noqa: ASYNC240 (one stat)
                    raise  # the sandbox is gone (looked at only now: a stat per write was 2%)
                log.warning("%s in-place policy update failed, rewriting: %s", record.prefix(), exc)
        await apply.apply_ruleset(
            record.netns, render.table_text(table), timeout=NFT_TIMEOUT, helper=self.nft
        )

    def _policy_names(self, uids: Iterable[str]) -> list[str]:
        return [self._names.get(uid, uid) for uid in uids]

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


async def _at_most(limit: int, jobs: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run `jobs` with at most `limit` of them at a time."""
    gate = asyncio.Semaphore(limit)

    async def gated(job: Coroutine[Any, Any, None]) -> None:
        async with gate:
            await job

    await asyncio.gather(*(gated(job) for job in jobs))


__all__ = ["PolicySync"]
