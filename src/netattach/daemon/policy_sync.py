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

This module runs the passes and reads the pod records; the rest is in three parts:

    policy_book     which version of each policy is in force (the last good one of an invalid)
    policy_inputs   the compiler, told what changed in the view and on this node
    policy_tables   what each netns holds, and the nft writes that change it
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

from netattach.cluster import model, store
from netattach.daemon import metrics, passes, policy_tables
from netattach.daemon.policy_book import PolicyBook
from netattach.daemon.policy_inputs import CompilerInputs, StatusEntries
from netattach.daemon.policy_tables import TableWriter
from netattach.pods import ports
from netattach.pods import records as records_mod
from netattach.policy import compile, render, span, views
from netattach.policy.model import Policy

log = logging.getLogger("netattach.policy")

_Labelled = tuple[str, tuple[tuple[str, str], ...]]  # a pod's namespace and labels

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
# Tables of different pods are written side by side, by two helpers (each in its own netns at a
# time). The writes a pass prepares in one turn of the event loop reach each helper as one
# frame (`apply.NftHelper`), so a pass prepares many at once: a pipe write wakes the other
# process, and costs ~0.15 ms on each side on this VM.
APPLY_CONCURRENCY = 64
# A records directory changed this recently is read again: a save within the same mtime tick as
# the last read would not change the stamp.
RECORDS_SETTLE_NS = 50_000_000
# POL-SPAN: how long an ADD waits for the peer groups its pod's policies name to be listed
# (a policy's first governed pod on this node); past it the pod's table is written from what is
# there (fail closed: a peer not read yet is not allowed) and corrected when they arrive.
GROUPS_WAIT = 5.0


class PolicySync:
    """The policy component of the daemon: passes that keep every local pod's table converged."""

    def __init__(
        self,
        *,
        view: store.ClusterStore,
        records: records_mod.PodRecords,
        status_entries: StatusEntries,
        events: ports.EventRecorder | None = None,  # Warnings on policies and pods
        status_file: Callable[[str, str], list[dict[str, object]] | None] | None = None,
        groups: ports.PeerGroupSource | None = None,  # the peers from the controller's groups
        fail_open: bool = False,  # POL-CTRL: a pod whose groups are unpublished has no table
    ) -> None:
        self._view = view
        self._groups = groups
        self._fail_open = fail_open
        self._opened: set[str] = set()  # containers left without a table (fail open)
        self._adding: dict[str, model.KubeObject] = {}  # container -> pod, ADDs under way
        self._groups_given_up: frozenset[str] = frozenset()  # waited for in vain: not again
        # the groups selected, and the policies and local pods' labels they were worked out from
        self._needed: tuple[tuple[Policy, ...], frozenset[_Labelled], set[str]] | None = None
        self._records = records
        self._dirty = asyncio.Event()
        self._loaded: list[records_mod.PodRecord] | None = None  # None: read the records again
        self._records_stamp: int | None = None  # the records directory's mtime when read
        self._book = PolicyBook(view=view, events=events)
        self.tables = TableWriter(book=self._book, events=events, retry_later=self._retry_later)
        self._inputs = CompilerInputs(
            view=view,
            book=self._book,
            status_entries=status_entries,
            status_file=status_file,
            forget_rendered=self.tables.forget_rendered,
            span=groups is not None,
        )
        self.passes = 0
        view.observers.append(self.observe)

    # -- triggers -------------------------------------------------------------------------------

    def notify(self, _kind: str = "") -> None:
        """Something changed (an ADD or DEL: the pod records): a pass will follow."""
        self._loaded = None
        self._dirty.set()

    def observe(self, kind: str, namespace: str, name: str) -> None:
        """One object of the view changed (the store's observer): a pass will follow."""
        if kind == model.POD and self._inputs.is_target(f"{namespace}/{name}"):
            self._loaded = None  # a pod of this node: its record may have changed too
        if self._inputs.observe(kind, namespace, name):
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
        """End the nft helpers (a later write starts them again)."""
        self.tables.close()

    def _retry_later(self) -> None:
        asyncio.get_running_loop().call_later(RETRY_DELAY, self._dirty.set)

    # -- passes ---------------------------------------------------------------------------------

    async def reconcile(self) -> None:
        """Forget what we believe is applied and converge every recorded pod (start-up)."""
        self.tables.doubt(self._records.container_ids())
        self._loaded = None
        self._inputs.resync()
        await self.converge()

    async def converge(self) -> None:
        """One pass: every local pod's table made what the view says it should be, touching
        only the pods a change since the last pass can have altered."""
        started = time.perf_counter()
        self.passes += 1
        applied = self.tables.applied
        if self._inputs.nothing_governed() and all(
            a == policy_tables.NONE for a in applied.values()
        ):
            return  # no policy, no table anywhere: not even the records need reading
        local = self._local_pods(self._current_records())
        self.tables.keep({r.container_id for r, _ in local})
        await self._groups_read()  # the tables stay as they are meanwhile
        compiler = self._inputs.update(local)
        if compiler is None:
            for record, _ in local:
                if applied.get(record.container_id) != policy_tables.NONE:
                    await self.tables.apply_table(record, {})
            return
        todo = self._inputs.take_unapplied()
        unpublished = self._unpublished()
        self._opened &= {record.container_id for record, _ in local}
        writes = []
        for record, pod in local:
            key = views.pod_key(pod)
            current = applied.get(record.container_id, policy_tables.UNKNOWN)
            if unpublished and self._open(record, pod, unpublished):
                if current != policy_tables.NONE:
                    writes.append(self.tables.apply_table(record, {}))
                continue
            reopened = record.container_id in self._opened  # its groups came: its rules now
            self._opened.discard(record.container_id)
            if reopened or key in todo or not current.known or current.error is not None:
                writes.append(self.tables.apply_table(record, compiler.rules(key)))
        try:
            await _at_most(APPLY_CONCURRENCY, writes)
        finally:
            self.tables.end_pass()
        metrics.POLICY_PASS_SECONDS.observe(time.perf_counter() - started)

    async def enforce(
        self, record: records_mod.PodRecord, pod: model.KubeObject | None = None
    ) -> None:
        """Apply the table of a pod being added, now (inside its ADD). Raises PolicyApplyError.

        `pod`: the object the ADD planned with (it may not be in the view yet)."""
        pod = pod or self._view.lookup_pod(record.namespace, record.pod)
        if pod is None:
            return
        self.tables.expect(record.container_id)
        if self._inputs.nothing_governed():
            # No valid policy: the newcomer gets no table. Without this, every ADD would read
            # every pod record of the node: a burst of pods would cost its square in reads.
            self.notify()
            return
        records = [r for r in self._current_records() if r.container_id != record.container_id]
        self._loaded = [record, *records]
        local = [(r, p) for r, p in self._local_pods(self._loaded) if r is not record]
        if self._groups is not None:
            self._adding[record.container_id] = pod  # until the view holds it, or its DEL
            # groups a pass already waited for in vain are not waited for again on each ADD
            wanted = self._select_groups(self._view.objects(model.POD)) - self._groups_given_up
            if wanted:
                await self._groups.wait_groups(wanted, GROUPS_WAIT)
        compiler = self._inputs.update([(record, pod), *local])
        self.notify()  # the others may allow (or deny) the newcomer
        if compiler is None:
            return
        key = views.pod_key(pod)
        self._inputs.applied(key)
        unpublished = self._unpublished()
        if unpublished and self._open(record, pod, unpublished):
            await self.tables.apply_table(record, {}, raise_errors=True)
            return
        await self.tables.apply_table(record, compiler.rules(key), raise_errors=True)

    async def discard(self, record: records_mod.PodRecord) -> None:
        """The pod's attachments are going away (DEL, a failed ADD): its table goes too."""
        self._adding.pop(record.container_id, None)
        await self.tables.remove(record)
        self.notify()

    async def _groups_read(self) -> None:
        """Wait until every group the node's pods need is published and read (a new policy's
        peers come a moment after the policy), at most GROUPS_WAIT; past that the pass goes
        on without them, and no pass waits for them again until they come."""
        if self._groups is None:
            return
        wanted = self._select_groups(self._view.objects(model.POD))
        missing = wanted - self._groups.published_groups()
        if not missing:
            self._groups_given_up = frozenset()
            return
        if missing <= self._groups_given_up:
            return
        if await self._groups.wait_groups(wanted - self._groups_given_up, GROUPS_WAIT):
            return
        missing = wanted - self._groups.published_groups()
        log.warning(
            "policy peers: %d group(s) still unpublished after %gs (is the policy "
            "controller running?); tables written without them",
            len(missing),
            GROUPS_WAIT,
        )
        self._groups_given_up = frozenset(missing)

    def _unpublished(self) -> set[str]:
        """Fail open only: the groups this node's pods need that are not published (each
        waited for already)."""
        if not self._fail_open or self._groups is None or self._needed is None:
            return set()
        return self._needed[2] - self._groups.published_groups()

    def _open(
        self, record: records_mod.PodRecord, pod: model.KubeObject, unpublished: set[str]
    ) -> bool:
        """Fail open: whether the pod's policies name an unpublished group (then it has no
        table until the group comes)."""
        labelled = [(model.namespace_of(pod), dict(model.labels(pod)))]
        ids = {key.id() for key in span.needed(self._book.policies(), labelled)}
        if not ids & unpublished:
            return False
        if record.container_id not in self._opened:
            self._opened.add(record.container_id)
            log.warning(
                "[%s/%s] policy peers unpublished (%s); no table until they come "
                "(policy.unpublishedGroups: failOpen)",
                record.namespace,
                record.pod,
                ", ".join(sorted(ids & unpublished)),
            )
        return True

    def _select_groups(self, pods: Sequence[model.KubeObject]) -> set[str]:
        """POL-SPAN: the peer groups the policies governing `pods` (the view's: this node's,
        each read before its ADD) name, selected for the feed to read (worked out again only
        when the policies or the pods' labels changed)."""
        if self._groups is None:
            return set()
        held = {views.pod_key(p) for p in pods}
        for container, adding in list(self._adding.items()):
            if views.pod_key(adding) in held:
                del self._adding[container]
        pods = [*pods, *self._adding.values()]  # an ADD's pod the view does not hold yet
        policies = tuple(self._book.policies())
        local = frozenset(
            (model.namespace_of(p), tuple(sorted(model.labels(p).items()))) for p in pods
        )
        if self._needed is None or self._needed[:2] != (policies, local):
            labelled = [(ns, dict(labels)) for ns, labels in local]
            wanted = {key.id() for key in span.needed(policies, labelled)}
            self._needed = (policies, local, wanted)
            self._groups.select_groups(wanted)
        return self._needed[2]

    def state(self, container_id: str) -> dict[str, object] | None:
        """What is enforced on a container now (None: not one of ours, or not known yet)."""
        return self.tables.state(container_id)

    def audit(self) -> dict[str, tuple[render.Table | None, render.Table | None]]:
        """Every local pod whose table, as applied, differs from a from-scratch compile of the
        view now: container -> (applied, from scratch). Empty when the incremental state is
        exactly what compiling everything again gives."""
        local = self._local_pods(self._load_records())
        by_pod = {(r.namespace, r.pod): r for r, _ in reversed(local)}
        peers = [self._inputs.peer(pod, by_pod) for pod in self._inputs.peer_objects()]
        targets = [
            self._inputs.target(pod, by_pod.get((r.namespace, r.pod), r)) for r, pod in local
        ]
        compiled = compile.compile_pods(
            targets, self._view.objects(model.NAMESPACE), peers, self._book.policies()
        )
        out: dict[str, tuple[render.Table | None, render.Table | None]] = {}
        for (record, pod), target in zip(local, targets, strict=True):
            key = views.pod_key(pod)
            want = render.build_table(key, compiled[views.pod_key(target)])
            applied = self.tables.applied.get(record.container_id)
            have = applied.table if applied is not None and applied.known else None
            if applied is None or not applied.known or have != want:
                out[record.container_id] = (have, want)
        return out

    # -- records --------------------------------------------------------------------------------

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


async def _at_most(limit: int, jobs: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run `jobs` with at most `limit` of them at a time."""
    gate = asyncio.Semaphore(limit)

    async def gated(job: Coroutine[Any, Any, None]) -> None:
        async with gate:
            await job

    await asyncio.gather(*(gated(job) for job in jobs))


__all__ = ["PolicySync"]
