"""Memory of `netattach daemon` on the Kubernetes feed: idle, and with a node's worth of pods and
a cluster's worth of NADs in its cache; and how long the first list+watch sync takes.

The fake API server (tests/kube/fake_api.py) and the daemon both run inside a node network
namespace of the benchmark's own (tests/e2e/kube_harness.py: the daemon dials 127.0.0.1 of its
namespace). Two daemon runs, each `nsenter --net=<node> -- netattach daemon --config FILE` with
`feed: {kubernetes: {kubeconfig}}` and metrics on:

    idle     the API holds nothing but its default namespaces
    loaded   PODS pods bound to the daemon's node (labels, annotations, containers, status of a
             real Deployment's pod: ~2 KiB of JSON each), NADS NADs, over NAMESPACES namespaces

For each: the time from spawning the daemon until /metrics says `netattach_cache_synced 1` and
/readyz says 200, then (after SETTLE seconds) VmRSS and VmHWM of the daemon process itself, from
/proc/<pid>/status. Prints a table, writes bench/results/daemon-memory-<stamp>.json, removes
everything it made. Usage (root): python -m bench.daemon_memory [--pods N] [--nads N]
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.e2e.kube_harness import RemoteKubeApi, wait_until

from bench import daemons
from bench import guard as guard_mod
from netattach.netns import links

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DAEMON = Path(sys.executable).parent / "netattach"
PLUGIN_DIR = "/usr/lib/cni"
METRICS_PORT = 19108  # inside the benchmark's own namespace: nothing else listens there
BATCH = 250
SYNC_TIMEOUT = 90.0
SETTLE = 2.0
SAMPLES = 3


# -- the objects --------------------------------------------------------------------------------


def nad(index: int, ns: str) -> dict[str, Any]:
    config = {
        "cniVersion": "1.0.0",
        "name": f"macvlan-{index}",
        "plugins": [
            {
                "type": "macvlan",
                "master": "eth1",
                "mode": "bridge",
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": f"10.{index // 250}.{index % 250}.0/24"}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1"}},
        ],
    }
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": f"net-{index}",
            "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "network-operator"},
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": "example.com/sriov_net"},
        },
        "spec": {"config": json.dumps(config)},
    }


def pod(index: int, ns: str, node: str, nads: list[str]) -> dict[str, Any]:
    """A Deployment's pod as the API holds it once scheduled and running (~2 KiB of JSON)."""
    app = f"svc-{index % 97}"
    template_hash = hashlib.sha256(app.encode()).hexdigest()[:10]
    name = f"{app}-{template_hash}-{index:05d}"
    ip = f"10.244.{index // 250}.{index % 250 + 2}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {
                "app.kubernetes.io/name": app,
                "app.kubernetes.io/instance": f"{app}-prod",
                "app.kubernetes.io/version": "1.27.3",
                "app.kubernetes.io/component": "backend",
                "app.kubernetes.io/part-of": "shop",
                "pod-template-hash": template_hash,
                "team": f"team-{index % 13}",
            },
            "annotations": {
                "k8s.v1.cni.cncf.io/networks": ",".join(nads),
                "kubectl.kubernetes.io/restartedAt": "2026-11-20T08:15:00Z",
                "kubectl.kubernetes.io/default-container": "app",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
                "prometheus.io/path": "/metrics",
                "checksum/config": hashlib.sha256(name.encode()).hexdigest(),
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-{template_hash}",
                    "uid": f"00000000-0000-4000-8000-{index:012d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": app,
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example.com/shop/{app}:1.27.3",
                    "args": ["--config=/etc/app/config.yaml", "--log-level=info"],
                    "ports": [
                        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
                        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
                    ],
                    "env": [
                        {"name": "APP_ENV", "value": "production"},
                        {"name": "APP_REGION", "value": "eu-west-1"},
                    ],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"cpu": "1", "memory": "512Mi"},
                    },
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
                }
            ],
            "volumes": [{"name": "config", "configMap": {"name": f"{app}-config"}}],
        },
        "status": {
            "phase": "Running",
            "hostIP": "192.168.10.21",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": "2026-11-20T08:15:04Z",
        },
    }


def load(api: RemoteKubeApi, node: str, pods: int, nads: int, namespaces: int) -> dict[str, float]:
    """Create the namespaces, NADs and pods; their average stored size (bytes of JSON)."""
    names = [f"bench-{i:03d}" for i in range(namespaces)]
    api.create_many(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in names]
    )
    nad_sizes: list[int] = []
    objs = [nad(i, names[i % namespaces]) for i in range(nads)]
    for start in range(0, len(objs), BATCH):
        nad_sizes += api.create_many(objs[start : start + BATCH])
    per_ns = max(1, nads // namespaces)
    pod_sizes: list[int] = []
    objs = []
    for i in range(pods):
        ns_index = i % namespaces
        # Two of the NADs of the pod's namespace (NAD j lives in namespace j % namespaces).
        picks = [ns_index + namespaces * ((i + k) % per_ns) for k in range(2)]
        selected = [f"net-{j}" for j in sorted(set(picks)) if j < nads]
        objs.append(pod(i, names[ns_index], node, selected))
    for start in range(0, len(objs), BATCH):
        pod_sizes += api.create_many(objs[start : start + BATCH])
    return {
        "pod_bytes": statistics.mean(pod_sizes) if pod_sizes else 0.0,
        "nad_bytes": statistics.mean(nad_sizes) if nad_sizes else 0.0,
    }


# -- the daemon -----------------------------------------------------------------------------------


def write_settings(work: Path, node: str, kubeconfig: Path) -> Path:
    networks = work / "networks"
    networks.mkdir(parents=True, exist_ok=True)
    default = {
        "cniVersion": "1.0.0",
        "name": "bench-default",
        "type": "bridge",
        "bridge": "na-bmbr0",
        "ipam": {"type": "host-local", "subnet": "10.88.0.0/16", "dataDir": str(work / "ipam")},
    }
    (networks / "00-default.conf").write_text(json.dumps(default))
    settings = {
        "clusterNetwork": "bench-default",
        "networksDir": str(networks),
        "binDirs": [PLUGIN_DIR],
        "stateDir": str(work / "state"),
        "nodeName": node,
        "feed": {"kubernetes": {"kubeconfig": str(kubeconfig)}},
        "daemonSocket": str(work / "run" / "netattach.sock"),
        "cniConfDir": str(work / "conf"),
        "cniBinDir": str(work / "bin"),
        "readiness": {"mode": "wait", "timeout": 60},
        "metrics": {"enabled": True, "address": f"127.0.0.1:{METRICS_PORT}"},
        "cleanupOnExit": True,
        "logLevel": "warning",
    }
    path = work / "daemon.yaml"
    path.write_text(json.dumps(settings, indent=2))
    return path


def daemon_pid(proc: subprocess.Popen[bytes]) -> int:
    """The daemon's own PID: nsenter execs it (same PID), unless it forked (then its child)."""
    pid = proc.pid
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    if comm != "nsenter":
        return pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    if len(children) != 1:
        raise RuntimeError(f"nsenter {pid} has children {children}, expected the daemon")
    return int(children[0])


def synced(api: RemoteKubeApi) -> bool:
    reply = api.http_get(METRICS_PORT, "/metrics")
    if reply.get("status") != 200:
        return False
    return any(
        line.split() == ["netattach_cache_synced", "1.0"] for line in reply["body"].splitlines()
    )


def run_daemon(
    guard: guard_mod.Guard, api: RemoteKubeApi, node_path: str, settings: Path, log: Path
) -> dict[str, Any]:
    """Start the daemon, time its sync and readiness, sample its memory, stop it."""
    with log.open("ab") as stream:
        started = time.monotonic()
        proc = guard.spawn(
            [
                "nsenter",
                f"--net={node_path}",
                "--",
                str(DAEMON),
                "daemon",
                "--config",
                str(settings),
            ],
            stdin=subprocess.DEVNULL,
            stdout=stream,
            stderr=subprocess.STDOUT,
            env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
        )
    try:

        def alive_and(check: bool) -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {proc.returncode}: {log.read_text()}")
            return check

        wait_until("cache synced", lambda: alive_and(synced(api)), SYNC_TIMEOUT, every=0.02)
        sync_s = time.monotonic() - started
        wait_until(
            "/readyz 200",
            lambda: alive_and(api.http_get(METRICS_PORT, "/readyz").get("status") == 200),
            SYNC_TIMEOUT,
            every=0.02,
        )
        ready_s = time.monotonic() - started
        pid = daemon_pid(proc)
        time.sleep(SETTLE)
        samples = []
        for _ in range(SAMPLES):
            samples.append(daemons.memory(pid))
            time.sleep(0.5)
        return {
            "pid_was_nsenter": pid != proc.pid,
            "sync_s": sync_s,
            "ready_s": ready_s,
            "rss_kib": int(statistics.median(s["VmRSS"] for s in samples)),
            "hwm_kib": max(s["VmHWM"] for s in samples),
        }
    finally:
        guard_mod.stop_process(proc)


def list_requests(api: RemoteKubeApi) -> dict[str, int]:
    """How many list pages the daemon asked for, by resource."""
    counts: dict[str, int] = {}
    for record in api.requests:
        if record.method == "GET" and not record.watch and record.status == 200:
            plural = record.path.rsplit("/", 1)[-1]
            counts[plural] = counts.get(plural, 0) + 1
    return counts


def measure(guard: guard_mod.Guard, pods: int, nads: int, namespaces: int) -> dict[str, Any]:
    """Idle, then loaded; everything made is registered with `guard` (undone by the caller)."""
    node_name = guard.name("mem")
    work = guard.work / "memory"
    work.mkdir()
    node = guard.netns("mem")
    links.set_up(node, "lo")
    links.set_node_forwarding(node)
    api = RemoteKubeApi.launch(node, bookmark_interval=30.0, parent=guard.work)
    guard.extra_pids.append(api.proc.pid)
    guard.on_undo("stop the fake API of the memory run", api.close)
    kubeconfig = api.write_kubeconfig(work / "kubeconfig")
    settings = write_settings(work, node_name, kubeconfig)
    log = work / "daemon.log"

    idle = run_daemon(guard, api, node, settings, log)
    began = time.monotonic()
    sizes = load(api, node_name, pods, nads, namespaces)
    load_s = time.monotonic() - began
    api.clear_requests()
    loaded = run_daemon(guard, api, node, settings, log)
    loaded["list_requests"] = list_requests(api)
    problems = [
        line
        for line in log.read_text(errors="replace").splitlines()
        if " ERROR " in line or "Traceback" in line
    ]
    if problems:
        raise RuntimeError("the daemon logged errors:\n" + "\n".join(problems[:20]))
    objects = pods + nads + namespaces
    return {
        "pods": pods,
        "nads": nads,
        "namespaces": namespaces,
        "pod_bytes_avg": round(sizes["pod_bytes"]),
        "nad_bytes_avg": round(sizes["nad_bytes"]),
        "api_load_s": round(load_s, 2),
        "idle": idle,
        "loaded": loaded,
        "delta_rss_kib": loaded["rss_kib"] - idle["rss_kib"],
        "per_object_bytes": round(1024 * (loaded["rss_kib"] - idle["rss_kib"]) / objects),
        "rss_mib_per_1000_objects": round(
            (loaded["rss_kib"] - idle["rss_kib"]) / 1024 / (objects / 1000), 2
        ),
        "python": sys.version.split()[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--nads", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=50)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench.daemon_memory needs root (network namespaces)", file=sys.stderr)
        return 2
    result, clean = guard_mod.guarded(
        "bench.daemon_memory", lambda guard: measure(guard, args.pods, args.nads, args.namespaces)
    )
    if not clean:
        return 1
    idle, loaded = result["idle"], result["loaded"]
    print(
        f"netattach daemon on the Kubernetes feed: {args.pods} pods on its node "
        f"(~{result['pod_bytes_avg']} B of JSON each), {args.nads} NADs, "
        f"{args.namespaces} namespaces"
    )
    print(f"{'':8}{'VmRSS MiB':>11}{'VmHWM MiB':>11}{'synced s':>10}{'ready s':>9}")
    for label, run in (("idle", idle), ("loaded", loaded)):
        print(
            f"{label:8}{run['rss_kib'] / 1024:11.1f}{run['hwm_kib'] / 1024:11.1f}"
            f"{run['sync_s']:10.2f}{run['ready_s']:9.2f}"
        )
    print(
        f"{'delta':8}{result['delta_rss_kib'] / 1024:11.1f}{'':11}"
        f"{loaded['sync_s'] - idle['sync_s']:10.2f}   "
        f"({result['per_object_bytes']} B per cached object; list pages {loaded['list_requests']})"
    )
    print(
        f"RSS per 1,000 cached objects: {result['rss_mib_per_1000_objects']:.2f} MiB "
        f"(loaded - idle, over {args.pods + args.nads + args.namespaces} objects)"
    )
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H%M%SZ")
    out = HERE / "results" / f"daemon-memory-{stamp}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
