"""`netattach demo`: the runtime's smoke demo, on this machine, with the real reference plugins.

A "node" namespace stands in for the host (so nothing on the real host changes), two "pod"
namespaces get a bridge + host-local + tuning network through netattach's CNI runtime, they ping
each other, CHECK passes, DEL frees everything, and the demo proves nothing was left behind.
"""

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from netattach.cni import conf, errors, result
from netattach.netns import links, namespace
from netattach.runtime import cache, chain, execute


def say(step: str) -> None:
    print(f"==> {step}", flush=True)


def demo_network(bridge: str, ipam_dir: Path, ifname: str) -> conf.NetworkConfigList:
    return conf.parse_config_list(
        {
            "cniVersion": "1.0.0",
            "name": "demo-net",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": bridge,
                    "isGateway": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(ipam_dir),
                        "ranges": [[{"subnet": "10.99.0.0/24"}]],
                    },
                },
                # tuning's sysctl key names the pod's interface, as an operator writes it
                {"type": "tuning", "sysctl": {f"net.ipv4.conf.{ifname}.arp_ignore": "1"}},
            ],
        },
        source="demo",
    )


def ping(pod_path: str, address: str) -> bool:
    done = subprocess.run(
        ["nsenter", f"--net={pod_path}", "ping", "-c", "1", "-W", "2", address],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def first_ip(res: result.Result) -> str:
    assert not isinstance(res, result.Result020)
    return res.ips[0].address.split("/")[0]


async def _run(plugin_dir: str, node: str, pods: dict[str, str], workdir: Path) -> int:
    bridge = f"na-br-{secrets.token_hex(3)}"
    ipam_dir = workdir / "ipam"
    network = demo_network(bridge, ipam_dir, "eth1")
    runtime = chain.Runtime(
        path=[plugin_dir],
        cache_dir=workdir / "cache",
        executor=execute.SubprocessExec(host_netns=namespace.path_of(node)),
    )
    confs = {
        pod: chain.RuntimeConf(
            container_id=f"demo-{pod}",
            ifname="eth1",
            netns=path,
            args=(("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", "demo"), ("K8S_POD_NAME", pod)),
        )
        for pod, path in pods.items()
    }
    addresses: dict[str, str] = {}
    for pod, rt in confs.items():
        say(f"ADD {pod}: network {network.name!r} (bridge {bridge} + host-local + tuning)")
        res = await runtime.add_network_list(network, rt)
        addresses[pod] = first_ip(res)
        iface = (await asyncio.to_thread(links.read_interfaces, rt.netns))["eth1"]
        print(f"    result: {json.dumps(res.to_raw())}")
        print(f"    kernel: eth1 {iface.mac} {', '.join(iface.addresses)}")

    (a, b) = list(pods)
    say(f"ping {a} -> {b} ({addresses[b]})")
    if not ping(pods[a], addresses[b]):
        print("    FAILED: no reply", file=sys.stderr)
        return 1
    print("    reply received")

    for pod, rt in confs.items():
        say(f"CHECK {pod}")
        await runtime.check_network_list(network, rt)
        print("    ok")

    for pod, rt in confs.items():
        say(f"DEL {pod} (and once more: DEL is idempotent)")
        await runtime.del_network_list(network, rt)
        await runtime.del_network_list(network, rt)

    say("verify nothing is left")
    leftovers: list[str] = []
    for pod, rt in confs.items():
        if "eth1" in await asyncio.to_thread(links.read_interfaces, rt.netns):
            leftovers.append(f"{pod}: eth1 still exists")
        key = cache.AttachmentKey(
            network_name=network.name, container_id=rt.container_id, ifname=rt.ifname
        )
        if runtime.cache.load(key) is not None:
            leftovers.append(f"{pod}: attachment record still exists")
    allocated = [
        p.name
        for p in ipam_dir.rglob("*")
        if p.is_file() and "." in p.name and not p.name.startswith(("last_reserved_ip", "lock"))
    ]
    leftovers.extend(f"host-local still holds {ip}" for ip in allocated)
    for line in leftovers:
        print(f"    LEAK: {line}", file=sys.stderr)
    if leftovers:
        return 1
    print("    no interface, IP allocation or record left")
    return 0


def run(*, plugin_dir: str, keep: bool) -> int:
    if os.geteuid() != 0:
        print("netattach demo needs root (it creates network namespaces)", file=sys.stderr)
        return 2
    if not (Path(plugin_dir) / "bridge").exists() or shutil.which("nsenter") is None:
        print(f"the CNI plugins must be in {plugin_dir} and nsenter installed", file=sys.stderr)
        return 2
    tag = secrets.token_hex(2)
    node = f"na-demo-{tag}-n"
    pods = {f"pod-{c}": f"na-demo-{tag}-{c}" for c in "ab"}
    made: list[str] = []
    workdir = Path(tempfile.mkdtemp(prefix="netattach-demo-"))
    try:
        say(f"create node namespace {node} and pod namespaces {', '.join(pods.values())}")
        for name in (node, *pods.values()):
            namespace.create(name)
            made.append(name)
        links.set_up(namespace.path_of(node), "lo")
        paths = {pod: namespace.path_of(ns) for pod, ns in pods.items()}
        status = asyncio.run(_run(plugin_dir, node, paths, workdir))
    except errors.CNIError as exc:
        print(f"    CNI error {exc.code}: {exc}", file=sys.stderr)
        status = 1
    finally:
        if not keep:
            for name in made:
                namespace.remove(name)
            shutil.rmtree(workdir, ignore_errors=True)
    say("demo passed" if status == 0 else "demo FAILED")
    return status
