"""netattach beside Multus on a real API server: one node, the same delegates, pod by pod.

    python -m bench.side_by_side [--quick] [--runs N]      (root; also a phase of `make bench`)

The control plane is the one tests/kube runs on (tests/kube/cluster.py: etcd, kube-apiserver with
RBAC, kube-controller-manager, deploy/crds applied), built by `make k8s`, started *inside* the
benchmark's node namespace through launchers that enter it, so that every contender dials
https://127.0.0.1:PORT directly, as a node's components dial theirs; the harness reaches it from
the host through `bench.forward`, outside anything timed. On it: namespace `bench`, the
topology's NADs, and one pod per shape (the cluster default network only, + 2 and + 7 bridge
networks), each on the node by `spec.nodeName`.

Contenders, alternated pod by pod (`latency.measure_pod` rotates the order every round), all
running Debian's reference plugins in /usr/lib/cni and the same config lists:

    floor         the pod's delegates executed directly
    thick         the native shim -> `netattach daemon` on the Kubernetes feed of this server
    thin          `netattach-thin` (its feed is a manifest directory: the same pods and NADs,
                  with the UIDs the server gave them)
    multus-thin   `multus` (thin plugin), kubeconfig of this server
    multus-thick  `multus-shim` -> `multus-daemon`, kubeconfig of this server

Multus is built from its Go module when the proxy serves it; it did not when this was written
(gopkg.in/k8snetworkplumbingwg/multus-cni.v4 and every other path of the project: 403, "not
available"), so its two contenders run only when NETATTACH_BENCH_MULTUS names a directory holding
`multus`, `multus-daemon` and `multus-shim` built by hand; their configs follow Multus's own
documentation (docs/configuration.md, docs/thick-plugin.md). Without them the run says so, and
ratios are to netattach's thick mode instead.

Each contender's ADD and DEL p50/p90 per shape, and the ratio of each to Multus thick's. After the
last DEL, every host-local allocation, record, cache and status file must be gone.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.kube import cluster as cluster_mod

from bench import contenders as contenders_mod
from bench import daemons, latency, node, stats, table, topology
from bench import guard as guard_mod
from bench import run as run_mod
from netattach.netns import links
from netattach.pods import thin

ROOT = Path(__file__).resolve().parent.parent
MULTUS_ENV = "NETATTACH_BENCH_MULTUS"
MULTUS_MODULE = "gopkg.in/k8snetworkplumbingwg/multus-cni.v4"
MULTUS_BINARIES = ("multus", "multus-daemon", "multus-shim")
THICK_METRICS_PORT = 19150
KIND = "bridge"
READY_TIMEOUT = 60.0
BASELINE = "multus-thick"


@dataclasses.dataclass(frozen=True)
class Options:
    runs: int = 20
    counts: tuple[int, ...] = (0, 2, 7)  # selected networks after the default: 1, 3 and 8


QUICK = Options(runs=2, counts=(0, 2))


class UnavailableError(RuntimeError):
    """What the scenario needs is not there (the control plane not built): why."""


# -- the control plane in the node --------------------------------------------------------------

LAUNCHER = """\
#!{python}
# Runs {binary} inside the benchmark's node namespace; ends with the benchmark (PDEATHSIG).
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)
os.execvp("nsenter", ["nsenter", "--net={node}", "--", "{binary}", *sys.argv[1:]])
"""


def node_launchers(built: Path, directory: Path, node_path: str) -> Path:
    """A directory of launchers, one per control-plane binary, each running the real one in the
    node namespace (nsenter execs it: the PID LocalCluster holds is the component's)."""
    directory.mkdir(parents=True)
    for name in cluster_mod.BINARIES:
        launcher = directory / name
        launcher.write_text(
            LAUNCHER.format(python=sys.executable, binary=built / name, node=node_path)
        )
        launcher.chmod(0o755)
    return directory


class NodeControlPlane:
    """tests/kube's LocalCluster run in the node namespace, reachable from both namespaces at
    the same address (`bench.forward` on the host side)."""

    def __init__(self, guard: guard_mod.Guard, node_path: str) -> None:
        built = cluster_mod.build_dir()
        missing = cluster_mod.missing_binaries(built)
        if missing:
            raise UnavailableError(f"{', '.join(missing)} not built in {built}: run `make k8s`")
        self.version = built.name
        launchers = node_launchers(built, guard.work / "kube-bin", node_path)
        self.cluster = cluster_mod.LocalCluster(guard.work / "kube", launchers)
        port = self.cluster.api_port
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        try:
            guard.spawn(
                [
                    "nsenter",
                    f"--net={node_path}",
                    "--",
                    sys.executable,
                    "-m",
                    "bench.forward",
                    "--fd",
                    str(listener.fileno()),
                    "--port",
                    str(port),
                ],
                cwd=ROOT,
                pass_fds=(listener.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        finally:
            listener.close()
        guard.on_undo("stop the control plane", self.cluster.stop)
        self.cluster.start()
        self.http = self.cluster.admin_http()
        self.kubeconfig = self.cluster.token_kubeconfig

    def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(path, obj)
        if response.status != 201:
            raise RuntimeError(f"POST {path}: {response.status} {response.body[:300]!r}")
        created: dict[str, Any] = response.json()
        return created

    def wait_for(self, path: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while self.http.get(path).status != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{path}: not there after {READY_TIMEOUT:g} s")
            time.sleep(0.2)


# -- Multus ---------------------------------------------------------------------------------------


def multus_dir() -> Path | None:
    """NETATTACH_BENCH_MULTUS when it holds the three binaries."""
    given = os.environ.get(MULTUS_ENV)
    if not given:
        return None
    path = Path(given).resolve()
    missing = [b for b in MULTUS_BINARIES if not (path / b).is_file()]
    if missing:
        raise UnavailableError(f"{MULTUS_ENV}={given} lacks {', '.join(missing)}")
    return path


def multus_config(
    topo: topology.Topology, kubeconfig: Path, state: Path, kind: str
) -> dict[str, Any]:
    """Multus's CNI config (docs/configuration.md): the cluster default network as a file of the
    networks directory, delegates from /usr/lib/cni, its cache in `state`."""
    return {
        "cniVersion": "0.3.1",
        "name": "multus-cni-network",
        "type": kind,
        "kubeconfig": str(kubeconfig),
        "clusterNetwork": str(topo.networks_dir / "00-default.conflist"),
        "confDir": str(topo.networks_dir),
        "binDir": contenders_mod.PLUGIN_DIR,
        "cniDir": str(state),
        "multusNamespace": topology.NAMESPACE,
        "logLevel": "error",
    }


# multus-daemon reads the API through the in-cluster configuration only (a pod's service-account
# files and KUBERNETES_SERVICE_*): they are given to it in a mount namespace of its own, a tmpfs on
# /run/secrets there; the host gets at most the empty directory as a mount point, removed after.
SECRETS = Path("/run/secrets")
IN_CLUSTER = "kubernetes.io/serviceaccount"
MOUNT_CREDENTIALS = (
    'mount -t tmpfs -o mode=0755 tmpfs "$1" && mkdir -p "$1/$2" && cp "$3"/* "$1/$2/"'
    ' && shift 3 && exec "$@"'
)


def in_cluster_credentials(guard: guard_mod.Guard, api: NodeControlPlane, directory: Path) -> Path:
    """The files rest.InClusterConfig reads (token, ca.crt, namespace) for the cluster-admin token
    of `api`, in `directory`; the mount point made when the host lacks it."""
    directory.mkdir(parents=True)
    (directory / "token").write_text(api.cluster.token)
    (directory / "ca.crt").write_bytes((api.cluster.pki / "ca.crt").read_bytes())
    (directory / "namespace").write_text(topology.NAMESPACE)
    if not SECRETS.exists():
        SECRETS.mkdir()
        guard.on_undo(f"remove the mount point {SECRETS}", SECRETS.rmdir)
    return directory


def start_multus_daemon(
    guard: guard_mod.Guard,
    binaries: Path,
    node_path: str,
    node_name: str,
    config: dict[str, Any],
    root: Path,
    api: NodeControlPlane,
) -> dict[str, Any]:
    """`multus-daemon -config FILE` in the node namespace (docs/thick-plugin.md: the server's
    keys beside the CNI config's), with the in-cluster credentials of `api`; the shim's config
    once its socket is there. A mount namespace of its own, a slave of the host's, so that the
    pods' namespaces bound under /run/netns after it started are seen by its delegates."""
    socket_dir = root / "run"
    socket_dir.mkdir(parents=True)
    conf_dir = root / "net.d"
    conf_dir.mkdir()
    credentials = in_cluster_credentials(guard, api, root / "serviceaccount")
    shim_file = root / "00-multus.conf"
    shim = {
        "cniVersion": config["cniVersion"],
        "name": config["name"],
        "type": "multus-shim",
        "daemonSocketDir": str(socket_dir),
        "logLevel": "error",
    }
    shim_file.write_text(json.dumps(shim))
    server = {
        **config,
        "socketDir": str(socket_dir),
        "cniConfigDir": str(conf_dir),
        "multusConfigFile": str(shim_file),
        "logFile": str(root / "multus-daemon.log"),
        "logToStderr": False,
    }
    server_file = root / "daemon-config.json"
    server_file.write_text(json.dumps(server, indent=2))
    with (root / "stdout.log").open("ab") as log:
        proc = guard.spawn(
            [
                *("nsenter", f"--net={node_path}", "--"),
                *("unshare", "--mount", "--propagation", "slave", "--"),
                *("sh", "-c", MOUNT_CREDENTIALS, "sh"),
                *(str(SECRETS), IN_CLUSTER, str(credentials)),
                *(str(binaries / "multus-daemon"), "-config", str(server_file)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={
                "PATH": contenders_mod.RUNTIME_PATH,
                "MULTUS_NODE_NAME": node_name,
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(api.cluster.api_port),
            },
        )
    deadline = time.monotonic() + READY_TIMEOUT
    while not (socket_dir / "multus.sock").exists():
        if proc.poll() is not None:
            raise RuntimeError(f"multus-daemon exited with {proc.returncode}: see {root}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"multus-daemon: no socket in {socket_dir} after {READY_TIMEOUT:g}s")
        time.sleep(0.05)
    return shim


# -- the scenario ---------------------------------------------------------------------------------


class SideBySide:
    """The node, its control plane, its objects and its contenders."""

    def __init__(self, guard: guard_mod.Guard, options: Options) -> None:
        self.guard = guard
        self.notes: list[str] = []
        self.topo = topology.Topology(guard.work / "side", guard.name)
        self.node_name = guard.name("sbs")
        # A namespace of its own (the run's other node is `na-<tag>-node`); bridge networks only.
        self.path = guard.netns("sbs")
        links.set_up(self.path, "lo")
        self.runner = node.NodeRunner(guard, self.path)
        guard.on_undo("stop the side-by-side runner", self.runner.close)
        self.api = NodeControlPlane(guard, self.path)
        self.pods = {
            count: self.topo.pod(f"{KIND}-{count}", KIND, count) for count in options.counts
        }
        self._create_objects()
        self.state: dict[str, Path] = {}
        self.contenders = self._contenders()

    def _create_objects(self) -> None:
        api, ns = self.api, topology.NAMESPACE
        api.create("/api/v1/namespaces", self.topo.namespace_object())
        # Pod admission needs the namespace's `default` ServiceAccount (the controller makes it).
        api.wait_for(f"/api/v1/namespaces/{ns}/serviceaccounts/default")
        for nad in self.topo.nad_objects():
            api.create(
                f"/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions", nad
            )
        for count, pod in self.pods.items():
            created = api.create(
                f"/api/v1/namespaces/{ns}/pods", self.topo.pod_object(pod, self.node_name)
            )
            self.pods[count] = dataclasses.replace(pod, uid=created["metadata"]["uid"])
        self.topo.write_manifests(list(self.pods.values()), self.node_name)

    def _contenders(self) -> list[contenders_mod.Contender]:
        guard, work = self.guard, self.guard.work / "side"
        found: list[contenders_mod.Contender] = [
            contenders_mod.Floor(self.runner, self.topo, run_mod.DEFAULT_MAX_CONCURRENT_DELEGATES)
        ]
        shim = next(iter(run_mod.shim_forms(guard, None).values()))
        self.daemon = daemons.Daemon("thick", work / "thick", THICK_METRICS_PORT)
        feed = {"kubernetes": {"kubeconfig": str(self.api.kubeconfig)}}
        settings = daemons.write_settings(self.daemon, self.topo, self.node_name, feed)
        guard.on_undo("stop thick", functools.partial(daemons.stop, self.daemon))
        daemons.start(guard, self.daemon, self.path, settings, self.runner)
        self.state["thick"] = self.daemon.state
        config = contenders_mod.shim_config(self.daemon.root / "conf")
        found.append(contenders_mod.MetaPlugin("thick", self.runner, [str(shim)], config))

        self.state["thin"] = work / "thin" / "state"
        program = run_mod.install_thin(work / "thin" / "bin")
        config = contenders_mod.thin_config(self.topo, self.state["thin"])
        found.append(contenders_mod.MetaPlugin("thin", self.runner, [str(program)], config))

        binaries = multus_dir()
        if binaries is None:
            self.notes.append(
                f"Multus: not run: the Go module proxy does not serve {MULTUS_MODULE} (nor any "
                f"other path of the project); {MULTUS_ENV}=DIR runs `multus`, `multus-daemon` and "
                "`multus-shim` built by hand; ratios below are to netattach thick"
            )
            return found
        for kind in ("thin", "thick"):
            self.state[f"multus-{kind}"] = work / f"multus-{kind}" / "cache"
            self.state[f"multus-{kind}"].mkdir(parents=True)
        config = multus_config(self.topo, self.api.kubeconfig, self.state["multus-thin"], "multus")
        found.append(
            contenders_mod.MetaPlugin(
                "multus-thin", self.runner, [str(binaries / "multus")], config
            )
        )
        config = multus_config(self.topo, self.api.kubeconfig, self.state["multus-thick"], "multus")
        shim_config = start_multus_daemon(
            guard, binaries, self.path, self.node_name, config, work / "multus-thick", self.api
        )
        found.append(
            contenders_mod.MetaPlugin(
                "multus-thick", self.runner, [str(binaries / "multus-shim")], shim_config
            )
        )
        self.notes.append(f"Multus: {binaries}")
        return found

    def leaks(self) -> list[str]:
        """What the DELs should have freed and did not."""
        found = [
            f"host-local allocation {path.relative_to(self.topo.ipam)}"
            for path in sorted(self.topo.ipam.rglob("*"))
            if path.is_file() and not path.name.startswith(("last_reserved_ip", "lock"))
        ]
        for who, state in self.state.items():
            for path in sorted(state.rglob("*")) if state.exists() else []:
                if path.is_file() and path != state / thin.PARSE_CACHE:
                    found.append(f"{who}: {path.relative_to(state)}")
        status = self.topo.manifests / "status"
        if status.exists():
            found += [f"status file {p}" for p in sorted(status.rglob("*.json"))]
        found += [f"thick logged: {line}" for line in daemons.problems_logged(self.daemon)[:5]]
        return found


def ratios(
    by_who: dict[str, dict[str, dict[str, float]]], baseline: str
) -> dict[str, dict[str, float]]:
    """Each contender's ADD and DEL p50 and p90 as a multiple of `baseline`'s."""
    base = by_who[baseline]
    return {
        who: {
            f"{op}_{q}": ops[op][q] / base[op][q] if base[op][q] else 0.0
            for op in ("add", "del")
            for q in ("p50", "p90")
        }
        for who, ops in by_who.items()
    }


def measure(guard: guard_mod.Guard, options: Options) -> dict[str, Any]:
    """The scenario in `guard`'s run; its part of the result."""
    phase = run_mod.phase
    phase("side by side: a real API server in a node namespace of its own")
    scene = SideBySide(guard, options)
    baseline = BASELINE if any(c.name == BASELINE for c in scene.contenders) else "thick"
    out: dict[str, Any] = {
        "tag": guard.tag,
        "control_plane": scene.api.version,
        "server_version": scene.api.cluster.version().get("gitVersion", ""),
        "kind": KIND,
        "runs": options.runs,
        "contenders": [c.name for c in scene.contenders],
        "baseline": baseline,
        "notes": scene.notes,
        "pods": {},
    }
    numbers = itertools.count(1)
    for count, pod in scene.pods.items():
        phase(f"side by side: default + {count}, {options.runs} rounds")
        samples = latency.measure_pod(guard, scene.contenders, pod, options.runs, numbers)
        summaries = {
            who: {"add": stats.summary(ops["add"]), "del": stats.summary(ops["del"])}
            for who, ops in samples.items()
        }
        out["pods"][str(count)] = {
            "summary": summaries,
            "ratio_to_baseline": ratios(summaries, baseline),
            "samples_ms": samples,
        }
    daemons.stop(scene.daemon)
    out["leaks"] = scene.leaks()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.side_by_side", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 rounds, default and + 2")
    parser.add_argument("--runs", type=int, help="rounds per pod shape (default 20)")
    parser.add_argument("--output", type=Path, help="write the result as JSON here")
    args = parser.parse_args(argv)
    options = QUICK if args.quick else Options()
    if args.runs is not None:
        options = dataclasses.replace(options, runs=args.runs)
    if os.geteuid() != 0:
        print("bench.side_by_side: needs root (network namespaces)", file=sys.stderr)
        return 1
    try:
        part, clean = guard_mod.guarded("bench.side_by_side", lambda g: measure(g, options))
    except UnavailableError as exc:
        print(f"bench.side_by_side: {exc}", file=sys.stderr)
        return 1
    print("\n".join(table.side_by_side_part(part)))
    if args.output is not None:
        args.output.write_text(json.dumps(part, indent=1) + "\n")
    return 0 if clean and not part["leaks"] else 1


if __name__ == "__main__":
    sys.exit(main())
