"""The pod benchmark's setup and two of its contenders (bench.pod_latency runs them).

The pod has the default network + 2 bridge + host-local attachments. `floor` is the bare
delegates: the sum of the three plugin executions as `direct.sh` times them (no shell
start-up). `thin` is netattach-thin as the runtime sees it: process start to exit, Python
start-up included.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.runtime_latency import PLUGIN_DIR, direct


def bridge_list(name: str, bridge: str, subnet: str, ipam: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam),
                    "ranges": [[{"subnet": subnet}]],
                },
            }
        ],
    }


def write_setup(work: Path, tag: str) -> list[dict[str, Any]]:
    ipam = work / "ipam"
    nets = [
        bridge_list("cluster-default", f"na-t0-{tag}", "10.60.0.0/16", ipam),
        bridge_list("net-a", f"na-t1-{tag}", "10.61.0.0/16", ipam),
        bridge_list("net-b", f"na-t2-{tag}", "10.62.0.0/16", ipam),
    ]
    (work / "networks").mkdir()
    (work / "networks" / "default.conflist").write_text(json.dumps(nets[0]))
    (work / "manifests").mkdir()
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}},
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web",
                "namespace": "bench",
                "annotations": {"k8s.v1.cni.cncf.io/networks": "net-a,net-b"},
            },
        },
    ] + [
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": net["name"], "namespace": "bench"},
            "spec": {"config": json.dumps(net)},
        }
        for net in nets[1:]
    ]
    (work / "manifests" / "all.yaml").write_text(
        "\n".join(json.dumps(d) for d in docs).replace("}\n{", "}\n---\n{")
    )
    settings = {
        "clusterNetwork": "cluster-default",
        "networksDir": str(work / "networks"),
        "binDirs": [PLUGIN_DIR],
        "stateDir": str(work / "state"),
        "feed": {"directory": str(work / "manifests")},
    }
    (work / "netattach.conf").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "netattach",
                "type": "netattach-thin",
                "settings": settings,
            }
        )
    )
    return nets


async def thin(command: str, node: str, pod: str, cid: str, work: Path) -> float:
    environ = {
        **os.environ,
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": pod,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": PLUGIN_DIR,
        "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=web",
    }
    executable = str(Path(sys.executable).parent / "netattach-thin")
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        "nsenter",
        f"--net={node}",
        "--",
        executable,
        env=environ,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate((work / "netattach.conf").read_bytes())
    elapsed = (time.perf_counter() - t0) * 1e3
    if proc.returncode != 0:
        raise RuntimeError(f"netattach-thin {command} failed: {out!r} {err!r}")
    return elapsed


async def floor(
    command: str,
    node: str,
    pod: str,
    cid: str,
    nets: list[dict[str, Any]],
    work: Path,
    results: dict[str, Any],
) -> float:
    total = 0.0
    order = nets if command == "ADD" else list(reversed(nets))
    for index, net in enumerate(order):
        ifname = "eth0" if net["name"] == "cluster-default" else f"net{nets.index(net)}"
        conf = {**net["plugins"][0], "name": net["name"], "cniVersion": "1.0.0"}
        if command == "DEL":
            conf["prevResult"] = results[net["name"]]
        stdin = work / f"direct-{index}.json"
        stdin.write_text(json.dumps(conf))
        out = work / "direct-out.json"
        total += await direct(command, node, pod, cid, stdin, out, ifname=ifname)
        if command == "ADD":
            results[net["name"]] = json.loads(out.read_text())
    return total
