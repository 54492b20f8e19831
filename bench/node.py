"""The benchmark's node: its network namespace, and the runner process inside it.

`NodeRunner` is the harness's side of `bench.node_runner`: one JSON request per line, one reply.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

from tests.e2e.kube_harness import RemoteKubeApi

from bench import guard as guard_mod
from bench import topology
from netattach.netns import links

ROOT = Path(__file__).resolve().parent.parent
REPLY_TIMEOUT = 600.0


class NodeRunner:
    def __init__(self, guard: guard_mod.Guard, node_path: str) -> None:
        self.proc = guard.spawn(
            ["nsenter", f"--net={node_path}", "--", sys.executable, "-m", "bench.node_runner"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=(guard.work / "node_runner.log").open("wb"),
        )

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], REPLY_TIMEOUT)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            raise RuntimeError(f"the node runner did not answer {request.get('op')!r}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply and request.get("op") not in ("floor",):
            raise RuntimeError(f"the node runner failed {request.get('op')!r}: {reply['error']}")
        return reply

    def http(self, port: int, path: str) -> dict[str, Any]:
        return self.call({"op": "http", "port": port, "path": path})

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(b'{"op": "quit"}\n')
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        guard_mod.stop_process(self.proc)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def make_node(guard: guard_mod.Guard, macvlan_master: str, macvlan_peer: str) -> str:
    """The node namespace, loopback up, a veth pair for the macvlan networks' master; its path."""
    path = guard.netns("node")
    links.set_up(path, "lo")
    links.set_node_forwarding(path)
    links.add_veth_pair(path, macvlan_master, macvlan_peer)
    return path


class KubeNode(NamedTuple):
    """A node namespace with its runner, and the in-repo API server in it holding the
    topology's namespace and NADs."""

    name: str
    path: str
    runner: NodeRunner
    api: RemoteKubeApi
    kubeconfig: Path


def kube_node(guard: guard_mod.Guard, topo: topology.Topology) -> KubeNode:
    """`make_node`, its runner and a fake API in it; everything registered with `guard`."""
    name = guard.name("node")
    path = make_node(guard, topo.macvlan_master, topo.macvlan_peer)
    runner = NodeRunner(guard, path)
    guard.on_undo("stop the node runner", runner.close)
    api = RemoteKubeApi.launch(path, bookmark_interval=5.0, parent=guard.work)
    guard.extra_pids.append(api.proc.pid)
    guard.on_undo("stop the fake API", api.close)
    kubeconfig = api.write_kubeconfig(guard.work / "kubeconfig")
    api.create(topo.namespace_object())
    api.create_many(topo.nad_objects())
    return KubeNode(name, path, runner, api, kubeconfig)
