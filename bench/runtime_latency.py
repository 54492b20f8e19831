"""Median latency of one bridge + host-local ADD and DEL: netattach's runtime vs the plugin alone.

Both run the same plugin binary with the same config inside the same node namespace (via
nsenter), alternating run by run. The floor is timed inside `direct.sh` around the plugin exec,
so it excludes the shell's own start-up. Usage (root): python -m bench.runtime_latency [RUNS]
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import report
from netattach.cni import conf
from netattach.netns import links, namespace
from netattach.runtime import chain, execute

PLUGIN_DIR = "/usr/lib/cni"
HERE = Path(__file__).resolve().parent


def bridge_config(bridge: str, ipam_dir: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "benchnet",
        "type": "bridge",
        "bridge": bridge,
        "ipam": {
            "type": "host-local",
            "dataDir": str(ipam_dir),
            "ranges": [[{"subnet": "10.98.0.0/16"}]],
        },
    }


async def direct(
    command: str,
    node: str,
    pod: str,
    cid: str,
    conf_file: Path,
    out_file: Path,
    *,
    ifname: str = "eth0",
) -> float:
    proc = await asyncio.create_subprocess_exec(
        str(HERE / "direct.sh"),
        command,
        node,
        pod,
        cid,
        ifname,
        PLUGIN_DIR,
        "bridge",
        str(conf_file),
        str(out_file),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"direct.sh {command} failed with {proc.returncode}")
    return int(out) / 1e6


async def measure(runs: int, workdir: Path) -> dict[str, list[float]]:
    tag = secrets.token_hex(2)
    node_name = f"na-bench-{tag}"
    node = namespace.create(node_name)
    samples: dict[str, list[float]] = {
        k: [] for k in ("runtime_add", "runtime_del", "direct_add", "direct_del")
    }
    try:
        await asyncio.to_thread(links.set_up, node, "lo")
        raw = bridge_config(f"na-bb-{tag}", workdir / "ipam")
        conf_file = workdir / "bridge.json"
        conf_file.write_text(json.dumps(raw))
        del_file = workdir / "bridge-del.json"
        network = conf.list_from_config(conf.parse_config(raw))
        runtime = chain.Runtime(
            path=[PLUGIN_DIR],
            cache_dir=workdir / "cache",
            executor=execute.SubprocessExec(host_netns=node),
        )
        for i in range(runs + 1):  # the first round warms caches and is not counted
            pod_name = f"na-bp-{tag}-{i}"
            pod = namespace.create(pod_name)
            try:
                order = ("runtime", "direct") if i % 2 == 0 else ("direct", "runtime")
                for who in order:
                    cid = f"bench-{who}-{i}"
                    if who == "runtime":
                        rt = chain.RuntimeConf(
                            container_id=cid,
                            ifname="eth0",
                            netns=pod,
                            args=(("IgnoreUnknown", "1"),),
                        )
                        t0 = time.perf_counter()
                        await runtime.add_network_list(network, rt)
                        t1 = time.perf_counter()
                        await runtime.del_network_list(network, rt)
                        t2 = time.perf_counter()
                        add_ms, del_ms = (t1 - t0) * 1e3, (t2 - t1) * 1e3
                    else:
                        out = workdir / "out.json"
                        add_ms = await direct("ADD", node, pod, cid, conf_file, out)
                        # DEL gets what the runtime's DEL gets: the config plus prevResult
                        del_file.write_text(
                            json.dumps({**raw, "prevResult": json.loads(out.read_text())})
                        )
                        del_ms = await direct("DEL", node, pod, cid, del_file, out)
                    if i > 0:
                        samples[f"{who}_add"].append(add_ms)
                        samples[f"{who}_del"].append(del_ms)
            finally:
                namespace.remove(pod_name)
    finally:
        namespace.remove(node_name)
    return samples


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with tempfile.TemporaryDirectory(prefix="netattach-bench-") as tmp:
        samples = asyncio.run(measure(runs, Path(tmp)))
    report.report("runtime-latency", "bridge + host-local", "runtime", runs, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
