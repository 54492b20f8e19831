"""netattach's IPAM across a cluster on the real API server (`make k8s`'s kube-apiserver and
etcd, tests/kube/cluster.py): simulated nodes, each the daemon's `ipam.service.Addresses` over
`KubeBlockSource` with its own API connection and state directory, in this process.

    fill      1,000 pods' allocations spread over 10 nodes (pod i on node i mod 10), ten ADDs
              in flight per node: the total time, each ADD's latency, the block claims' latency,
              API requests (claims and the background writes of the allocations), duplicates
    steady    every one of those pods replaced (its DEL, then a new pod's ADD) with the nodes'
              blocks held: API requests per allocation, latency, duplicates
    alone     a block claim with nothing else going on: one node takes 20 blocks in a row

The pool's `reuseDelay` is 0 here, so a node replacing pods reuses what it freed at once: the
steady state of a node whose blocks already cover its pods and what waits out the delay (with the
default 30 s, a node replacing N pods in 30 s holds N/16 blocks more, claimed once).

Usage: python -m bench.ipam_cluster [--nodes N] [--pods N]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import ipaddress
import json
import secrets
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tests.kube import ipam_nodes

from bench import stats
from netattach.cluster import kube_blocks, kube_client
from netattach.cni import conf
from netattach.ipam import kube_source, service

SUBNET = "10.230.0.0/18"  # 1,024 blocks of 16


class TimedSource(kube_source.KubeBlockSource):
    """The source with each claim's wall time noted."""

    claims_ms: list[float]

    async def claim(self, pool: str, candidates: Any) -> Any:
        began = time.perf_counter()
        try:
            return await super().claim(pool, candidates)
        finally:
            self.claims_ms.append((time.perf_counter() - began) * 1000)


class SimNode:
    def __init__(self, kubeconfig: Path, state: Path, name: str, claims_ms: list[float]) -> None:
        self.name = name
        self.api = kube_client.ApiClients(kubeconfig, kube_client.KubeTiming())
        self.source = TimedSource(ipam_nodes.RecordedObjects(self.api.writes), node=name)
        self.source.claims_ms = claims_ms
        self.pools = service.Addresses(state, self.source)


async def _phase(
    nodes: list[SimNode], work: list[list[tuple[str, str]]], network: conf.NetworkConfigList
) -> tuple[float, list[float], dict[str, str]]:
    """Each node's (DEL first, or "", then ADD) pairs, ten at a time per node: wall time, ADD
    latencies, the addresses given (container -> address)."""
    given: dict[str, str] = {}
    latencies: list[float] = []

    async def one(node: SimNode, leaving: str, cid: str) -> None:
        if leaving:
            node.pools.release(leaving)
        began = time.perf_counter()
        (got,) = await node.pools.assign([ipam_nodes.Planned(network)], container_id=cid)
        latencies.append((time.perf_counter() - began) * 1000)
        given[cid] = got.network.plugins[0].raw["ipam"]["addresses"][0]["address"]

    async def node_work(node: SimNode, pairs: list[tuple[str, str]]) -> None:
        gate = asyncio.Semaphore(10)

        async def gated(leaving: str, cid: str) -> None:
            async with gate:
                await one(node, leaving, cid)

        await asyncio.gather(*(gated(leaving, cid) for leaving, cid in pairs))

    began = time.perf_counter()
    await asyncio.gather(*(node_work(n, w) for n, w in zip(nodes, work, strict=True)))
    return (time.perf_counter() - began) * 1000, latencies, given


async def _settle(nodes: list[SimNode]) -> None:
    """Every node's pending writes done (the writer's gathering delay, then its flush)."""
    await asyncio.sleep(kube_source.FLUSH_DELAY * 2)
    for node in nodes:
        await node.source._flush()


def _requests(nodes: list[SimNode]) -> collections.Counter[str]:
    total: collections.Counter[str] = collections.Counter()
    for node in nodes:
        assert isinstance(node.source.objects, ipam_nodes.RecordedObjects)
        total.update(sent.split()[0] for sent in node.source.objects.sent)
    return total


def _duplicates(given: Mapping[str, str]) -> int:
    """How many of the addresses given (container -> address) another container was given too."""
    addresses = [ipaddress.ip_interface(a).ip for a in given.values()]
    return len(addresses) - len(set(addresses))


async def simulate(kubeconfig: Path, work: Path, nodes: int, pods: int) -> dict[str, Any]:
    pool = f"bench-{secrets.token_hex(3)}"
    network = ipam_nodes.network(pool, SUBNET)
    claims_ms: list[float] = []
    sims = [
        SimNode(kubeconfig, work / f"node-{i}", f"bench-node-{i}", claims_ms) for i in range(nodes)
    ]
    result: dict[str, Any] = {"nodes": nodes, "pods": pods, "pool_subnet": SUBNET}
    try:
        for sim in sims:
            await sim.pools.start()
        cids = [f"fill-{i:05d}" for i in range(pods)]
        result["fill"] = await _measured(
            sims, [[("", c) for c in cids[i::nodes]] for i in range(nodes)], network, claims_ms
        )
        result["fill"]["claim_ms"] = stats.summary(claims_ms)
        new = [f"steady-{i:05d}" for i in range(pods)]
        work_steady = [list(zip(cids[i::nodes], new[i::nodes], strict=True)) for i in range(nodes)]
        result["steady"] = await _measured(sims, work_steady, network, claims_ms)
        for sim in sims:
            for cid in new[sims.index(sim) :: nodes]:
                sim.pools.release(cid)
        result["claim_alone_ms"] = await _claims_alone(sims[0], pool)
    finally:
        for sim in sims:
            await sim.pools.close()
            await sim.api.aclose()
        with contextlib.suppress(Exception):
            await _delete_blocks(kubeconfig)
    return result


async def _measured(
    sims: list[SimNode],
    work: list[list[tuple[str, str]]],
    network: conf.NetworkConfigList,
    claims_ms: list[float],
) -> dict[str, Any]:
    """One phase, its writes settled: wall time, ADD latency, claims and API requests made, per
    allocation, and the addresses given twice."""
    claims_before, before = len(claims_ms), _requests(sims)
    wall, latencies, given = await _phase(sims, work, network)
    await _settle(sims)
    made = _requests(sims) - before
    return {
        "wall_ms": wall,
        "add_ms": stats.summary(latencies),
        "claims": len(claims_ms) - claims_before,
        "requests": dict(made),
        "requests_per_allocation": sum(made.values()) / len(latencies),
        "duplicates": _duplicates(given),
    }


async def _claims_alone(node: SimNode, pool: str, count: int = 20) -> dict[str, float]:
    """A block claim's latency with nothing else going on: one node takes `count` blocks one
    after another (each the list of the IPBlocks and the create)."""
    from netattach.ipam import allocator, config

    cfg = config.parse_pool(
        {"type": "netattach", "subnet": SUBNET, "reuseDelay": 0}, pool, source="bench"
    )
    taken = set(node.pools.ledgers[pool].blocks)
    alone: list[float] = []
    for _ in range(count):
        began = time.perf_counter()
        claimed = await node.source.claim(pool, allocator.unheld_blocks(cfg, 0, taken))
        alone.append((time.perf_counter() - began) * 1000)
        assert claimed.block is not None
        taken.add(claimed.block)
    return stats.summary(alone)


async def _delete_blocks(kubeconfig: Path) -> None:
    api = kube_client.ApiClients(kubeconfig, kube_client.KubeTiming())
    try:
        await api.writes.request("DELETE", kube_blocks.PATH)
    finally:
        await api.aclose()


@contextlib.contextmanager
def cluster(work: Path) -> Iterator[Path]:
    from tests.kube.cluster import local_cluster

    with local_cluster(work / "kube") as running:
        yield running.token_kubeconfig


def measure(nodes: int = 10, pods: int = 1000) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="na-bench-ipam-") as tmp:
        work = Path(tmp)
        with cluster(work) as kubeconfig:
            return asyncio.run(simulate(kubeconfig, work, nodes, pods))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--pods", type=int, default=1000)
    args = parser.parse_args()
    print(json.dumps(measure(args.nodes, args.pods), indent=2))


if __name__ == "__main__":
    main()
