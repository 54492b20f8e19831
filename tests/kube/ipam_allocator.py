"""One node's allocator of netattach's IPAM as a process of its own, for the simulation in
tests/kube/test_ipam_simulation.py: the daemon's `ipam.service.Addresses` over the real API
(`KubeBlockSource`), driven by JSON lines on stdin, answering JSON lines on stdout.

    python -m tests.kube.ipam_allocator KUBECONFIG STATE_DIR NODE LEASE RENEW_EVERY

Requests (each with an `id`, answered with the same `id`, in any order):
    {"op": "assign", "cid": ..., "pool": ..., "subnet": ...}   -> {"address": "10.0.0.2/24"}
    {"op": "release", "cid": ...}                              -> {"ok": true}
    {"op": "sync"}      every change written to the API, then  -> {"held": {address: cid},
                                                                    "blocks": [cidr, ...]}
A refusal answers {"error": "..."}. The first line out is {"ready": true}, after the start (the
ledgers loaded and checked against the API). SIGKILL is how the simulation ends it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from netattach.cni import errors
from tests.kube import ipam_nodes


class Allocator:
    def __init__(self, kubeconfig: Path, state: Path, node: str, lease: float, renew: float):
        self.node = ipam_nodes.Node(
            kubeconfig, state, node, request_timeout=3.0, lease=lease, renew_every=renew
        )
        self.source, self.pools = self.node.source, self.node.pools
        self.out = sys.stdout

    def answer(self, reply: dict[str, Any]) -> None:
        self.out.write(json.dumps(reply) + "\n")
        self.out.flush()

    async def handle(self, request: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"id": request.get("id")}
        try:
            op = request["op"]
            if op == "assign":
                network = ipam_nodes.network(request["pool"], request["subnet"], reuse_delay=1)
                plan = [ipam_nodes.Planned(network)]
                (got,) = await self.pools.assign(plan, container_id=request["cid"])
                ipam = got.network.plugins[0].raw["ipam"]
                reply["address"] = ipam["addresses"][0]["address"]
            elif op == "release":
                self.pools.release(request["cid"])
                reply["ok"] = True
            elif op == "sync":
                await self.source._flush()
                reply["held"] = {
                    str(address): holder.container_id
                    for ledger in self.pools.ledgers.values()
                    for address, holder in ledger.held.items()
                }
                reply["blocks"] = sorted(
                    str(b) for ledger in self.pools.ledgers.values() for b in ledger.blocks
                )
            else:
                reply["error"] = f"unknown op {op!r}"
        except errors.CNIError as exc:
            reply["error"] = f"{type(exc).__name__}: {exc}"
        self.answer(reply)

    async def run(self) -> None:
        await self.pools.start()
        self.answer({"ready": True})
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        tasks: set[asyncio.Task[None]] = set()
        while line := await reader.readline():
            task = asyncio.create_task(self.handle(json.loads(line)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)


def main(argv: list[str]) -> None:
    kubeconfig, state, node, lease, renew = argv
    allocator = Allocator(Path(kubeconfig), Path(state), node, float(lease), float(renew))
    asyncio.run(allocator.run())


if __name__ == "__main__":
    main(sys.argv[1:])
