"""netattach's IPAM under faults on a real API server: at least ten node allocators, each a
process of its own with its own state directory (tests/kube/ipam_allocator.py), hand out and
free addresses of one pool while the simulation kills them mid-request and starts them again,
wipes a node's disk, takes nodes away for good (their Node deleted: their blocks must come back
once a lease has lapsed) and restarts the API server, once for longer than a lease (the nodes
stop handing out from blocks they could not renew). After every step, with every live
allocator's changes written to the API:

    never twice     no address held twice: not by two containers of the model, not in two
                    nodes' ledgers, not in two blocks' allocations
    nothing leaks   each node's ledger holds exactly the live containers the model gave it (an
                    ADD whose answer never came, or that failed, is DELeted, as the kubelet
                    does), and the API's allocations of each live node's blocks are its ledger's

The steps are drawn from a seeded random generator: NETATTACH_IPAM_SIM_SEED replays a run (the
seed is in every failure's message). IPAM-UNIQUE, IPAM-NOLEAK.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from netattach.cluster import kube_blocks
from tests.kube.cluster import LocalCluster
from tests.kube.kube_http import KubeHttp

pytestmark = pytest.mark.req("IPAM-UNIQUE", "IPAM-NOLEAK")

REPO = Path(__file__).resolve().parents[2]
NODES = 10
STEPS = 30
LEASE = 4.0
RENEW_EVERY = 0.5
SUBNET = "10.210.0.0/21"  # 128 blocks of 16: room for every node and those that replace them
ANSWER_TIMEOUT = 30.0


class AllocatorProcess:
    """tests/kube/ipam_allocator.py run for one node; answers collected by a reader thread."""

    def __init__(self, kubeconfig: Path, state: Path, node: str, log: Path) -> None:
        self.node = node
        self.state = state
        self._log = log.open("a", encoding="utf-8")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.kube.ipam_allocator", str(kubeconfig), str(state),
             node, str(LEASE), str(RENEW_EVERY)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, cwd=REPO,
            text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        self._answers: dict[int, dict[str, Any]] = {}
        self._ready = threading.Event()
        self._done = threading.Condition()
        self._next = 0
        assert self._proc.stdout is not None
        threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True).start()
        if not self._ready.wait(ANSWER_TIMEOUT):
            self.kill()
            raise AssertionError(f"the allocator of {node} did not start (log: {log})")

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            message = json.loads(line)
            if message.get("ready"):
                self._ready.set()
                continue
            with self._done:
                self._answers[message["id"]] = message
                self._done.notify_all()
        with self._done:
            self._done.notify_all()  # the process ended: nobody waits for an answer in vain

    def send(self, op: str, **fields: str) -> int:
        self._next += 1
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"id": self._next, "op": op, **fields}) + "\n")
        self._proc.stdin.flush()
        return self._next

    def answer(self, request: int) -> dict[str, Any] | None:
        """The answer to `request`; None when the process ended without giving it."""
        deadline = time.monotonic() + ANSWER_TIMEOUT
        with self._done:
            while request not in self._answers:
                if self._proc.poll() is not None and request not in self._answers:
                    return None
                left = deadline - time.monotonic()
                assert left > 0, f"{self.node}: no answer to request {request}"
                self._done.wait(min(left, 0.2))
            return self._answers.pop(request)

    def call(self, op: str, **fields: str) -> dict[str, Any]:
        answer = self.answer(self.send(op, **fields))
        assert answer is not None, f"{self.node} ended during {op}"
        return answer

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
        self._proc.wait(10)
        if self._proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self._proc.stdin.close()
        self._log.close()


class Simulation:
    """The allocators, and the model: each live container's node and address."""

    def __init__(
        self, cluster: LocalCluster, http: KubeHttp, base: Path, pool: str, seed: int
    ) -> None:
        self.cluster = cluster
        self.http = http
        self.base = base
        self.pool = pool
        self.seed = seed
        self.rng = random.Random(seed)
        self.nodes: dict[str, AllocatorProcess] = {}
        self.gone: list[str] = []
        self.made_nodes: list[str] = []
        self.live: dict[str, tuple[str, str]] = {}  # container -> (node, address)
        self.history: list[str] = []
        self._count = 0

    # -- nodes ------------------------------------------------------------------------------------

    def add_node(self) -> str:
        name = f"na-sim-{secrets.token_hex(3)}"
        response = self.http.post(
            "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        )
        assert response.status == 201, response.body
        self.made_nodes.append(name)
        self.nodes[name] = self._start(name)
        return name

    def _start(self, name: str) -> AllocatorProcess:
        state = self.base / name
        return AllocatorProcess(
            self.cluster.token_kubeconfig, state, name, self.base / f"{name}.log"
        )

    def close(self) -> None:
        for process in self.nodes.values():
            process.kill()
        self.http.delete(kube_blocks.PATH)
        for name in self.made_nodes:
            self.http.delete(f"/api/v1/nodes/{name}")

    # -- what pods do -----------------------------------------------------------------------------

    def _cid(self) -> str:
        self._count += 1
        return f"c{self._count:05d}"

    def send_adds(self, count: int, node: str = "") -> list[tuple[str, str, int]]:
        """`count` ADDs sent to `node` (else to random nodes), not waited for: (node,
        container, request)."""
        sent = []
        for _ in range(count):
            to = node or self.rng.choice(sorted(self.nodes))
            cid = self._cid()
            request = self.nodes[to].send("assign", cid=cid, pool=self.pool, subnet=SUBNET)
            sent.append((to, cid, request))
        return sent

    def settle(self, sent: list[tuple[str, str, int]]) -> list[str]:
        """Each ADD's answer taken into the model: an address given is a live container; a
        failure, or no answer (its node killed), is DELeted on its node, as the kubelet does.
        The containers left to DEL (their node not running now) are returned."""
        undone = []
        for node, cid, request in sent:
            process = self.nodes.get(node)
            answer = process.answer(request) if process is not None else None
            if answer is not None and "address" in answer:
                self.live[cid] = (node, answer["address"])
            elif answer is not None:
                assert "Exhausted" not in answer["error"], self._where(answer["error"])
                self.nodes[node].call("release", cid=cid)
            else:
                undone.append(cid)
        return undone

    def dels(self, count: int) -> None:
        for cid in self.rng.sample(sorted(self.live), min(count, len(self.live))):
            node, _ = self.live.pop(cid)
            assert self.nodes[node].call("release", cid=cid).get("ok"), self._where(cid)

    # -- steps ------------------------------------------------------------------------------------

    def churn(self) -> None:
        self.settle(self.send_adds(self.rng.randint(5, 25)))
        self.dels(self.rng.randint(0, 12))

    def kill_and_restart(self, *, lose_disk: bool) -> None:
        """A node's daemon killed and started again, with ADDs in flight; or, with
        `lose_disk`, its state directory wiped meanwhile, once its changes are written (what the
        API last heard is all a node with no disk can know: an ADD answered within the writer's
        FLUSH_DELAY of the loss is not)."""
        node = self.rng.choice(sorted(self.nodes))
        sent = []
        if lose_disk:
            self.sync(node)
        else:
            sent = self.send_adds(self.rng.randint(3, 10), node=node)
            time.sleep(self.rng.uniform(0.0, 0.05))
        self.nodes[node].kill()
        unanswered = self.settle(sent)
        if lose_disk:
            shutil.rmtree(self.base / node, ignore_errors=True)  # none until its first ledger
        self.nodes[node] = self._start(node)
        for cid in unanswered:  # the kubelet DELs the sandboxes whose ADD never answered
            assert self.nodes[node].call("release", cid=cid).get("ok"), self._where(cid)

    def node_gone(self) -> None:
        """A node lost for good: its daemon killed, its disk gone, its Node deleted, its
        containers gone with it; another node joins. Its blocks come back to the pool once the
        others have seen them unchanged for a lease."""
        node = self.rng.choice(sorted(self.nodes))
        self.nodes.pop(node).kill()
        shutil.rmtree(self.base / node, ignore_errors=True)
        response = self.http.delete(f"/api/v1/nodes/{node}")
        assert response.status == 200, response.body
        self.live = {cid: held for cid, held in self.live.items() if held[0] != node}
        self.gone.append(node)
        self.add_node()

    def api_restart(self, down: float) -> None:
        sent = self.send_adds(self.rng.randint(5, 15))
        self.cluster.restart_apiserver(down)
        assert not self.settle(sent)

    # -- the checks -------------------------------------------------------------------------------

    def _where(self, message: str) -> str:
        return f"seed {self.seed}, after {' / '.join(self.history[-4:])}: {message}"

    def sync(self, node: str) -> dict[str, Any]:
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while True:
            answer = self.nodes[node].call("sync")
            if "error" not in answer:
                return answer
            assert time.monotonic() < deadline, self._where(f"{node}: {answer['error']}")
            time.sleep(0.2)

    def check(self) -> None:
        views = {node: self.sync(node) for node in sorted(self.nodes)}
        addresses = [a.split("/")[0] for _, a in self.live.values()]
        assert len(addresses) == len(set(addresses)), self._where("two containers, one address")
        in_ledgers = [a for view in views.values() for a in view["held"]]
        assert len(in_ledgers) == len(set(in_ledgers)), self._where("two ledgers, one address")
        for node, view in views.items():
            expected = {a.split("/")[0]: cid for cid, (n, a) in self.live.items() if n == node}
            assert view["held"] == expected, self._where(f"{node}'s ledger is not the model's")
        response = self.http.get(kube_blocks.PATH)
        assert response.status == 200, response.body
        published: dict[str, set[str]] = {}
        for item in response.json()["items"]:
            node = item["spec"]["node"]
            allocations = (item.get("status") or {}).get("allocations") or {}
            if node in views:
                published.setdefault(node, set()).add(item["spec"]["cidr"])
                held = {a for a in views[node]["held"] if _in(a, item["spec"]["cidr"])}
                assert set(allocations) == held, self._where(f"block {item['spec']['cidr']}")
            else:
                assert node in self.gone, self._where(f"block of unknown node {node}")
        for node, view in views.items():
            assert set(view["blocks"]) == published.get(node, set()), self._where(node)

    def run(self, plan: list[str]) -> None:
        for step in plan:
            self.history.append(step)
            if step == "kill":
                self.kill_and_restart(lose_disk=False)
            elif step == "lose-disk":
                self.kill_and_restart(lose_disk=True)
            elif step == "gone":
                self.node_gone()
            elif step == "api-restart":
                self.api_restart(self.rng.uniform(0.0, 1.0))
            elif step == "api-down-past-lease":
                self.api_restart(LEASE + 1.0)
            self.churn()
            self.check()


def _in(address: str, cidr: str) -> bool:
    return ipaddress.ip_address(address) in ipaddress.ip_network(cidr)


@pytest.fixture
def simulation(
    kube_cluster: LocalCluster | None, kube_http: KubeHttp, tmp_path: Path
) -> Iterator[Simulation]:
    if kube_cluster is None:
        pytest.skip("restarts the API server: the tier's own local cluster only")
    seed = int(os.environ.get("NETATTACH_IPAM_SIM_SEED") or secrets.randbits(32))
    sim = Simulation(kube_cluster, kube_http, tmp_path, f"na-sim-{secrets.token_hex(3)}", seed)
    try:
        yield sim
    finally:
        sim.close()


def test_ten_allocators_under_kills_lost_disks_gone_nodes_and_api_restarts(
    simulation: Simulation,
) -> None:
    sim = simulation
    for _ in range(NODES):
        sim.add_node()
    plan = ["kill"] * 8 + ["lose-disk"] * 4 + ["gone"] * 3 + ["api-restart"] * 2
    plan += ["api-down-past-lease"] + ["churn"] * (STEPS - len(plan))
    sim.rng.shuffle(plan)
    sim.run(plan)

    # the gone nodes' blocks back in the pool once a lease has lapsed
    deadline = time.monotonic() + 4 * LEASE + 10
    while True:
        items = sim.http.get(kube_blocks.PATH).json()["items"]
        left = [i["metadata"]["name"] for i in items if i["spec"]["node"] in sim.gone]
        if not left:
            break
        assert time.monotonic() < deadline, sim._where(f"blocks of gone nodes kept: {left}")
        time.sleep(0.5)
    # every container DELeted: nothing held anywhere
    for cid, (node, _) in sorted(sim.live.items()):
        sim.nodes[node].call("release", cid=cid)
    sim.live.clear()
    sim.history.append("all deleted")
    sim.check()
    items = sim.http.get(kube_blocks.PATH).json()["items"]
    assert all(not (i.get("status") or {}).get("allocations") for i in items)
