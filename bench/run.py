"""One benchmark run: set up the node, run every scenario, check nothing leaked, undo everything.

Phases, in order: the node (namespace, fake API, two daemons, the runner); pod latency; pod
throughput (with the daemons' peak memory); the leak check (host-local allocations, records,
caches, status files of every contender, all empty after the last DEL); the daemon memory with
a node's worth of pods cached; the shim's start-up; policy compile at scale. Then everything is
undone and `Guard.leftovers()` must be empty; both checks fail the run loudly.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.e2e.kube_harness import RemoteKubeApi

from bench import contenders as contenders_mod
from bench import (
    daemon_memory,
    daemons,
    latency,
    machine,
    node,
    policy_scale,
    shim_startup,
    side_by_side,
    stats,
    throughput,
    topology,
)
from bench import guard as guard_mod
from netattach.netns import links
from netattach.pods import thin
from netattach.settings import daemon as daemon_settings

ROOT = Path(__file__).resolve().parent.parent
NETATTACH = Path(sys.executable).parent / "netattach"
PEER_ENV = "NETATTACH_BENCH_PEER"
PEER_CONF_ENV = "NETATTACH_BENCH_PEER_CONF"
# the daemons keep the default; the floor is bounded alike
DEFAULT_MAX_CONCURRENT_DELEGATES = daemon_settings.DEFAULT_MAX_CONCURRENT_DELEGATES
METRICS_PORTS = {"thick-dir": 19120, "thick-kube": 19121}


class BenchFailedError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Options:
    runs: int = 20
    kinds: tuple[str, ...] = topology.KINDS
    counts: tuple[int, ...] = (0, 2, 7)  # selected networks: 1, 3 and 8 in all
    bursts: tuple[int, ...] = (50, 200)
    memory_pods: int = 5000
    memory_nads: int = 1000
    memory_namespaces: int = 50
    shim_runs: int = 50
    policies: int = 1000
    policy_pods: int = 500
    policy_repeats: int = 1
    shim: Path | None = None
    quick: bool = False


QUICK = Options(
    runs=2,
    counts=(0, 2),
    bursts=(3, 6),
    memory_pods=40,
    memory_nads=8,
    memory_namespaces=4,
    shim_runs=3,
    policies=30,
    policy_pods=12,
    quick=True,
)


def shim_forms(guard: guard_mod.Guard, chosen: Path | None) -> dict[str, Path]:
    """The shim builds to measure; the first is the one thick mode runs."""
    if chosen is not None:
        return {chosen.name: chosen}
    forms: dict[str, Path] = {}
    native = ROOT / "dist" / "netattach-shim"
    if not native.is_file():
        native = guard.work / "netattach-shim"
        subprocess.run(
            [str(ROOT / "scripts" / "build-shim.sh"), "native", str(native)],
            check=True,
            capture_output=True,
        )
    forms["native"] = native
    pyz = ROOT / "dist" / "netattach-shim.pyz"
    if not pyz.exists():
        pyz = guard.work / "netattach-shim.pyz"
        subprocess.run(
            [str(ROOT / "scripts" / "build-shim.sh"), "zipapp", str(pyz)],
            env={**os.environ, "PYTHON": sys.executable},
            check=True,
            capture_output=True,
        )
    forms["zipapp"] = pyz
    return forms


def install_thin(bin_dir: Path) -> Path:
    """`netattach-thin` as a user installs it (`netattach install-cni`)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(NETATTACH), "install-cni", "--bin-dir", str(bin_dir)], check=True, capture_output=True
    )
    return bin_dir / "netattach-thin"


class Node:
    """The node of the latency and throughput scenarios, with its contenders."""

    def __init__(self, guard: guard_mod.Guard, options: Options, shim: Path) -> None:
        self.guard = guard
        self.notes: list[str] = []
        self.topo = topology.Topology(guard.work, guard.name)
        self.node_name = guard.name("node")
        self.path = node.make_node(guard, self.topo.macvlan_master, self.topo.macvlan_peer)
        self.runner = node.NodeRunner(guard, self.path)
        guard.on_undo("stop the node runner", self.runner.close)
        self.api = RemoteKubeApi.launch(
            self.path, bookmark_interval=5.0, history_limit=100000, parent=guard.work
        )
        guard.extra_pids.append(self.api.proc.pid)
        guard.on_undo("stop the fake API", self.api.close)
        self.kubeconfig = self.api.write_kubeconfig(guard.work / "kubeconfig")
        self.latency_pods = {
            (kind, count): self.topo.pod(f"{kind}-{count}", kind, count)
            for kind in options.kinds
            for count in options.counts
        }
        self.burst_pods = [
            self.topo.pod(f"burst-{i:03d}", "bridge", 2) for i in range(max(options.bursts))
        ]
        self._create_objects()
        self.daemons = {
            name: daemons.Daemon(name, guard.work / name, port)
            for name, port in METRICS_PORTS.items()
        }
        feeds: dict[str, dict[str, Any]] = {
            "thick-dir": {"directory": str(self.topo.manifests)},
            "thick-kube": {"kubernetes": {"kubeconfig": str(self.kubeconfig)}},
        }
        for name, daemon in self.daemons.items():
            settings = daemons.write_settings(daemon, self.topo, self.node_name, feeds[name])
            guard.on_undo(f"stop {name}", functools.partial(daemons.stop, daemon))
            daemons.start(guard, daemon, self.path, settings, self.runner)
        self.idle_rss = {name: daemons.memory(d.pid) for name, d in self.daemons.items()}
        self.contenders = self._contenders(shim)

    def _create_objects(self) -> None:
        api = self.api
        api.create(self.topo.namespace_object())
        api.create_many(self.topo.nad_objects())
        specs = [*self.latency_pods.values(), *self.burst_pods]
        created = {}
        for pod in specs:
            obj = api.create(self.topo.pod_object(pod, self.node_name))
            created[pod.name] = obj["metadata"]["uid"]
        self.latency_pods = {
            key: dataclasses.replace(pod, uid=created[pod.name])
            for key, pod in self.latency_pods.items()
        }
        self.burst_pods = [dataclasses.replace(p, uid=created[p.name]) for p in self.burst_pods]
        self.topo.write_manifests([*self.latency_pods.values(), *self.burst_pods], self.node_name)

    def _contenders(self, shim: Path) -> list[contenders_mod.Contender]:
        found: list[contenders_mod.Contender] = [
            contenders_mod.Floor(self.runner, self.topo, DEFAULT_MAX_CONCURRENT_DELEGATES)
        ]
        for name, daemon in self.daemons.items():
            config = contenders_mod.shim_config(daemon.root / "conf")
            found.append(contenders_mod.MetaPlugin(name, self.runner, [str(shim)], config))
        self.thin_state = self.guard.work / "thin" / "state"
        thin = install_thin(self.guard.work / "thin" / "bin")
        found.append(
            contenders_mod.MetaPlugin(
                "thin",
                self.runner,
                [str(thin)],
                contenders_mod.thin_config(self.topo, self.thin_state),
            )
        )
        self.peer_state = self.guard.work / "peer" / "state"
        peer = os.environ.get(PEER_ENV)
        conf = os.environ.get(PEER_CONF_ENV)
        if not peer or not conf:
            self.notes.append(
                f"peer: skipped ({PEER_ENV}=/path/to/binary and {PEER_CONF_ENV}=/path/to/conf.json"
                " not both set; see bench/peer-multus.example.json)"
            )
            return found
        self.peer_state.mkdir(parents=True)
        values = {
            "KUBECONFIG": str(self.kubeconfig),
            "CNI_PATH": contenders_mod.PLUGIN_DIR,
            "NETWORKS_DIR": str(self.topo.networks_dir),
            "DEFAULT_NETWORK": topology.DEFAULT_NETWORK,
            "DEFAULT_NETWORK_FILE": str(self.topo.networks_dir / "00-default.conflist"),
            "MANIFESTS_DIR": str(self.topo.manifests),
            "STATE_DIR": str(self.peer_state),
            "NAMESPACE": topology.NAMESPACE,
        }
        config = contenders_mod.peer_config(Path(conf).read_text(), values)
        found.append(contenders_mod.MetaPlugin("peer", self.runner, [peer], config))
        self.notes.append(f"peer: {peer} with {conf}")
        return found

    def state_dirs(self) -> dict[str, Path]:
        dirs = {name: d.state for name, d in self.daemons.items()}
        return {**dirs, "thin": self.thin_state, "peer": self.peer_state}

    def leaks(self) -> list[str]:
        """What the DELs should have freed and did not."""
        found: list[str] = []
        for path in sorted(self.topo.ipam.rglob("*")):
            if path.is_file() and not path.name.startswith(("last_reserved_ip", "lock")):
                found.append(f"host-local allocation {path.relative_to(self.topo.ipam)}")
        for who, state in self.state_dirs().items():
            if not state.exists():
                continue
            for path in sorted(state.rglob("*")):
                # The thin plugin's manifest parse cache describes the directory, not a pod.
                if path.is_file() and path != state / thin.PARSE_CACHE:
                    found.append(f"{who}: {path.relative_to(state)}")
        status = self.topo.manifests / "status"
        if status.exists():
            found += [f"status file {p}" for p in sorted(status.rglob("*.json"))]
        for name, daemon in self.daemons.items():
            found += [f"{name} logged: {line}" for line in daemons.problems_logged(daemon)[:5]]
        return found


def overhead(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """Per contender and op: p50/p99 minus the floor's, and their ratio."""
    floor = samples["floor"]
    out: dict[str, dict[str, float]] = {}
    for who, ops in samples.items():
        if who == "floor":
            continue
        row: dict[str, float] = {}
        for op in ("add", "del"):
            for q in (50, 99):
                ours = stats.percentile(ops[op], q)
                base = stats.percentile(floor[op], q)
                row[f"{op}_p{q}_ms"] = ours - base
                row[f"{op}_p{q}_ratio"] = ours / base if base else 0.0
        out[who] = row
    return out


def scenarios(guard: guard_mod.Guard, options: Options, result: dict[str, Any]) -> None:
    forms = shim_forms(guard, options.shim)
    shim = next(iter(forms.values()))
    result["shim"] = {"used": str(shim), "forms": {k: str(v) for k, v in forms.items()}}
    if "macvlan" in options.kinds and not links.link_kind_supported("macvlan"):
        kinds = tuple(k for k in options.kinds if k != "macvlan")
        options = dataclasses.replace(options, kinds=kinds)
        result["notes"].append("macvlan: skipped, kernel lacks link type 'macvlan'")
    phase("node: namespace, fake API, two daemons, runner")
    the_node = Node(guard, options, shim)
    result["notes"] += the_node.notes
    objects = 1 + len(the_node.topo.nad_objects()) + len(the_node.latency_pods)
    objects += len(the_node.burst_pods)
    result["notes"].append(
        f"thin lists the whole manifest directory ({objects} objects here, the burst's pods "
        "included) and loads its parse cache on every call; the daemons keep the view in memory"
    )
    result["contenders"] = [c.name for c in the_node.contenders]
    result["bench_daemons"] = {"rss_after_start_kib": the_node.idle_rss}

    result["latency"] = {}
    result["overhead"] = {}
    numbers = itertools.count(1)
    for kind in options.kinds:
        for count in options.counts:
            if count == 0 and kind != options.kinds[0]:
                continue  # a pod on the default network only is the same pod for every kind
            phase(f"latency: {kind} x{count}, {options.runs} runs")
            pod = the_node.latency_pods[(kind, count)]
            samples = latency.measure_pod(guard, the_node.contenders, pod, options.runs, numbers)
            result["latency"].setdefault(kind, {})[str(count)] = {
                who: {
                    "add": stats.summary(ops["add"]),
                    "del": stats.summary(ops["del"]),
                    "samples_ms": ops,
                }
                for who, ops in samples.items()
            }
            result["overhead"].setdefault(kind, {})[str(count)] = overhead(samples)

    phase(f"throughput: {', '.join(map(str, options.bursts))} pods at once")
    bursting = [c for c in the_node.contenders if c.name != "thin"]
    bursts = throughput.measure(
        guard, bursting, the_node.burst_pods, options.bursts, the_node.daemons
    )
    result["throughput"] = {
        str(size): {who: r.to_json() for who, r in by.items()} for size, by in bursts.items()
    }
    for name, daemon in the_node.daemons.items():
        began = time.monotonic()
        daemons.stop(daemon)
        if daemon.proc is not None and daemon.proc.returncode not in (0, None):
            tail = " | ".join(daemon.log.read_text(errors="replace").splitlines()[-5:])
            result["leaks"].append(
                f"{name} exited with {daemon.proc.returncode} after SIGTERM "
                f"({time.monotonic() - began:.1f} s; log: {tail})"
            )
    result["leaks"] += the_node.leaks()

    phase(f"memory: daemon idle, then {options.memory_pods} pods + {options.memory_nads} NADs")
    result["memory"] = daemon_memory.measure(
        guard, options.memory_pods, options.memory_nads, options.memory_namespaces
    )

    phase(f"start-up: VERSION x{options.shim_runs}, each shim form, thin and a delegate")
    programs = {
        **forms,
        "thin": install_thin(guard.work / "startup-bin"),
        "bridge": Path(contenders_mod.PLUGIN_DIR) / "bridge",  # a delegate, for scale
    }
    result["shim_startup"] = shim_startup.measure(programs, options.shim_runs)

    phase(f"policy: {options.policies} policies over {options.policy_pods} pods")
    result["policy"] = policy_scale.measure(
        options.policies, options.policy_pods, options.policy_repeats
    )

    # netattach beside Multus on a real API server (bench/side_by_side.py), bridge pods.
    try:
        part = side_by_side.measure(guard, side_by_side.Options(options.runs, options.counts))
    except side_by_side.UnavailableError as exc:
        result["notes"].append(f"side by side on a real API server: skipped ({exc})")
    else:
        result["side_by_side"] = part
        result["leaks"] += [f"side by side: {leak}" for leak in part["leaks"]]


def phase(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def run(options: Options) -> dict[str, Any]:
    """The whole run; the result as written to JSON. Raises BenchFailedError after writing the
    result's cleanup section when something leaked or was left behind."""
    if os.geteuid() != 0:
        raise BenchFailedError("the benchmark needs root (network namespaces)")
    started = time.time()
    result: dict[str, Any] = {
        "schema": 1,
        "date": datetime.date.today().isoformat(),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "options": {k: _plain(v) for k, v in dataclasses.asdict(options).items()},
        "notes": [],
        "leaks": [],
    }
    swept = guard_mod.sweep_dead_runs()
    if swept:
        result["notes"].append("removed what killed earlier runs left: " + ", ".join(swept))
    with guard_mod.Guard() as guard:
        result["tag"] = guard.tag
        phase(f"run {guard.tag}: names na-{guard.tag}-*, work directory {guard.work}")
        result["machine"] = machine.describe(guard.work)
        result["git"] = machine.git()
        try:
            scenarios(guard, options, result)
        finally:
            failures = guard.undo()
            leftovers = guard.leftovers()
            result["cleanup"] = {
                "undo_failures": failures,
                "leftovers": leftovers,
                "leaks": result["leaks"],
                "clean": not (failures or leftovers or result["leaks"]),
            }
            result["duration_s"] = round(time.time() - started, 1)
            result["machine"]["load_average_at_end"] = list(os.getloadavg())
            if failures or leftovers:
                print(
                    "bench: NOT CLEAN after the run: " + "; ".join(failures + leftovers),
                    file=sys.stderr,
                )
    return result


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value
