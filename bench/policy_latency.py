"""From a MultiNetworkPolicy change to traffic blocked (and back), through the real daemon.

One node namespace, the daemon with policy enabled, two pods on a bridge network, on the
directory feed and on the Kubernetes feed (the in-repo fake API). Each run creates a deny-all
ingress policy for the server and times, from the write (the manifest renamed into place / the
API's answer to the create), until the server's netattach table holds the policy's UID — the
moment the kernel drops new connections — then checks with real traffic that TCP is blocked
and ping still answers over eth0. Then it deletes the policy and times until the table is gone
and traffic passes again. The directory feed is woken by inotify when a manifest is written (its
once-a-second poll is only the fallback); the Kubernetes feed is pushed by the watch.

Two series per feed. "quiet": each change made on a node that made no pass for a while (as
one `kubectl apply` meets it), so the time is the feed's and one pass's. "back to back": each
change as soon as the last one was checked, ~3 changes a second, more than the daemon's pass
rate limit lets through at once (`policy_sync.PASS_BURST` passes back to back, then one every
`MIN_PASS_INTERVAL`): most changes wait for their turn.

Usage (root): python -m bench.policy_latency [RUNS]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.e2e.kube_harness import RemoteKubeApi
from tests.e2e.policy_harness import (
    NAD_NS,
    ApiObjects,
    FileObjects,
    LabPod,
    PolicyLab,
    blocked,
    lab_on,
    node_and_pods,
    passes,
    policy_daemon,
)

from netattach.cni import errors
from netattach.daemon import policy_sync
from netattach.policy import apply

ROOT = Path(__file__).resolve().parents[1]
NS = "bench"
NET = f"{NAD_NS}/net"
POLL = 0.005
# each series's pause before a change: long enough for the rate limit's bucket to fill again
# (quiet), or none (back to back)
SERIES = {
    "quiet": policy_sync.PASS_BURST * policy_sync.MIN_PASS_INTERVAL,
    "back to back": 0.0,
}


def zipapp(work: Path) -> Path:
    out = work / "netattach-shim.pyz"
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-shim.sh"), "zipapp", str(out)],
        env={"PYTHON": sys.executable, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        check=True,
        capture_output=True,
    )
    return out


def table(pod: LabPod) -> str | None:
    try:
        return asyncio.run(apply.read_table(pod.netns))
    except errors.PolicyApplyError:
        return None  # listed, then replaced or removed before it was read


def holds(pod: LabPod, uid: str) -> bool:
    return uid in (table(pod) or "")


def until(done: Callable[[], bool], timeout: float = 30.0) -> None:
    started = time.perf_counter()
    while not done():
        if time.perf_counter() - started > timeout:
            raise TimeoutError("the daemon did not converge within 30 s")
        time.sleep(POLL)


def runs_on(lab: PolicyLab, runs: int) -> dict[str, dict[str, list[float]]]:
    """Each series's times (ms): block and unblock `runs` times, each change made its pause
    after the last one was checked."""
    lab.namespace(NS)
    lab.namespace(NAD_NS)
    lab.bridge_network("net", "10.97.0.0/24")
    lab.daemon.start()
    server = lab.pod(NS, "server", NET, labels={"app": "server"})
    client = lab.pod(NS, "client", NET)
    lab.converge(passes(client, server.ip(), "tcp:8080"))
    spec = {"podSelector": {"matchLabels": {"app": "server"}}, "policyTypes": ["Ingress"]}
    found: dict[str, dict[str, list[float]]] = {}
    for series, quiet in SERIES.items():
        out: dict[str, list[float]] = {"block_ms": [], "unblock_ms": []}
        for _ in range(runs):
            time.sleep(quiet)
            started = time.perf_counter()
            uid = lab.policy(NS, "deny", spec, NET)
            until(functools.partial(holds, server, uid))
            out["block_ms"].append((time.perf_counter() - started) * 1000)
            lab.converge(
                blocked(client, server.ip(), "tcp:8080"), passes(client, server.ip("eth0"), "ping")
            )
            time.sleep(quiet)
            started = time.perf_counter()
            lab.delete_policy(NS, "deny")
            until(lambda: table(server) is None)
            out["unblock_ms"].append((time.perf_counter() - started) * 1000)
            lab.converge(passes(client, server.ip(), "tcp:8080"))
        found[series] = out
    return found


@contextlib.contextmanager
def directory_lab(work: Path, shim: Path) -> Iterator[PolicyLab]:
    with (
        node_and_pods(work / "dir") as cluster,
        policy_daemon(cluster, shim) as daemon,
        lab_on(daemon, FileObjects(cluster)) as lab,
    ):
        yield lab


@contextlib.contextmanager
def kube_lab(work: Path, shim: Path) -> Iterator[PolicyLab]:
    with node_and_pods(work / "kube") as cluster:
        api = RemoteKubeApi.launch(cluster.node.path, parent=work)
        try:
            with policy_daemon(cluster, shim) as daemon:
                kubeconfig = api.write_kubeconfig(cluster.root / "kubeconfig")
                daemon.settings["feed"] = {"kubernetes": {"kubeconfig": str(kubeconfig)}}
                daemon.settings["nodeName"] = cluster.node.name
                with lab_on(daemon, ApiObjects(api, cluster.node.name)) as lab:
                    yield lab
        finally:
            api.close()


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50": statistics.median(ordered),
        "max": ordered[-1],
        "min": ordered[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=int, default=10)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="na-bench-pol-") as tmp:
        work = Path(tmp)
        shim = zipapp(work)
        for feed, lab_of in (("directory", directory_lab), ("kubernetes", kube_lab)):
            with lab_of(work, shim) as lab:
                for series, samples in runs_on(lab, args.runs).items():
                    results[f"{feed} {series}"] = {k: summary(v) for k, v in samples.items()}
    print(f"policy change -> enforced in the pod's netns, ms ({args.runs} runs each)")
    print(
        f"{'feed':25} {'block p50':>10} {'block max':>10} {'unblock p50':>12} {'unblock max':>12}"
    )
    for name, found in results.items():
        if name == "runs":
            continue
        b, u = found["block_ms"], found["unblock_ms"]
        print(f"{name:25} {b['p50']:10.1f} {b['max']:10.1f} {u['p50']:12.1f} {u['max']:12.1f}")
    out = ROOT / "bench" / "results" / f"policy-latency-{time.strftime('%Y-%m-%d')}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
