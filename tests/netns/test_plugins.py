"""The reference CNI plugins run by the real runtime in real namespaces, at every version.

Each plugin's host side lives in the test's node namespace (the `runtime` fixture runs plugins
there), so bridges, host veths, firewall rules and qdiscs die with it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from netattach.cni import conf, errors, result, result_convert, spec
from netattach.netns import links
from netattach.runtime import chain, find, invoke
from tests.netns import (
    VERSIONS,
    attach,
    bridge,
    check_by_version,
    config_list,
    detach,
    host_local,
    interfaces,
    key_of,
    layered,
    output_in,
    run_in,
)
from tests.netns_fixtures import Node, allocations, container_id, require_link_kind, unique

pytestmark = pytest.mark.netns


def pod_rt(
    pod: str, ifname: str = "eth0", *, capability_args: Mapping[str, Any] | None = None
) -> chain.RuntimeConf:
    """A new container's attachment `ifname` in the pod namespace at `pod`."""
    return chain.RuntimeConf(
        container_id=container_id(),
        ifname=ifname,
        netns=pod,
        capability_args=dict(capability_args or {}),
    )


async def veths(netns: str) -> set[str]:
    return {name for name, s in (await interfaces(netns)).items() if s.kind == "veth"}


# -- one plugin (or plugin + IPAM) at a time ------------------------------------------------


@pytest.mark.req("CNI-CHECK")
@pytest.mark.req("CNI-CACHE")
@pytest.mark.parametrize("version", VERSIONS)
def test_bridge_host_local_ipv4(
    version: str,
    node: Node,
    make_pod: Callable[[], str],
    ipam_dir: Path,
    runtime: chain.Runtime,
) -> None:
    pod = make_pod()
    rt = pod_rt(pod)
    br = unique("br")
    # A single-plugin config (not a list), as a `.conf` or a NAD's spec.config would be.
    network = conf.parse_any(
        {
            "cniVersion": version,
            "name": "na-bridge4",
            **bridge(host_local(ipam_dir, "10.71.0.0/24"), name=br),
        }
    )

    async def scenario() -> None:
        att = await attach(runtime, network, rt, subnets=["10.71.0.0/24"], ipam_dir=ipam_dir)
        # bridge reports the bridge, the host veth and the pod's interface, in that order.
        assert att.result.interfaces[0].name == br
        assert att.index == 2
        host_veth = att.result.interfaces[1].name
        node_links = await interfaces(node.path)
        assert node_links[br].kind == "bridge"
        assert node_links[host_veth].kind == "veth"
        assert att.state.kind == "veth"
        await check_by_version(runtime, network, rt)
        await detach(runtime, network, rt, ipam_dir)
        assert await veths(node.path) == set()  # the host end went with the pod's end

    asyncio.run(scenario())


@pytest.mark.req("CNI-CHECK")
@pytest.mark.req("CNI-CACHE")
@pytest.mark.parametrize("version", VERSIONS)
def test_bridge_host_local_dual_stack(
    version: str,
    node: Node,
    make_pod: Callable[[], str],
    ipam_dir: Path,
    runtime: chain.Runtime,
) -> None:
    pod = make_pod()
    rt = pod_rt(pod)
    subnets = ["10.72.0.0/24", "fd00:72::/64"]
    network = config_list(version, "na-dual", bridge(host_local(ipam_dir, *subnets)))

    async def scenario() -> None:
        att = await attach(runtime, network, rt, subnets=subnets, ipam_dir=ipam_dir)
        families = sorted(ipaddress.ip_interface(ip.address).version for ip in att.result.ips)
        assert families == [4, 6]
        await check_by_version(runtime, network, rt)
        await detach(runtime, network, rt, ipam_dir)
        assert await veths(node.path) == set()

    asyncio.run(scenario())


@pytest.mark.req("CNI-CHECK")
@pytest.mark.req("CNI-CACHE")
@pytest.mark.parametrize("version", VERSIONS)
def test_ptp_host_local(
    version: str,
    node: Node,
    make_pod: Callable[[], str],
    ipam_dir: Path,
    runtime: chain.Runtime,
) -> None:
    pod = make_pod()
    rt = pod_rt(pod)
    network = config_list(
        version, "na-ptp", {"type": "ptp", "ipam": host_local(ipam_dir, "10.73.0.0/24")}
    )

    async def scenario() -> None:
        att = await attach(runtime, network, rt, subnets=["10.73.0.0/24"], ipam_dir=ipam_dir)
        assert att.state.kind == "veth"
        hosts = [i for i in att.result.interfaces if not i.sandbox]
        assert len(hosts) == 1
        assert await veths(node.path) == {hosts[0].name}
        await check_by_version(runtime, network, rt)
        await detach(runtime, network, rt, ipam_dir)
        assert await veths(node.path) == set()

    asyncio.run(scenario())


@pytest.mark.req("CNI-CHECK")
@pytest.mark.req("CNI-CACHE")
@pytest.mark.parametrize("version", VERSIONS)
def test_macvlan_static(
    version: str,
    node: Node,
    make_pod: Callable[[], str],
    ipam_dir: Path,
    runtime: chain.Runtime,
) -> None:
    require_link_kind("macvlan")
    master, peer = unique("m"), unique("p")
    links.add_veth_pair(node.path, master, peer)
    pod = make_pod()
    rt = pod_rt(pod)
    network = config_list(
        version,
        "na-macvlan",
        {
            "type": "macvlan",
            "master": master,
            "mode": "bridge",
            "ipam": {"type": "static", "addresses": [{"address": "10.77.0.5/24"}]},
        },
    )

    async def scenario() -> None:
        att = await attach(runtime, network, rt, subnets=["10.77.0.0/24"])
        assert [ip.address for ip in att.result.ips] == ["10.77.0.5/24"]
        assert att.state.addresses.count("10.77.0.5/24") == 1
        assert att.state.kind == "macvlan"
        assert allocations(ipam_dir) == []  # static keeps no files
        await check_by_version(runtime, network, rt)
        await detach(runtime, network, rt, ipam_dir)
        assert master in await interfaces(node.path)  # the master is not the plugin's

    asyncio.run(scenario())


@pytest.mark.req("CNI-CHECK")
@pytest.mark.req("CNI-CACHE")
@pytest.mark.parametrize("version", VERSIONS)
def test_loopback(version: str, make_pod: Callable[[], str], runtime: chain.Runtime) -> None:
    pod = make_pod()
    rt = pod_rt(pod, ifname="lo")
    network = conf.parse_any({"cniVersion": version, "name": "na-lo", "type": "loopback"})
    assert not links.read_interfaces(pod)["lo"].up  # a new namespace's lo is down

    async def scenario() -> None:
        res = layered(await runtime.add_network_list(network, rt))
        assert res.cni_version == version
        found = result.first_sandbox_interface(res)
        assert found is not None
        index, interface = found
        assert (interface.name, interface.sandbox) == ("lo", pod)
        v4 = [ip for ip in res.ips if ipaddress.ip_interface(ip.address).version == 4]
        assert [(ip.address, ip.interface) for ip in v4] == [("127.0.0.1/8", index)]
        assert {ip.interface for ip in res.ips} == {index}
        state = (await interfaces(pod))["lo"]
        assert state.up
        assert "127.0.0.1/8" in state.addresses
        cached = runtime.cached_result(network, rt)
        assert cached is not None
        assert cached.to_raw() == res.to_raw()
        await check_by_version(runtime, network, rt)
        for _ in range(2):  # lo cannot be removed: DEL takes it down, twice over
            await runtime.del_network_list(network, rt)
            assert not (await interfaces(pod))["lo"].up
            assert runtime.cache.load(key_of(network, rt)) is None

    asyncio.run(scenario())


# -- chains ------------------------------------------------------------------------------


@pytest.mark.req("RT-LIST")
@pytest.mark.req("CNI-CHECK")
@pytest.mark.req("CNI-CACHE")
@pytest.mark.parametrize("version", VERSIONS)
def test_bridge_then_tuning_sysctl_and_runtime_mac(
    version: str,
    node: Node,
    make_pod: Callable[[], str],
    ipam_dir: Path,
    tmp_path: Path,
    runtime: chain.Runtime,
) -> None:
    pod = make_pod()
    mac = "c2:11:22:33:44:55"
    rt = pod_rt(pod, capability_args={"mac": mac})
    sysctl = "/proc/sys/net/ipv4/conf/eth0/arp_ignore"
    network = config_list(
        version,
        "na-tuned",
        bridge(host_local(ipam_dir, "10.75.0.0/24")),
        {
            "type": "tuning",
            "dataDir": str(tmp_path / "tuning"),
            "capabilities": {"mac": True},
            "sysctl": {"net.ipv4.conf.eth0.arp_ignore": "1"},
        },
    )

    async def scenario() -> None:
        att = await attach(runtime, network, rt, subnets=["10.75.0.0/24"], ipam_dir=ipam_dir)
        # runtimeConfig.mac reached tuning (capability declared), which set it and said so.
        assert att.state.mac == mac
        assert att.interface.mac == mac
        assert (await output_in(pod, "cat", sysctl)).strip() == "1"
        # prevResult was chained: tuning's result is bridge's, with the three interfaces.
        assert len(att.result.interfaces) == 3
        await check_by_version(runtime, network, rt)
        await detach(runtime, network, rt, ipam_dir)

    asyncio.run(scenario())


async def firewall_rules(netns: str) -> str:
    """The namespace's firewall, IPv4 and IPv6, as iptables (what portmap 1.1.1 uses) shows it,
    or nft where there is no iptables."""
    if shutil.which("iptables-save") is not None and shutil.which("ip6tables-save") is not None:
        return await output_in(netns, "iptables-save") + await output_in(netns, "ip6tables-save")
    return await output_in(netns, "nft", "list", "ruleset")


PORTMAP_CHECK_BUG = "plugin portmap failed (check): could not check ipv6 dnat: rule "


@pytest.mark.req("RT-LIST")
@pytest.mark.parametrize("version", VERSIONS)
def test_bridge_portmap_bandwidth(
    version: str,
    node: Node,
    make_pod: Callable[[], str],
    ipam_dir: Path,
    runtime: chain.Runtime,
) -> None:
    pod = make_pod()
    rt = pod_rt(
        pod,
        capability_args={
            "portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}],
            "bandwidth": {
                "ingressRate": 10_000_000,
                "ingressBurst": 1_000_000,
                "egressRate": 20_000_000,
                "egressBurst": 1_000_000,
            },
        },
    )
    br = unique("br")
    subnets = ["10.76.0.0/24", "fd00:76::/64"]
    first = bridge(host_local(ipam_dir, *subnets), name=br)
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}}
    bandwidth = {"type": "bandwidth", "capabilities": {"bandwidth": True}}
    network = config_list(version, "na-ports", first, portmap, bandwidth)
    # The same attachment (same network name) seen without portmap, for CHECK below.
    without_portmap = config_list(version, "na-ports", first, bandwidth)

    async def scenario() -> None:
        att = await attach(runtime, network, rt, subnets=subnets, ipam_dir=ipam_dir)
        # bridge's result went through portmap untouched; bandwidth appended its ifb device.
        names = [i.name for i in att.result.interfaces]
        assert len(names) == 4
        assert (names[0], names[2]) == (br, rt.ifname)
        host_veth, ifb = names[1], names[3]
        assert await veths(node.path) == {host_veth}
        pod_ips = {ipaddress.ip_interface(ip.address).ip for ip in att.result.ips}
        targets = sorted(f"[{ip}]:80" if ip.version == 6 else f"{ip}:80" for ip in pod_ips)

        rules = await firewall_rules(node.path)
        dnat = [line for line in rules.splitlines() if re.search(r"dport 18080\b", line)]
        for target in targets:  # the mapping leads to the pod, in both families
            assert any(target in line for line in dnat), (target, rules)

        on_veth = await output_in(node.path, "tc", "qdisc", "show", "dev", host_veth)
        assert re.search(r"qdisc tbf .* rate 10Mbit", on_veth), on_veth
        node_links = await interfaces(node.path)
        assert [name for name, s in node_links.items() if s.kind == "ifb"] == [ifb]
        on_ifb = await output_in(node.path, "tc", "qdisc", "show", "dev", ifb)
        assert re.search(r"qdisc tbf .* rate 20Mbit", on_ifb), on_ifb

        failure: errors.PluginError | None = None
        try:
            await check_by_version(runtime, network, rt)
        except errors.PluginError as exc:
            failure = exc
        if failure is not None:
            # portmap 1.1.1's CHECK looks for each family's DNAT rules in both the iptables and
            # the ip6tables tables, so it always fails where both exist (containernetworking/
            # plugins#819, fixed after 1.1.1). Only that failure is tolerated, and the other
            # plugins' CHECK must then pass on their own.
            assert str(failure).startswith(PORTMAP_CHECK_BUG), failure
            await check_by_version(runtime, without_portmap, rt)
        await detach(runtime, network, rt, ipam_dir)

        assert "18080" not in await firewall_rules(node.path)
        assert "tbf" not in await output_in(node.path, "tc", "qdisc", "show")
        left = await interfaces(node.path)
        assert [name for name, s in left.items() if s.kind in ("ifb", "veth")] == []

    asyncio.run(scenario())


# -- what reaches the delegate --------------------------------------------------------------


@pytest.mark.req("CNI-ENV")
@pytest.mark.parametrize("version", VERSIONS)
def test_delegate_gets_cni_env_and_stdin_config(
    version: str,
    node: Node,
    make_pod: Callable[[], str],
    ipam_dir: Path,
    runtime: chain.Runtime,
) -> None:
    pod = make_pod()
    cid = container_id()
    args = (("IgnoreUnknown", "1"), ("IP", "10.74.0.42"))
    rt = chain.RuntimeConf(container_id=cid, ifname="net7", netns=pod, args=args)
    network = config_list(version, "na-env", bridge(host_local(ipam_dir, "10.74.0.0/24")))

    async def scenario() -> None:
        att = await attach(runtime, network, rt, subnets=["10.74.0.0/24"], ipam_dir=ipam_dir)
        # CNI_IFNAME and CNI_NETNS: the interface is where and what was asked.
        assert att.interface.name == "net7"
        assert att.interface.sandbox == pod
        assert set(await interfaces(pod)) == {"lo", "net7"}
        # CNI_ARGS reached host-local (through bridge): it allocated the requested address.
        assert [ip.address for ip in att.result.ips] == ["10.74.0.42/24"]
        # stdin: host-local used our dataDir under the injected network name, and
        # CNI_CONTAINERID and CNI_IFNAME are what it wrote into the allocation.
        allocation = ipam_dir / "na-env" / "10.74.0.42"
        assert allocation.read_text().splitlines() == [cid, "net7"]
        await detach(runtime, network, rt, ipam_dir)

    asyncio.run(scenario())


# -- results converted between versions, accepted by real plugins --------------------------


@pytest.mark.req("CNI-CONVERT")
@pytest.mark.parametrize(
    ("add_version", "check_version"), [("1.0.0", "0.4.0"), ("0.3.1", "1.0.0"), ("0.4.0", "1.0.0")]
)
def test_converted_result_is_a_valid_prev_result(
    add_version: str,
    check_version: str,
    node: Node,
    make_pod: Callable[[], str],
    ipam_dir: Path,
    runtime: chain.Runtime,
) -> None:
    """A real bridge result converted to another version round-trips, and bridge's CHECK at
    that version accepts it as `prevResult` (and rejects one that does not match the pod)."""
    pod = make_pod()
    rt = pod_rt(pod)
    plugin = bridge(host_local(ipam_dir, "10.78.0.0/24"))
    added = config_list(add_version, "na-conv", plugin)
    checked = config_list(check_version, "na-conv", plugin)

    async def check_with(prev: result.Result) -> None:
        config = chain.build_plugin_config(checked, checked.plugins[0], prev_result=prev)
        call = invoke.Invocation(
            command=spec.CHECK,
            container_id=rt.container_id,
            netns=rt.netns,
            ifname=rt.ifname,
            path=runtime.path,
        )
        path = find.find_plugin("bridge", runtime.path)
        await runtime.invoker.exec_without_result("bridge", path, config, call)

    async def scenario() -> None:
        att = await attach(runtime, added, rt, subnets=["10.78.0.0/24"], ipam_dir=ipam_dir)
        converted = layered(result_convert.convert(att.result, check_version))
        assert converted.cni_version == check_version
        raw_ips = converted.to_raw()["ips"]
        assert isinstance(raw_ips, list)
        has_version_key = [("version" in ip) for ip in raw_ips]
        assert has_version_key == [check_version != "1.0.0"] * len(raw_ips)
        assert result_convert.convert(converted, add_version) == att.result
        await check_with(converted)
        # The same CHECK can fail: a prevResult naming another MAC is refused.
        other_mac = tuple(
            i._replace(mac="c2:00:00:00:00:01") if i.sandbox else i for i in converted.interfaces
        )
        mismatched = converted.replace(interfaces=other_mac)
        with pytest.raises(errors.CNIError, match=r"plugin bridge failed \(check\)"):
            await check_with(mismatched)
        await detach(runtime, added, rt, ipam_dir)

    asyncio.run(scenario())


@pytest.mark.req("CNI-CHECK")
@pytest.mark.parametrize("version", ["0.4.0", "1.0.0"])
def test_check_fails_when_the_pod_lost_its_address(
    version: str,
    node: Node,
    make_pod: Callable[[], str],
    ipam_dir: Path,
    runtime: chain.Runtime,
) -> None:
    pod = make_pod()
    rt = pod_rt(pod)
    network = config_list(version, "na-chk", bridge(host_local(ipam_dir, "10.79.0.0/24")))

    async def scenario() -> None:
        att = await attach(runtime, network, rt, subnets=["10.79.0.0/24"], ipam_dir=ipam_dir)
        await runtime.check_network_list(network, rt)
        address = att.result.ips[0].address
        await output_in(pod, "ip", "address", "del", address, "dev", rt.ifname)
        with pytest.raises(errors.CNIError, match=r"plugin bridge failed \(check\)"):
            await runtime.check_network_list(network, rt)
        await detach(runtime, network, rt, ipam_dir)
        with pytest.raises(errors.UnknownContainerError, match="no cached result"):
            await runtime.check_network_list(network, rt)

    asyncio.run(scenario())


# -- the attachment carries traffic ----------------------------------------------------------

# An ICMP echo in Python (no `ping` binary is needed): exit 0 when the reply comes.
ICMP_ECHO = r"""
import os, socket, struct, sys, time
dst = sys.argv[1]
def checksum(data):
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF
ident, payload = os.getpid() & 0xFFFF, b"netattach-ping!!"
header = struct.pack("!BBHHH", 8, 0, 0, ident, 1)
packet = struct.pack("!BBHHH", 8, 0, checksum(header + payload), ident, 1) + payload
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
sock.sendto(packet, (dst, 0))
deadline = time.monotonic() + 2.0
while (left := deadline - time.monotonic()) > 0:
    sock.settimeout(left)
    try:
        data, (src, _) = sock.recvfrom(2048)
    except socket.timeout:
        break
    start = (data[0] & 0x0F) * 4
    kind, _, _, rid, seq = struct.unpack("!BBHHH", data[start:start + 8])
    if src == dst and kind == 0 and rid == ident and seq == 1:
        sys.exit(0)
sys.exit(1)
"""


async def ping(from_netns: str, address: str) -> bool:
    status, _ = await run_in(from_netns, sys.executable, "-c", ICMP_ECHO, address)
    return status == 0


def test_two_pods_on_one_bridge_ping_each_other(
    node: Node,
    make_pod: Callable[[], str],
    ipam_dir: Path,
    runtime: chain.Runtime,
) -> None:
    pod_a, pod_b = make_pod(), make_pod()
    rt_a, rt_b = pod_rt(pod_a), pod_rt(pod_b)
    network = config_list("1.0.0", "na-ping", bridge(host_local(ipam_dir, "10.80.0.0/24")))

    async def scenario() -> None:
        a = await attach(runtime, network, rt_a, subnets=["10.80.0.0/24"])
        b = await attach(runtime, network, rt_b, subnets=["10.80.0.0/24"])
        ip_a = str(ipaddress.ip_interface(a.result.ips[0].address).ip)
        ip_b = str(ipaddress.ip_interface(b.result.ips[0].address).ip)
        assert ip_a != ip_b
        assert await ping(pod_a, ip_b)
        assert await ping(pod_b, ip_a)
        # Once B is detached, nothing answers for its address: the reply above was B's.
        await runtime.del_network_list(network, rt_b)
        assert not await ping(pod_a, ip_b)
        await detach(runtime, network, rt_a, ipam_dir)

    asyncio.run(scenario())
