"""MultiNetworkPolicy under churn: a cluster that never stops changing, enforced on one node.

The daemon's policy component (`daemon.policy_sync.PolicySync`, its `ClusterStore`, pod records
on disk, real `nft` in one real network namespace per local pod) is fed at the store — where
both feeds deliver objects — with the corpus of `bench.policy_corpus` (default 5,000 pods,
1,000 MultiNetworkPolicies, LOCAL of the pods on this node with records and a netns), then a
stream of changes for SECONDS: RELABELS pod relabels, EDITS policy edits and CHURN pod creations
and deletions per second, spread evenly.

Reported:
    one relabel          before the stream, on the quiet cluster: a pod relabelled among them
                         all, changing some local pod's peers, from the store being told to the
                         end of the pass that consumed it; p50 over RELABELS_ALONE of them
    change -> enforced   for each change, from the store being told to the end of the pass
                         that consumed it (every affected local pod's netns written by then);
                         p50, p99, max, and the passes' count and duration
    CPU                  this process (the policy sync, and the change generator, which builds
                         the objects and hands them to the store, as a feed would: also shown on
                         its own), its reaped children (nsenter + nft, where nft runs as a
                         program) and the nft helpers (read from /proc: None when one restarted
                         during the churn), as a share of one core over the churn
    RSS                  VmRSS / VmHWM of this process at the end
    equality             every local pod's table, as the sync applied it, against a
                         from-scratch compile of the final view (`PolicySync.audit`); and what
                         each netns holds (`nft -j list table`) against that table written
                         fresh into a scratch netns

The process's garbage collector is set as `netattach daemon` sets it (`daemon.heap`).

Usage (root): python -m bench.policy_churn [--pods N] [--policies N] [--local N] [--seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import copy
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import policy_corpus
from netattach.attach import status
from netattach.cluster import model, store
from netattach.daemon import heap, policy_sync
from netattach.pods import records
from netattach.policy import render

TICK = 0.01  # the generator's step: each step emits the changes due by then
RELABELS_ALONE = 9  # single relabels timed on the quiet cluster (each changing a local table)


def _ip_netns(*args: str, check: bool = True, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["ip", "netns", *args], input=stdin, text=True, capture_output=True, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"ip netns {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def record_of(container_id: str, netns: str, pod: dict[str, Any]) -> records.PodRecord:
    """The record of a completed ADD that attached what the pod's network-status lists."""
    status = json.loads(pod["metadata"]["annotations"][model.STATUS_ANNOTATION])
    atts = []
    for entry in status:
        ips = [{"address": ip if "/" in ip else f"{ip}/32", "interface": 0} for ip in entry["ips"]]
        atts.append(
            records.AttachmentRecord(
                status_name=entry["name"],
                ifname=entry["interface"],
                is_default=bool(entry.get("default")),
                config={"cniVersion": "1.0.0", "name": entry["name"].replace("/", "-")},
                capability_args={},
                result={
                    "cniVersion": "1.0.0",
                    "interfaces": [{"name": entry["interface"], "sandbox": netns}],
                    "ips": ips,
                },
            )
        )
    meta = pod["metadata"]
    return records.PodRecord(
        container_id=container_id,
        netns=netns,
        namespace=meta["namespace"],
        pod=meta["name"],
        uid=meta["uid"],
        attachments=tuple(atts),
        complete=True,
    )


@contextlib.contextmanager
def namespaces(count: int) -> Iterator[list[str]]:
    names = [f"na-churn-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    try:
        for name in names:
            _ip_netns("add", name)
        yield names
    finally:
        for name in names:
            _ip_netns("delete", name, check=False)


def _listing(netns: str) -> list[Any]:
    """The table as nft holds it, handles aside, sets and chains by name."""
    out = _ip_netns("exec", netns, "nft", "-j", "list", "table", "inet", "netattach", check=False)
    if not out:
        return []

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "handle"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    items = [strip(i) for i in json.loads(out)["nftables"] if "metainfo" not in i]
    by = {"set": "name", "chain": "name", "rule": "chain"}
    return [
        sorted((i for i in items if kind in i), key=lambda i, k=kind, f=field: i[k][f])  # type: ignore[misc]
        for kind, field in by.items()
    ]


class Churn:
    """The change stream: relabels, policy edits, pod creations and deletions."""

    def __init__(
        self, view: store.ClusterStore, corpus: policy_corpus.Corpus, local: set[str], seed: int
    ) -> None:
        self.view = view
        self.rng = random.Random(seed)
        self.pods = {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in corpus.pods
        }
        self.policies = list(corpus.policies)
        self.namespaces = [ns["metadata"]["name"] for ns in corpus.namespaces]
        self.local = local
        self.next_index = len(corpus.pods)
        self.version = 1_000_000
        self.removable = sorted(k for k in self.pods if k not in local)

    def _version(self) -> str:
        self.version += 1
        return str(self.version)

    def relabel(self) -> None:
        key = self.rng.choice(self.removable)
        pod = self.pods[key]
        labels = {**pod["metadata"]["labels"], "app": self.rng.choice(policy_corpus.APPS)}
        pod = {**pod, "metadata": {**pod["metadata"], "labels": labels}}
        pod["metadata"]["resourceVersion"] = self._version()
        self.pods[key] = pod
        self.view.upsert(pod)  # type: ignore[arg-type]

    def edit_policy(self) -> None:
        index = self.rng.randrange(len(self.policies))
        policy = copy.deepcopy(self.policies[index])
        spec = policy["spec"]
        direction = "ingress" if "ingress" in spec else "egress"
        rules = spec.get(direction) or [{}]
        port = {"protocol": "TCP", "port": self.rng.choice((80, 443, 8080, 9000, 9443))}
        rules[0] = {**rules[0], "ports": [port]}
        spec[direction] = rules
        policy["metadata"]["resourceVersion"] = self._version()
        self.policies[index] = policy
        self.view.upsert(policy)  # type: ignore[arg-type]

    def create_or_delete(self) -> None:
        if self.rng.random() < 0.5 and self.removable:
            key = self.removable.pop(self.rng.randrange(len(self.removable)))
            del self.pods[key]
            namespace, name = key.split("/", 1)
            self.view.remove(model.POD, namespace, name)
            return
        ns_index = self.rng.randrange(len(self.namespaces))
        pod = policy_corpus.pod(self.rng, self.next_index, self.namespaces[ns_index], ns_index)
        self.next_index += 1
        pod["metadata"]["resourceVersion"] = self._version()
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        self.pods[key] = pod
        self.removable.append(key)
        self.view.upsert(pod)  # type: ignore[arg-type]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cpu_of(pid: int) -> float:
    """CPU-seconds a live child has used (a long-lived one is no reaped child for rusage)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1])
    return out


async def run(args: argparse.Namespace, work: Path, netns_names: list[str]) -> dict[str, Any]:
    corpus = policy_corpus.build_corpus(policies=args.policies, pods=args.pods)
    view = store.ClusterStore()
    for obj in [*corpus.namespaces, *corpus.pods, *corpus.policies]:
        obj["metadata"].setdefault("resourceVersion", "1")
        view.upsert(obj)  # type: ignore[arg-type]
    view.mark_synced()
    pod_records = records.PodRecords(work / "state")
    rng = random.Random(args.seed)
    local_pods = rng.sample(corpus.pods, args.local)
    for i, (pod, name) in enumerate(zip(local_pods, netns_names, strict=True)):
        pod_records.save(record_of(f"churn{i:04d}", f"/run/netns/{name}", pod), durable=False)
    sync = policy_sync.PolicySync(
        view=view, records=pod_records, status_entries=status.status_entries
    )
    passes: list[tuple[float, float]] = []
    converge = sync.converge

    pass_done = asyncio.Event()

    async def timed() -> None:
        started = time.perf_counter()
        await converge()
        passes.append((started, time.perf_counter()))
        pass_done.set()

    sync.converge = timed  # type: ignore[method-assign]
    started = time.perf_counter()
    task = asyncio.create_task(sync.run())
    while not passes:
        if task.done():
            task.result()  # the reconcile failed: say why
            raise RuntimeError("the policy sync stopped before its first pass")
        await asyncio.sleep(0.05)
    reconcile_s = passes[0][1] - started
    governed = sum(
        1 for i in range(args.local) if (sync.state(f"churn{i:04d}") or {}).get("applied")
    )

    churn = Churn(
        view,
        corpus,
        {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in local_pods},
        args.seed,
    )

    async def relabel_alone() -> float | None:
        """One relabel on the quiet cluster: seconds to the end of the pass that consumed it,
        or None when it changed no local pod's table."""
        # quiet: no pass for as long as passes are spaced apart at least
        await asyncio.sleep(policy_sync.MIN_PASS_INTERVAL)
        before = {cid: state.table for cid, state in sync.tables.applied.items()}
        changed = time.perf_counter()
        churn.relabel()
        while not any(start >= changed for start, _ in passes):
            pass_done.clear()
            await pass_done.wait()
        took = next(end for start, end in passes if start >= changed) - changed
        after = {cid: state.table for cid, state in sync.tables.applied.items()}
        return took if after != before else None

    alone: list[float] = []
    for _ in range(RELABELS_ALONE * 8):
        took = await relabel_alone()
        if took is not None:
            alone.append(took)
            if len(alone) == RELABELS_ALONE:
                break
    streams = [
        (args.relabels, churn.relabel),
        (args.edits, churn.edit_policy),
        (args.churn, churn.create_or_delete),
    ]
    emitted = [0] * len(streams)
    passes_before = len(passes)
    changes: list[float] = []
    usage0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    helper_pids = sync.tables.nft.pids
    helper0 = sum(_cpu_of(pid) for pid in helper_pids)
    begin = time.perf_counter()
    generating = 0.0  # CPU-seconds the generator spent making changes (and the store taking them)
    while (now := time.perf_counter()) - begin < args.seconds:
        for i, (rate, make) in enumerate(streams):
            due = int((now - begin) * rate)
            while emitted[i] < due:
                cpu = time.thread_time()
                make()
                generating += time.thread_time() - cpu
                changes.append(time.perf_counter())
                emitted[i] += 1
        await asyncio.sleep(TICK)
    # Drain: the last changes enforced (a pass starts after the last change and ends).
    last = changes[-1]
    while not any(start >= last for start, _ in passes):
        pass_done.clear()
        await pass_done.wait()
    end = time.perf_counter()
    usage1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    helper_same = helper_pids == sync.tables.nft.pids
    cpu_helper = sum(_cpu_of(pid) for pid in helper_pids) - helper0
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task

    durations = [end - start for start, end in passes[passes_before:]]
    latencies = []
    starts = [s for s, _ in passes]
    for t in changes:
        i = bisect.bisect_left(starts, t)
        latencies.append(passes[i][1] - t)
    cpu_self = (usage1[0].ru_utime + usage1[0].ru_stime) - (usage0[0].ru_utime + usage0[0].ru_stime)
    cpu_children = (usage1[1].ru_utime + usage1[1].ru_stime) - (
        usage0[1].ru_utime + usage0[1].ru_stime
    )
    wall = end - begin
    rss = _rss()

    differing = sync.audit()
    scratch = f"na-churn-scratch-{uuid.uuid4().hex[:6]}"
    _ip_netns("add", scratch)
    mismatched = 0
    try:
        for i, name in enumerate(netns_names):
            state = sync.tables.applied.get(f"churn{i:04d}")
            table = state.table if state is not None else None
            _ip_netns("exec", scratch, "nft", "flush", "ruleset")
            if table is not None:
                _ip_netns("exec", scratch, "nft", "-f", "-", stdin=render.table_text(table))
            if _listing(name) != _listing(scratch):
                mismatched += 1
    finally:
        _ip_netns("delete", scratch, check=False)
    return {
        "pods": args.pods,
        "policies": args.policies,
        "local_pods": args.local,
        "local_pods_governed_at_start": governed,
        "reconcile_s": round(reconcile_s, 2),
        "seconds": args.seconds,
        "changes": len(changes),
        "relabels": emitted[0],
        "policy_edits": emitted[1],
        "pod_creations_deletions": emitted[2],
        "passes": len(passes) - passes_before,
        "pass_ms": {
            "p50": round(1e3 * statistics.median(durations), 1),
            "max": round(1e3 * max(durations), 1),
        },
        "one_relabel_among_all_ms": {
            "p50": round(1e3 * statistics.median(alone), 1) if alone else None,
            "max": round(1e3 * max(alone), 1) if alone else None,
            "count": len(alone),
        },
        "change_to_enforced_ms": {
            "p50": round(1e3 * statistics.median(latencies), 1),
            "p99": round(1e3 * _percentile(latencies, 0.99), 1),
            "max": round(1e3 * max(latencies), 1),
        },
        "cpu_share_of_one_core": {
            "process": round(cpu_self / wall, 3),
            "of_which_generator": round(generating / wall, 3),
            "nft_children": round(cpu_children / wall, 3),
            "nft_helpers": round(cpu_helper / wall, 3) if helper_same else None,
        },
        "rss_mib": round(rss["VmRSS"] / 1024, 1),
        "hwm_mib": round(rss["VmHWM"] / 1024, 1),
        "tables_differing_from_a_from_scratch_compile": len(differing),
        "netns_differing_from_their_table": mismatched,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--policies", type=int, default=1000)
    parser.add_argument("--local", type=int, default=110)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--relabels", type=float, default=50.0, help="per second")
    parser.add_argument("--edits", type=float, default=20.0, help="policy edits per second")
    parser.add_argument("--churn", type=float, default=100.0, help="creations+deletions/s")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench.policy_churn needs root (network namespaces)", file=sys.stderr)
        return 2
    heap.tune()  # this process stands for the daemon, whose collector `netattach daemon` sets
    with (
        tempfile.TemporaryDirectory(prefix="netattach-churn-") as tmp,
        namespaces(args.local) as names,
    ):
        result = asyncio.run(run(args, Path(tmp), names))
    print(json.dumps(result, indent=2))
    return 0 if not result["tables_differing_from_a_from_scratch_compile"] else 1


if __name__ == "__main__":
    sys.exit(main())
