"""`netattach.policy.apply` on real pods: hand-written nft scripts, real traffic.

Two pods share a default network (eth0, one bridge) and a secondary one (net1, another
bridge), both attached with the real runtime and the reference plugins. The scripts have the
renderer's shape: `add table` + `delete table` + the table, replaced in one transaction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from netattach.cni import conf, errors
from netattach.policy import apply
from netattach.runtime import chain
from tests.netns import attach, bridge, config_list, host_local, run_in
from tests.netns_fixtures import Node, allocations, container_id, unique

pytestmark = pytest.mark.netns

DEFAULT_SUBNET = "10.81.0.0/24"
SECONDARY_SUBNET = "10.82.0.0/24"
TABLE_ID = f"{apply.FAMILY} {apply.TABLE}"

HEADER = "add table inet netattach\ndelete table inet netattach\n"

DENY_ALL = (
    HEADER
    + """table inet netattach {
  chain ingress-net1 {
    type filter hook input priority 0; policy accept;
    iifname "net1" ct state established,related accept
    iifname "net1" drop
  }
}
"""
)


def allow_from(*addresses: str) -> str:
    """Ingress on net1 only from `addresses` (the renderer's `allowed-v4` shape)."""
    return (
        HEADER
        + f"""table inet netattach {{
  set allowed-v4 {{
    type ipv4_addr
    flags interval
    elements = {{ {", ".join(addresses)} }}
  }}
  chain ingress-net1 {{
    type filter hook input priority 0; policy accept;
    iifname "net1" ct state established,related accept
    iifname "net1" ip saddr @allowed-v4 accept
    iifname "net1" drop
  }}
}}
"""
    )


def allow_ports(*ports: int) -> str:
    """Ingress on net1 only to TCP `ports`, from anywhere."""
    return (
        HEADER
        + f"""table inet netattach {{
  set allowed-tcp {{
    type inet_service
    elements = {{ {", ".join(str(p) for p in ports)} }}
  }}
  chain ingress-net1 {{
    type filter hook input priority 0; policy accept;
    iifname "net1" ct state established,related accept
    iifname "net1" tcp dport @allowed-tcp accept
    iifname "net1" drop
  }}
}}
"""
    )


# Drops everything arriving on net1, replies included: conntrack is what lets replies in.
DENY_ALL_NO_CONNTRACK = (
    HEADER
    + """table inet netattach {
  chain ingress-net1 {
    type filter hook input priority 0; policy accept;
    iifname "net1" drop
  }
}
"""
)


@dataclasses.dataclass(frozen=True)
class Pod:
    path: str
    eth0: str  # bare address on the default network
    net1: str  # bare address on the secondary network


@dataclasses.dataclass(frozen=True)
class Pair:
    a: Pod
    b: Pod


def _network(name: str, ipam_dir: Path, subnet: str) -> conf.NetworkConfigList:
    return config_list("1.0.0", name, bridge(host_local(ipam_dir, subnet), name=unique("br")))


async def _attach_pods(make_pod: Callable[[], str], ipam_dir: Path, runtime: chain.Runtime) -> Pair:
    default_dir, secondary_dir = ipam_dir / "default", ipam_dir / "secondary"
    default_dir.mkdir()
    secondary_dir.mkdir()
    default = _network("na-default", default_dir, DEFAULT_SUBNET)
    secondary = _network("na-secondary", secondary_dir, SECONDARY_SUBNET)
    pods: list[Pod] = []
    for _ in range(2):
        path = make_pod()
        cid = container_id()
        addresses: list[str] = []
        for network, ifname, subnet in (
            (default, "eth0", DEFAULT_SUBNET),
            (secondary, "net1", SECONDARY_SUBNET),
        ):
            rt = chain.RuntimeConf(container_id=cid, ifname=ifname, netns=path)
            att = await attach(runtime, network, rt, subnets=[subnet])
            addresses.append(str(ipaddress.ip_interface(att.result.ips[0].address).ip))
        pods.append(Pod(path=path, eth0=addresses[0], net1=addresses[1]))
    assert len(allocations(default_dir)) == 2
    assert len(allocations(secondary_dir)) == 2
    return Pair(a=pods[0], b=pods[1])


async def pings(src: Pod, dst_ip: str) -> bool:
    status, _ = await run_in(src.path, "ping", "-c", "1", "-W", "1", dst_ip)
    return status == 0


# A listener in the destination netns: echoes b"pong:<port>" once per connection, forever.
LISTENER = """
import socket, sys, threading
def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(8)
    while True:
        c, _ = s.accept()
        c.recv(16)
        c.sendall(b"pong:%d" % port)
        c.close()
socks = [threading.Thread(target=serve, args=(p,), daemon=True) for p in (8080, 8081)]
for t in socks:
    t.start()
import time
time.sleep(0.2)
print("ready", flush=True)
sys.stdin.read()
"""

CLIENT = """
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.5)
    c.sendall(b"ping")
    print(c.recv(16).decode())
except OSError as exc:
    print("failed:", type(exc).__name__)
    sys.exit(3)
"""


async def tcp(src: Pod, dst_ip: str, port: int) -> str:
    """The listener's reply to a connection from `src`, or `failed: <error>`."""
    _, out = await run_in(src.path, sys.executable, "-c", CLIENT, dst_ip, str(port))
    return out.strip()


def test_deny_allow_remove_ping(
    node: Node, make_pod: Callable[[], str], ipam_dir: Path, runtime: chain.Runtime
) -> None:
    async def scenario() -> None:
        pair = await _attach_pods(make_pod, ipam_dir, runtime)
        a, b = pair.a, pair.b
        assert await pings(a, b.net1)
        assert await pings(a, b.eth0)

        await apply.apply_ruleset(b.path, DENY_ALL)
        assert not await pings(a, b.net1)
        assert await pings(a, b.eth0)  # the default network is not netattach's to filter
        assert await pings(b, a.net1)  # egress from B and its replies still flow

        await apply.apply_ruleset(b.path, allow_from(a.net1))
        assert await apply.list_tables(b.path) == [TABLE_ID]
        assert await pings(a, b.net1)
        assert await pings(a, b.eth0)

        await apply.apply_ruleset(b.path, allow_from("10.82.0.250"))  # someone else only
        assert not await pings(a, b.net1)

        assert await apply.remove_table(b.path) is True
        assert await pings(a, b.net1)
        assert await pings(a, b.eth0)
        assert await apply.list_tables(b.path) == []
        assert await apply.list_tables(a.path) == []  # A was never touched

    asyncio.run(scenario())


def test_replace_is_atomic(
    node: Node, make_pod: Callable[[], str], ipam_dir: Path, runtime: chain.Runtime
) -> None:
    async def scenario() -> None:
        pair = await _attach_pods(make_pod, ipam_dir, runtime)
        a, b = pair.a, pair.b
        await apply.apply_ruleset(b.path, allow_from(a.net1))
        before = await apply.read_table(b.path)
        assert before is not None
        assert f"elements = {{ {a.net1} }}" in before
        assert 'iifname "net1" ip saddr @allowed-v4 accept' in before

        # A syntax error: nft parses the whole script before sending anything.
        broken = DENY_ALL.replace('iifname "net1" drop', 'iifname "net1" dorp')
        with pytest.raises(errors.PolicyApplyError) as caught:
            await apply.apply_ruleset(b.path, broken)
        assert caught.value.code == 104
        assert "Error: syntax error" in str(caught.value)
        assert "dorp" in caught.value.details
        assert await apply.read_table(b.path) == before

        # A kernel error at the very end of the batch: the delete and the new table before it
        # were part of the same transaction, so they are rolled back too.
        late = (
            HEADER
            + "table inet netattach {\n  set s {\n    type ipv4_addr\n"
            + "    elements = { 1.2.3.4 }\n  }\n}\n"
            + "create element inet netattach s { 1.2.3.4 }\n"
        )
        with pytest.raises(errors.PolicyApplyError) as caught:
            await apply.apply_ruleset(b.path, late)
        assert caught.value.code == 104
        assert "File exists" in caught.value.details
        assert await apply.read_table(b.path) == before
        assert await apply.list_tables(b.path) == [TABLE_ID]
        assert await pings(a, b.net1)  # the previous policy is still the one in force

        # A path that is not a netns at all: nsenter's own error, quoted.
        with pytest.raises(errors.PolicyApplyError) as caught:
            await apply.apply_ruleset(str(ipam_dir / "no-such-netns"), DENY_ALL)
        assert caught.value.code == 104
        assert "no-such-netns" in str(caught.value)

    asyncio.run(scenario())


def test_remove_twice_and_list(node: Node, make_pod: Callable[[], str]) -> None:
    async def scenario() -> None:
        pod = make_pod()
        assert await apply.list_tables(pod) == []
        assert await apply.read_table(pod) is None
        assert await apply.remove_table(pod) is False

        await apply.apply_ruleset(pod, DENY_ALL)
        assert await apply.list_tables(pod) == [TABLE_ID]
        text = await apply.read_table(pod)
        assert text is not None
        assert text.startswith("table inet netattach {")
        assert "chain ingress-net1" in text

        # A table of someone else's is listed but never touched.
        status, out = await run_in(pod, "nft", "add", "table", "ip", "na-other")
        assert status == 0, out
        assert sorted(await apply.list_tables(pod)) == ["inet netattach", "ip na-other"]

        assert await apply.remove_table(pod) is True
        assert await apply.remove_table(pod) is False
        assert await apply.list_tables(pod) == ["ip na-other"]
        assert await apply.read_table(pod) is None

        # Re-applying after removal works, and applying twice replaces (never duplicates).
        await apply.apply_ruleset(pod, DENY_ALL)
        await apply.apply_ruleset(pod, DENY_ALL)
        second = await apply.read_table(pod)
        assert second is not None
        assert second.count("chain ingress-net1") == 1
        assert await apply.list_tables(pod) == ["ip na-other", "inet netattach"]

    asyncio.run(scenario())


def test_tcp_port_set_and_conntrack(
    node: Node, make_pod: Callable[[], str], ipam_dir: Path, runtime: chain.Runtime
) -> None:
    async def scenario() -> None:
        pair = await _attach_pods(make_pod, ipam_dir, runtime)
        a, b = pair.a, pair.b
        listener = await asyncio.create_subprocess_exec(
            "nsenter",
            f"--net={b.path}",
            "--",
            sys.executable,
            "-c",
            LISTENER,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert listener.stdout is not None
            line = await asyncio.wait_for(listener.stdout.readline(), 10)
            assert line == b"ready\n"
            assert await tcp(a, b.net1, 8080) == "pong:8080"
            assert await tcp(a, b.net1, 8081) == "pong:8081"

            await apply.apply_ruleset(b.path, allow_ports(8080))
            assert await tcp(a, b.net1, 8080) == "pong:8080"
            assert await tcp(a, b.net1, 8081) == "failed: TimeoutError"
            assert await tcp(a, b.eth0, 8081) == "pong:8081"  # eth0 is not filtered
            assert not await pings(a, b.net1)  # only TCP 8080 is allowed in

            # Replies to A's own connections pass A's deny-all only through conntrack.
            await apply.apply_ruleset(a.path, DENY_ALL)
            assert await tcp(a, b.net1, 8080) == "pong:8080"
            await apply.apply_ruleset(a.path, DENY_ALL_NO_CONNTRACK)
            assert await tcp(a, b.net1, 8080) == "failed: TimeoutError"

            assert await apply.remove_table(a.path) is True
            assert await apply.remove_table(b.path) is True
            assert await tcp(a, b.net1, 8081) == "pong:8081"
        finally:
            if listener.returncode is None:
                listener.kill()
            await listener.wait()

    asyncio.run(scenario())
