"""Pod-start latency through a real kubelet: from the API's create to the pod Running.

The node of tests/node/real_node.py (kube-apiserver, kube-controller-manager, the kubelet and
containerd `make k8s` and Debian give, deploy/'s DaemonSet from `make image`'s image), pods of one
pause container created through the API with `spec.nodeName` set (no scheduler in the path), one
at a time, alternating two shapes: the cluster's default network only (a bridge), and the default
network plus two NADs (a bridge and a macvlan). First, before netattach is deployed, the floor:
the default network alone as containerd runs its config itself. Each sample is the time from just
before the create request to the watch event that shows `status.phase: Running` (the kubelet's
status write after the sandbox, its CNI ADD, and the container started); then, 1.5 s later, the
pod is deleted and the time until the API forgets it (the kubelet's teardown, DEL included) is
kept too.

Usage (root, after `make k8s`): python -m bench.kubelet_pod_start [RUNS]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.kube.kube_http import KubeHttp
from tests.kube.real_api import connection_from_kubeconfig
from tests.node import real_node
from tests.node.node_image import node_image_archive

from bench import stats

ROOT = Path(__file__).resolve().parents[1]
NS = "na-bench"
SHAPES = {"default only": None, "default + 2 NADs": "net-a,net-b"}
BARE = "no netattach"  # the default network's config run by containerd itself
TIMEOUT = 120.0
# A pod whose annotations changed while it started (netattach's network-status) gets one more
# kubelet sync, which waits for the next PLEG relist (every 1 s): a delete made meanwhile waits
# for it too, ~1 s that is the kubelet's and would be counted as teardown. Deletes come later.
SETTLE = 1.5


def _phase(event_object: dict[str, Any]) -> str:
    return str((event_object.get("status") or {}).get("phase") or "")


def start_one(node: real_node.RealNode, http: KubeHttp, name: str, networks: str | None) -> float:
    """Seconds from the create request to the watch event showing the pod Running."""
    query = {"fieldSelector": f"metadata.name={name}", "timeoutSeconds": str(int(TIMEOUT))}
    with http.watch(f"/api/v1/namespaces/{NS}/pods", query) as stream:
        began = time.monotonic()
        node.api.create(node.pod_object(NS, name, networks))
        while True:
            event = stream.next(timeout=TIMEOUT)
            if event is None:
                raise real_node.NodeError(f"{name} not Running:\n{node.describe(NS, name)}")
            if _phase(event.object) == "Running":
                return time.monotonic() - began


def delete_one(node: real_node.RealNode, name: str) -> float:
    """Seconds from the delete request to the pod gone from the API (torn down by the kubelet),
    the request made `SETTLE` s after the pod ran."""
    time.sleep(SETTLE)
    began = time.monotonic()
    node.delete_pod(NS, name)
    return time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=int, default=20, help="pods of each shape")
    args = parser.parse_args(argv)
    samples: dict[str, dict[str, list[float]]] = {
        shape: {"start": [], "delete": []} for shape in (BARE, *SHAPES)
    }
    with (
        tempfile.TemporaryDirectory(prefix="na-bench-kubelet-") as tmp,
        real_node.real_node(Path(tmp)) as node,
    ):
        node.create_namespace(NS)
        http = KubeHttp(connection_from_kubeconfig(node.control.admin_kubeconfig))
        # before netattach: containerd runs the default network's own config
        start_one(node, http, "warm-bare", None)
        delete_one(node, "warm-bare")
        for run in range(args.runs):
            samples[BARE]["start"].append(start_one(node, http, f"bare-{run}", None) * 1e3)
            samples[BARE]["delete"].append(delete_one(node, f"bare-{run}") * 1e3)
        node.deploy(node_image_archive())
        node.add_nads(NS)
        # one of each first, unmeasured: images and caches warm, bridges made
        for index, networks in enumerate(SHAPES.values()):
            start_one(node, http, f"warm-{index}", networks)
            delete_one(node, f"warm-{index}")
        for run in range(args.runs):
            for index, (shape, networks) in enumerate(SHAPES.items()):
                name = f"pod-{run}-{index}"
                samples[shape]["start"].append(start_one(node, http, name, networks) * 1e3)
                samples[shape]["delete"].append(delete_one(node, name) * 1e3)
        left = node.wait_clean()
        assert left == real_node.Leftovers(), left
        version = node.control.version().get("gitVersion", "?")
    results: dict[str, Any] = {
        "runs": args.runs,
        "kubernetes": version,
        **{
            shape: {op: stats.summary(values) for op, values in found.items()}
            for shape, found in samples.items()
        },
    }
    print(f"pod start through the kubelet {version} (API create -> Running), ms, {args.runs} each")
    print(f"{'pod':20} {'start p50':>10} {'start p90':>10} {'start max':>10} {'delete p50':>11}")
    for shape in (BARE, *SHAPES):
        start, delete = results[shape]["start"], results[shape]["delete"]
        print(
            f"{shape:20} {start['p50']:10.0f} {start['p90']:10.0f} {start['max']:10.0f}"
            f" {delete['p50']:11.0f}"
        )
    out = ROOT / "bench" / "results" / f"kubelet-pod-start-{time.strftime('%Y-%m-%d')}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
