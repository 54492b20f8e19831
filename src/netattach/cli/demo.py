"""`netattach demo`: two pods get a bridge network and a macvlan network, end to end.

Network namespaces stand in for the node and its pods; `examples/` holds the settings, the
cluster default network and the manifests (a directory feed, the embedded default). Every call
goes through the real `netattach-thin`, exactly as a container runtime makes it, and the
delegates are Debian's reference plugins. The node namespace keeps every host-side effect off
the real host.
"""

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

from netattach.netns import links, namespace

DEMO_ROOT = Path("/run/netattach-demo")
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NODE = "na-demo-node"
MASTER, MASTER_PEER = "na-demo-m0", "na-demo-m1"
PODS = {"pod-a": "na-demo-pod-a", "pod-b": "na-demo-pod-b"}


def say(step: str) -> None:
    print(f"==> {step}", flush=True)


def thin_executable() -> str:
    beside = Path(sys.executable).parent / "netattach-thin"
    return str(beside) if beside.exists() else (shutil.which("netattach-thin") or "netattach-thin")


def cni(command: str, pod: str, netns: str, container_id: str) -> tuple[int, dict[str, object]]:
    """Call netattach-thin the way a runtime does: CNI_* variables, the config on stdin."""
    environ = {
        **os.environ,
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": namespace.path_of(netns),
        "CNI_IFNAME": "eth0",
        "CNI_PATH": "/usr/lib/cni",
        "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME={pod}",
    }
    done = subprocess.run(
        ["nsenter", f"--net={namespace.path_of(NODE)}", "--", thin_executable()],
        input=(DEMO_ROOT / "netattach.conf").read_bytes(),
        env=environ,
        capture_output=True,
        check=False,
    )
    if done.stderr:
        sys.stderr.write(done.stderr.decode(errors="replace"))
    reply = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, reply


def ping(netns: str, address: str) -> bool:
    done = subprocess.run(
        ["nsenter", f"--net={namespace.path_of(netns)}", "ping", "-c", "1", "-W", "2", address],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def leftovers() -> list[str]:
    found: list[str] = []
    for pod, netns in PODS.items():
        extra = sorted(set(links.read_interfaces(namespace.path_of(netns))) - {"lo"})
        found.extend(f"{pod}: interface {name} still exists" for name in extra)
    for path in sorted((DEMO_ROOT / "ipam").rglob("*")):
        if path.is_file() and not path.name.startswith(("last_reserved_ip", "lock")):
            found.append(f"host-local still holds {path.name} ({path.parent.name})")
    for sub in ("state/pods", "state/cache/results"):
        found.extend(f"record left: {p}" for p in sorted((DEMO_ROOT / sub).glob("*")))
    return found


def _prepare(examples: Path) -> None:
    if DEMO_ROOT.exists():
        shutil.rmtree(DEMO_ROOT)
    shutil.copytree(examples, DEMO_ROOT)
    for name in (*PODS.values(), NODE):
        namespace.remove(name)
    namespace.create(NODE)
    node = namespace.path_of(NODE)
    links.set_up(node, "lo")
    links.add_veth_pair(node, MASTER, MASTER_PEER)
    for netns in PODS.values():
        namespace.create(netns)


def _story() -> int:
    containers = {pod: f"demo-{pod}-{secrets.token_hex(4)}" for pod in PODS}
    addresses: dict[str, dict[str, str]] = {}
    for pod, netns in PODS.items():
        say(f"ADD {pod}: the default network, then the networks its annotation selects")
        code, reply = cni("ADD", pod, netns, containers[pod])
        if code != 0:
            print(f"    FAILED: {json.dumps(reply)}", file=sys.stderr)
            return 1
        status = json.loads((DEMO_ROOT / "manifests/status/demo" / f"{pod}.json").read_text())
        print(f"    network-status of demo/{pod}:")
        for entry in status:
            ips = ", ".join(entry.get("ips", []))
            default = " (default)" if entry.get("default") else ""
            print(f"      {entry['interface']:5} {entry['name']:22} {ips}{default}")
        addresses[pod] = {
            str(e["name"]): str(e["ips"][0]).split("/")[0] for e in status if e.get("ips")
        }
    for network in ("demo/dataplane", "demo/storage"):
        target = addresses["pod-b"][network]
        say(f"ping pod-a -> pod-b over {network} ({target})")
        if not ping(PODS["pod-a"], target):
            print("    FAILED: no reply", file=sys.stderr)
            return 1
        print("    reply received")
    for pod, netns in PODS.items():
        say(f"DEL {pod}, twice (DEL is idempotent)")
        for _ in range(2):
            code, reply = cni("DEL", pod, netns, containers[pod])
            if code != 0:
                print(f"    FAILED: {json.dumps(reply)}", file=sys.stderr)
                return 1
    say("verify nothing is left")
    left = leftovers()
    for line in left:
        print(f"    LEAK: {line}", file=sys.stderr)
    if left:
        return 1
    print("    no interface, IP allocation or record left")
    return 0


def run(*, examples: Path = EXAMPLES, keep: bool = False) -> int:
    if os.geteuid() != 0:
        print("netattach demo needs root (it creates network namespaces)", file=sys.stderr)
        return 2
    missing = [tool for tool in ("nsenter", "ping") if shutil.which(tool) is None]
    if missing or not Path("/usr/lib/cni/bridge").exists():
        print(
            "netattach demo needs the CNI plugins in /usr/lib/cni and "
            f"{', '.join(missing) or 'nsenter, ping'} (run `make demo`, which installs them)",
            file=sys.stderr,
        )
        return 2
    say(f"set up: node namespace {NODE} (with link {MASTER}), pods {', '.join(PODS.values())}")
    say(f"examples copied to {DEMO_ROOT}")
    try:
        _prepare(examples)
        status = _story()
    finally:
        if not keep:
            for name in (*PODS.values(), NODE):
                namespace.remove(name)
            shutil.rmtree(DEMO_ROOT, ignore_errors=True)
    say("demo passed" if status == 0 else "demo FAILED")
    return status
