"""`netattach demo`: three pods, a bridge network, a macvlan network and a policy, end to end.

Network namespaces stand in for the node and its pods; `examples/` holds the settings, the
cluster default network and the manifests (a directory feed, the embedded default). The node
daemon runs in the node namespace and installs its shim and CNI config there, as on a real
node; every call is the installed shim run exactly as a container runtime runs it, and the
delegates are Debian's reference plugins. Then a MultiNetworkPolicy written into the manifests
blocks the data-plane ping, lets in one labelled pod only, and is deleted. The node namespace
keeps every host-side effect off the real host.

`--keep` ends the story before the pods' DEL, with the policy that admits pod-a in force: the
namespaces, the pods' interfaces, their network-status files, the policy tables and the daemon's
log stay to inspect (the steps printed at the end), until `netattach demo --clean` (or the next
demo) removes them.
"""

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from netattach.netns import links, namespace

DEMO_ROOT = Path("/run/netattach-demo")
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NODE = "na-demo-node"
MASTER, MASTER_PEER = "na-demo-m0", "na-demo-m1"
PODS = {"pod-a": "na-demo-pod-a", "pod-b": "na-demo-pod-b", "pod-c": "na-demo-pod-c"}
READY_TIMEOUT = 60.0
CONVERGE_TIMEOUT = 20.0  # the directory feed polls each second; the daemon debounces
STOP_GRACE = 25.0
PICTURE = Path("/tmp/netattach-demo.svg")  # outlives the demo's own directory


class DemoError(Exception):
    """A step that did not go as the story says."""


def say(step: str) -> None:
    print(f"==> {step}", flush=True)


def detail(text: str) -> None:
    print(f"    {text}", flush=True)


def executable(name: str) -> str:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def in_node(*argv: str) -> list[str]:
    return ["nsenter", f"--net={namespace.path_of(NODE)}", "--", *argv]


# -- the daemon -----------------------------------------------------------------------------------


@contextlib.contextmanager
def node_daemon() -> Iterator[subprocess.Popen[bytes]]:
    """`netattach daemon` in the node namespace, installing its default shim (the native one, as
    on a real node); stopped with SIGTERM."""
    log = (DEMO_ROOT / "daemon.log").open("wb")
    proc = subprocess.Popen(
        in_node(
            executable("netattach"),
            "daemon",
            "--config",
            str(DEMO_ROOT / "settings.yaml"),
        ),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def wait_until(what: str, done: Callable[[], bool], timeout: float) -> float:
    """Seconds until `done()` held; DemoError naming `what` after `timeout`."""
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > timeout:
            raise DemoError(f"{what}: not after {timeout:g}s")
        time.sleep(0.05)
    return time.monotonic() - started


def daemon_log_tail(lines: int = 15) -> str:
    path = DEMO_ROOT / "daemon.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


# -- CNI calls as the runtime makes them ----------------------------------------------------------


def plugin_config() -> bytes:
    """What libcni passes the first (only) plugin of the installed conflist."""
    conflist = json.loads((DEMO_ROOT / "net.d" / "00-netattach.conflist").read_text())
    plugin = dict(conflist["plugins"][0])
    plugin.update(name=conflist["name"], cniVersion=conflist["cniVersion"])
    return json.dumps(plugin).encode()


def cni(command: str, pod: str, container_id: str) -> dict[str, object]:
    environ = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": namespace.path_of(PODS[pod]),
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(DEMO_ROOT / "bin"),
        "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME={pod}",
    }
    done = subprocess.run(
        in_node(str(DEMO_ROOT / "bin" / "netattach")),
        input=plugin_config(),
        env=environ,
        capture_output=True,
        check=False,
    )
    reply = json.loads(done.stdout) if done.stdout.strip() else {}
    if done.returncode != 0:
        raise DemoError(f"{command} {pod} failed: {json.dumps(reply)}")
    return dict(reply)


def ping(pod: str, address: str) -> bool:
    done = subprocess.run(
        ["nsenter", f"--net={namespace.path_of(PODS[pod])}", "ping", "-c1", "-W1", address],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def policy_tables(pod: str) -> str:
    done = subprocess.run(
        ["nsenter", f"--net={namespace.path_of(PODS[pod])}", "nft", "list", "tables"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip()


# -- the story ------------------------------------------------------------------------------------


def leftovers() -> list[str]:
    found: list[str] = []
    for pod, netns in PODS.items():
        extra = sorted(set(links.read_interfaces(namespace.path_of(netns))) - {"lo"})
        found.extend(f"{pod}: interface {name} still exists" for name in extra)
        if policy_tables(pod):
            found.append(f"{pod}: nftables still holds {policy_tables(pod)!r}")
    for path in sorted((DEMO_ROOT / "ipam").rglob("*")):
        if path.is_file() and not path.name.startswith(("last_reserved_ip", "lock")):
            found.append(f"host-local still holds {path.name} ({path.parent.name})")
    for sub in ("state/pods", "state/cache/results"):
        found.extend(
            f"record left: {p}" for p in sorted((DEMO_ROOT / sub).glob("*")) if p.is_file()
        )
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


def _attach(containers: dict[str, str]) -> dict[str, dict[str, str]]:
    addresses: dict[str, dict[str, str]] = {}
    for pod in PODS:
        say(f"ADD {pod}: the default network, then the networks its annotation selects")
        cni("ADD", pod, containers[pod])
        status = json.loads((DEMO_ROOT / "manifests/status/demo" / f"{pod}.json").read_text())
        detail(f"network-status of demo/{pod}:")
        for entry in status:
            ips = ", ".join(entry.get("ips", []))
            default = " (default)" if entry.get("default") else ""
            detail(f"  {entry['interface']:5} {entry['name']:22} {ips}{default}")
        addresses[pod] = {
            str(e["name"]): str(e["ips"][0]).split("/")[0] for e in status if e.get("ips")
        }
    return addresses


def _expect_ping(src: str, dst: str, address: str, network: str, *, passes: bool) -> None:
    """Wait until ping `src` -> `address` passes (or fails)."""
    word = "answers" if passes else "is blocked"
    wait_until(
        f"ping {src} -> {dst} over {network} {word}",
        lambda: ping(src, address) == passes,
        CONVERGE_TIMEOUT,
    )
    detail(f"ping {src} -> {dst} over {network} ({address}) {word}")


def _draw(picture: Path) -> None:
    say(f"netattach graph: the pods, their networks and the governed network, in {picture}")
    done = subprocess.run(
        [
            executable("netattach"),
            "graph",
            "--namespace",
            "demo",
            "--config",
            str(DEMO_ROOT / "settings.yaml"),
            "-o",
            str(picture),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise DemoError(f"netattach graph failed: {done.stderr.strip()}")


def _policy_story(addresses: dict[str, dict[str, str]], picture: Path, *, keep: bool) -> None:
    manifests = DEMO_ROOT / "manifests"
    b_dp, b_st = addresses["pod-b"]["demo/dataplane"], addresses["pod-b"]["demo/storage"]
    say("MultiNetworkPolicy server-dataplane: pod-b (app=server) isolated on demo/dataplane")
    shutil.copy(DEMO_ROOT / "policies/1-deny-dataplane.yaml", manifests / "policy.yaml")
    took = wait_until("pod-b's policy table", lambda: bool(policy_tables("pod-b")), 10.0)
    detail(f"pod-b's table applied {took:.2f}s after the manifest was written")
    _expect_ping("pod-a", "pod-b", b_dp, "demo/dataplane", passes=False)
    _expect_ping("pod-c", "pod-b", b_dp, "demo/dataplane", passes=False)
    _expect_ping("pod-a", "pod-b", b_st, "demo/storage", passes=True)  # not governed
    detail(f"pod-b's table: {policy_tables('pod-b')}; pod-a's: {policy_tables('pod-a') or 'none'}")
    say("the policy now lets in pods labelled role=client (pod-a) only")
    shutil.copy(DEMO_ROOT / "policies/2-allow-clients.yaml", manifests / "policy.yaml")
    _expect_ping("pod-a", "pod-b", b_dp, "demo/dataplane", passes=True)
    _expect_ping("pod-c", "pod-b", b_dp, "demo/dataplane", passes=False)
    _draw(picture)
    if keep:
        return
    say("the policy is deleted")
    (manifests / "policy.yaml").unlink()
    _expect_ping("pod-c", "pod-b", b_dp, "demo/dataplane", passes=True)
    wait_until("pod-b's policy table removed", lambda: not policy_tables("pod-b"), 10.0)
    detail("pod-b has no policy table any more")


def _story(picture: Path, *, keep: bool) -> None:
    containers = {pod: f"demo-{pod}-{secrets.token_hex(4)}" for pod in PODS}
    say(f"start the node daemon in {NODE}: it installs its shim and CNI config when ready")
    with node_daemon() as daemon:
        conflist = DEMO_ROOT / "net.d" / "00-netattach.conflist"
        try:
            wait_until(
                "the daemon installs 00-netattach.conflist",
                lambda: conflist.exists() or daemon.poll() is not None,
                READY_TIMEOUT,
            )
            if daemon.poll() is not None:
                raise DemoError(f"the daemon exited with {daemon.returncode}")
            detail(f"installed {DEMO_ROOT / 'bin' / 'netattach'} and {conflist}")
            addresses = _attach(containers)
            for network in ("demo/dataplane", "demo/storage"):
                target = addresses["pod-b"][network]
                say(f"ping pod-a -> pod-b over {network} ({target})")
                if not ping("pod-a", target):
                    raise DemoError("no reply")
                detail("reply received")
            _policy_story(addresses, picture, keep=keep)
            if keep:
                # Attachments, status files and policy tables stay; the daemon stops (what it
                # made does not need it): the node is as a runtime would leave running pods.
                return
            for pod in PODS:
                say(f"DEL {pod}, twice (DEL is idempotent)")
                for _ in range(2):
                    cni("DEL", pod, containers[pod])
        except DemoError:
            print(f"daemon log (last lines):\n{daemon_log_tail()}", file=sys.stderr)
            raise
    say("verify nothing is left")
    left = leftovers()
    for line in left:
        print(f"    LEAK: {line}", file=sys.stderr)
    if left:
        raise DemoError(f"{len(left)} leftovers")
    detail("no interface, IP allocation, policy table or record left")


def _inspect_hint() -> None:
    """What a kept demo leaves, and how to look at it and remove it."""
    say(f"kept for inspection (the pods attached, the policy in force), in {DEMO_ROOT}:")
    steps = (
        ("ip netns list", f"{NODE} and the pods' {', '.join(PODS.values())}"),
        (f"ip -n {PODS['pod-a']} addr", "pod-a's interfaces and addresses"),
        (f"netattach status --config {DEMO_ROOT}/settings.yaml", "pods, networks, problems"),
        (f"ls {DEMO_ROOT}/manifests/status/demo", "network-status, as the API would hold it"),
        (f"ip netns exec {PODS['pod-b']} nft list ruleset", "pod-b's policy table"),
        (f"less {DEMO_ROOT}/daemon.log", "what the daemon did"),
        ("netattach demo --clean", "removes all of it (so does the next demo)"),
    )
    width = max(len(command) for command, _ in steps)
    for command, why in steps:
        detail(f"{command:{width}}  # {why}")


def clean() -> None:
    """Remove what a demo left (`--keep`, or one that was killed): its namespaces, which hold
    every interface and bridge the delegates made, and its directory."""
    for name in (*PODS.values(), NODE):
        namespace.remove(name)
    shutil.rmtree(DEMO_ROOT, ignore_errors=True)


def run(
    *,
    examples: Path = EXAMPLES,
    keep: bool = False,
    picture: Path = PICTURE,
    only_clean: bool = False,
) -> int:
    """The demo; with `only_clean`, only the removal of what an earlier one kept."""
    if os.geteuid() != 0:
        print("netattach demo needs root (it creates network namespaces)", file=sys.stderr)
        return 2
    if only_clean:
        clean()
        say(f"removed the demo's namespaces and {DEMO_ROOT}")
        return 0
    missing = [tool for tool in ("nsenter", "ping", "nft", "dot") if shutil.which(tool) is None]
    if missing or not Path("/usr/lib/cni/bridge").exists():
        print(
            "netattach demo needs the CNI plugins in /usr/lib/cni and "
            f"{', '.join(missing) or 'nsenter, ping, nft, dot'}"
            " (run `make demo`, which installs them)",
            file=sys.stderr,
        )
        return 2
    say(f"set up: node namespace {NODE} (with link {MASTER}), pods {', '.join(PODS.values())}")
    say(f"examples copied to {DEMO_ROOT}")
    status = 0
    try:
        _prepare(examples)
        _story(picture, keep=keep)
    except DemoError as exc:
        print(f"    FAILED: {exc}", file=sys.stderr)
        status = 1
    finally:
        if not keep:
            clean()
    if keep:
        _inspect_hint()
    if status == 0:
        say(f"demo passed; the picture: {picture}")
    else:
        say("demo FAILED")
    return status
