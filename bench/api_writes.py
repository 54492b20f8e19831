"""A pod's status PATCH, as the daemon sends it at each pod start: through httpx (lightkube's
client, what every other request of the daemon uses) and through `cluster.api_writes` (what
the status and Event writes use), alternated, after an idle gap as pod starts come.

The in-repo API server runs in a process of its own. Each sample is one `publish_status`-shaped
merge patch (a four-entry network-status) to one pod; the figures are medians of wall clock and
of this process's CPU (`thread_time`) per write.

Usage: python -m bench.api_writes [--writes N] [--gap SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.connection
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from netattach.cluster import kube_client, model

NAMESPACE = "default"
POD = "bench-pod"
ENTRIES = [
    {
        "name": f"default/net{i}",
        "interface": f"net{i}",
        "ips": [f"10.1.0.{i + 2}/24"],
        "mac": f"02:00:00:00:00:0{i}",
        "default": i == 0,
        "dns": {},
    }
    for i in range(4)
]


def _serve(pipe: multiprocessing.connection.Connection) -> None:
    from tests.kube.fake_api import FakeKubeApi

    api = FakeKubeApi()
    api.start()
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": POD, "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "c", "image": "x"}], "nodeName": "bench-node"},
        }
    )
    pod = api.get("Pod", POD, NAMESPACE)
    assert pod is not None
    pipe.send((api.base_url, pod["metadata"]["uid"]))
    pipe.recv()  # until the benchmark is done
    api.stop()


def _kubeconfig(server: str, directory: Path) -> Path:
    path = directory / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "bench"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


async def _measure(kubeconfig: Path, uid: str, writes: int, gap: float) -> dict[str, object]:
    api = kube_client.ApiClients(kubeconfig, kube_client.KubeTiming())  # the feed's connections
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}?fieldManager={kube_client.COMPONENT}"

    def patch(n: int) -> bytes:
        text = json.dumps([*ENTRIES, {"name": f"sample-{n}"}], indent=4)
        body = {"metadata": {"uid": uid, "annotations": {model.STATUS_ANNOTATION: text}}}
        return json.dumps(body, separators=(",", ":")).encode()

    async def through_httpx(n: int) -> None:
        response = await api.writes.request(  # the client it replaced
            "PATCH",
            f"{str(api.writes.base_url).rstrip('/')}{path}",
            content=patch(n),
            headers={"Content-Type": kube_client.MERGE_PATCH},
        )
        response.raise_for_status()

    async def through_api_writes(n: int) -> None:
        await api.writer.send("PATCH", path, patch(n), kube_client.MERGE_PATCH)

    ways: dict[str, Callable[[int], Awaitable[None]]] = {
        "httpx": through_httpx,
        "api_writes": through_api_writes,
    }
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in ways}
    try:
        for n in range(3):  # connections made, imports done
            for write in ways.values():
                await write(n)
        for n in range(writes):
            for name, write in ways.items():
                await asyncio.sleep(gap)
                cpu, wall = time.thread_time(), time.perf_counter()
                await write(n)
                samples[name][0].append(time.perf_counter() - wall)
                samples[name][1].append(time.thread_time() - cpu)
    finally:
        await api.aclose()
    return {
        name: {
            "wall_p50_ms": round(statistics.median(wall) * 1e3, 2),
            "cpu_p50_ms": round(statistics.median(cpu) * 1e3, 2),
        }
        for name, (wall, cpu) in samples.items()
    } | {"writes": writes, "gap_s": gap}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=100)
    parser.add_argument("--gap", type=float, default=0.2)
    args = parser.parse_args(argv)
    ours, theirs = multiprocessing.Pipe()
    server = multiprocessing.Process(target=_serve, args=(theirs,), daemon=True)
    server.start()
    try:
        base_url, uid = ours.recv()
        with tempfile.TemporaryDirectory(prefix="na-bench-writes-") as work:
            kubeconfig = _kubeconfig(base_url, Path(work))
            result = asyncio.run(_measure(kubeconfig, uid, args.writes, args.gap))
    finally:
        ours.send("done")
        server.join(timeout=5)
        if server.is_alive():
            server.kill()
    print(f"status PATCH every {args.gap:g} s, {args.writes} each, alternated; medians per write")
    for name in ("httpx", "api_writes"):
        figures = result[name]
        assert isinstance(figures, dict)
        print(
            f"  {name:11} wall {figures['wall_p50_ms']:6.2f} ms   "
            f"CPU {figures['cpu_p50_ms']:6.2f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
