"""Pod ADD and DEL latency, p50 and p99, for netattach thick (shim → daemon), netattach thin and
the bare delegates, measured in ONE run, alternating the contenders run by run.

The pod has the default network + 2 bridge attachments. Every contender runs the same plugin
binaries with the same configs inside the same node namespace. Thick is timed as the runtime
sees it: the shim's process from start to exit (the Nuitka build from `make shim` when present,
else the zipapp). Usage (root): python -m bench.pod_latency [RUNS] [--shim PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import report
from bench.runtime_latency import HERE, PLUGIN_DIR
from bench.thin_latency import floor, thin, write_setup
from netattach.netns import links, namespace

ROOT = HERE.parent


def default_shim() -> Path:
    built = ROOT / "dist" / "netattach-shim" / "netattach-shim"
    if built.exists():
        return built
    pyz = ROOT / "dist" / "netattach-shim.pyz"
    subprocess.run([str(ROOT / "scripts" / "build-shim.sh"), "zipapp", str(pyz)], check=True)
    return pyz


def start_daemon(work: Path, node: str) -> subprocess.Popen[bytes]:
    conf = json.loads((work / "netattach.conf").read_text())["settings"]
    conf |= {
        "daemonSocket": str(work / "run" / "netattach.sock"),
        "cniConfDir": str(work / "conf"),
        "cniBinDir": str(work / "bin"),
        "metrics": {"enabled": False},
        "maxConcurrentDelegates": 8,
        "logLevel": "warning",
    }
    (work / "daemon.yaml").write_text(json.dumps(conf))
    proc = subprocess.Popen(
        [
            "nsenter",
            f"--net={node}",
            "--",
            str(Path(sys.executable).parent / "netattach"),
            "daemon",
            "--config",
            str(work / "daemon.yaml"),
        ],
        stderr=open(work / "daemon.log", "wb"),  # noqa: SIM115 (lives as long as the daemon)
    )
    deadline = time.monotonic() + 30
    while not (work / "conf" / "00-netattach.conflist").exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"daemon did not get ready: {(work / 'daemon.log').read_text()}")
        time.sleep(0.05)
    return proc


async def thick(command: str, node: str, pod: str, cid: str, work: Path, shim: Path) -> float:
    environ = {
        **os.environ,
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": pod,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": PLUGIN_DIR,
        "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=web",
    }
    stdin = json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "netattach",
            "type": "netattach",
            "daemonSocket": str(work / "run" / "netattach.sock"),
        }
    ).encode()
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        str(shim),
        env=environ,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    elapsed = (time.perf_counter() - t0) * 1e3
    if proc.returncode != 0:
        raise RuntimeError(f"thick {command} failed: {out!r} {err!r}")
    return elapsed


async def measure(runs: int, work: Path, shim: Path) -> dict[str, list[float]]:
    tag = secrets.token_hex(2)
    nets = write_setup(work, tag)
    node_name = f"na-pbn-{tag}"
    node = namespace.create(node_name)
    samples: dict[str, list[float]] = {
        f"{who}_{op}": [] for who in ("thick", "thin", "direct") for op in ("add", "del")
    }
    daemon = None
    try:
        await asyncio.to_thread(links.set_up, node, "lo")
        daemon = start_daemon(work, node)
        contenders = ["thick", "thin", "direct"]
        for i in range(runs + 1):  # round 0 warms caches and is not counted
            pod_name = f"na-pbp-{tag}-{i}"
            pod = namespace.create(pod_name)
            try:
                order = contenders[i % 3 :] + contenders[: i % 3]
                for who in order:
                    cid = f"bench-{who}-{tag}-{i}"
                    if who == "thick":
                        add = await thick("ADD", node, pod, cid, work, shim)
                        dele = await thick("DEL", node, pod, cid, work, shim)
                    elif who == "thin":
                        add = await thin("ADD", node, pod, cid, work)
                        dele = await thin("DEL", node, pod, cid, work)
                    else:
                        results: dict[str, Any] = {}
                        add = await floor("ADD", node, pod, cid, nets, work, results)
                        dele = await floor("DEL", node, pod, cid, nets, work, results)
                    if i > 0:
                        samples[f"{who}_add"].append(add)
                        samples[f"{who}_del"].append(dele)
            finally:
                namespace.remove(pod_name)
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
        namespace.remove(node_name)
    return samples


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="?", type=int, default=30)
    parser.add_argument("--shim", type=Path)
    args = parser.parse_args()
    shim = args.shim or default_shim()
    with tempfile.TemporaryDirectory(prefix="netattach-bench-") as tmp:
        samples = asyncio.run(measure(args.runs, Path(tmp), shim))
    print(f"pod with default + 2 bridge attachments, {args.runs} runs, shim {shim.name} (ms)")
    print(f"{'':10}{'ADD p50':>10}{'ADD p99':>10}{'DEL p50':>10}{'DEL p99':>10}")
    for who in ("direct", "thick", "thin"):
        add, dele = samples[f"{who}_add"], samples[f"{who}_del"]
        print(
            f"{who:10}{statistics.median(add):10.2f}{percentile(add, 99):10.2f}"
            f"{statistics.median(dele):10.2f}{percentile(dele, 99):10.2f}"
        )
    report.report("pod-latency", "thick vs bare delegates", "thick", args.runs, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
