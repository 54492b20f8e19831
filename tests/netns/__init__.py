"""Helpers shared by the tests that run the real reference CNI plugins in real namespaces.

`attach`, `check_by_version` and `detach` are the three halves of an attachment's life, each
asserting what the kernel, host-local's data dir and the runtime's cache must then show.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from netattach.cni import conf, errors, result
from netattach.cni.result import Interface
from netattach.netns import links
from netattach.runtime import cache, chain
from tests.netns_fixtures import allocations, plugin_versions, unique

# The CNI versions every netns test runs at: Debian's reference plugins 1.1.1 speak 0.1.0..1.0.0;
# with current ones (NETATTACH_TEST_CNI_PATH, scripts/build-cni-plugins.sh) 1.1.0 as well, where
# a GC runs each plugin's GC after the stale attachments' DEL (v1.10.0's bridge, ptp and macvlan
# accept it and do nothing: host-local's GC is the release's only one, and none of them passes
# it on) and STATUS exists.
VERSIONS = ["0.3.1", "0.4.0", "1.0.0", *(["1.1.0"] if "1.1.0" in plugin_versions() else [])]

LayeredResult = result.Result040 | result.Result100


def host_local(ipam_dir: Path, *subnets: str) -> dict[str, Any]:
    """host-local IPAM with one range set per subnet, keeping its files in `ipam_dir`."""
    return {
        "type": "host-local",
        "dataDir": str(ipam_dir),
        "ranges": [[{"subnet": subnet}] for subnet in subnets],
    }


def bridge(ipam: dict[str, Any], *, name: str | None = None) -> dict[str, Any]:
    """The bridge plugin on a bridge of its own (a unique `na-br-` name unless given one)."""
    return {"type": "bridge", "bridge": name or unique("br"), "ipam": ipam}


def config_list(version: str, name: str, *plugins: dict[str, Any]) -> conf.NetworkConfigList:
    return conf.parse_config_list(
        {"cniVersion": version, "name": name, "plugins": list(plugins)}, source=f"test {name}"
    )


def key_of(network: conf.NetworkConfigList, rt: chain.RuntimeConf) -> cache.AttachmentKey:
    return cache.AttachmentKey(
        network_name=network.name, container_id=rt.container_id, ifname=rt.ifname
    )


async def interfaces(netns: str) -> dict[str, links.InterfaceState]:
    """`links.read_interfaces`, off the event loop: pyroute2's sync API runs a loop of its own."""
    return await asyncio.to_thread(links.read_interfaces, netns)


async def run_in(netns: str, *argv: str) -> tuple[int, str]:
    """Run `argv` inside the network namespace at `netns`: (exit status, stdout + stderr)."""
    proc = await asyncio.create_subprocess_exec(
        "nsenter",
        f"--net={netns}",
        "--",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


async def output_in(netns: str, *argv: str) -> str:
    """stdout of `argv` run inside `netns`; a failure fails the test with its output."""
    status, out = await run_in(netns, *argv)
    assert status == 0, f"{' '.join(argv)} failed in {netns} ({status}): {out}"
    return out


def layered(res: result.Result) -> LayeredResult:
    """`res` as the 0.3.0+ layout it must be at every version these tests run."""
    assert isinstance(res, result.Result040 | result.Result100), res
    return res


def host_ips(res: LayeredResult) -> list[str]:
    """The bare addresses of the result, as host-local names its allocation files."""
    return sorted(str(ipaddress.ip_interface(ip.address).ip) for ip in res.ips)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Attached:
    """An attachment the plugins made, as its result says and as the kernel shows it."""

    result: LayeredResult
    index: int  # of the sandbox interface in `result.interfaces`
    interface: Interface
    state: links.InterfaceState


async def attach(
    runtime: chain.Runtime,
    network: conf.NetworkConfigList,
    rt: chain.RuntimeConf,
    *,
    subnets: Sequence[str],
    ipam_dir: Path | None = None,
) -> Attached:
    """ADD, then assert the result, the pod's interface and the cache all agree.

    `subnets`: one address is expected in each, all on the sandbox interface. `ipam_dir`:
    host-local's data dir, which must then hold exactly the result's addresses.
    """
    res = layered(await runtime.add_network_list(network, rt))
    expected_type = result.Result040 if network.cni_version < "1.0.0" else result.Result100
    assert type(res) is expected_type
    assert res.cni_version == network.cni_version

    found = result.first_sandbox_interface(res)
    assert found is not None, res
    index, interface = found
    assert interface.name == rt.ifname
    assert interface.sandbox == rt.netns

    networks = [ipaddress.ip_network(subnet) for subnet in subnets]
    assert len(res.ips) == len(networks), res.ips
    for net in networks:
        inside = [ip for ip in res.ips if ipaddress.ip_interface(ip.address).ip in net]
        assert len(inside) == 1, f"expected one address in {net}, got {res.ips}"
    assert [ip.interface for ip in res.ips] == [index] * len(res.ips)

    state = (await interfaces(rt.netns))[rt.ifname]
    assert state.up
    assert state.mac.lower() == interface.mac.lower()
    present = {ipaddress.ip_interface(a) for a in state.addresses}
    for ip in res.ips:
        assert ipaddress.ip_interface(ip.address) in present, (ip.address, state.addresses)

    if ipam_dir is not None:
        assert allocations(ipam_dir) == host_ips(res)

    # CNI-CACHE: the record holds this very result, read back in the list's version.
    cached = runtime.cached_result(network, rt)
    assert cached is not None
    assert cached.to_raw() == res.to_raw()
    return Attached(result=res, index=index, interface=interface, state=state)


async def check_by_version(
    runtime: chain.Runtime, network: conf.NetworkConfigList, rt: chain.RuntimeConf
) -> None:
    """CHECK passes from 0.4.0 on; before that the runtime refuses it with code 1."""
    if network.cni_version == "0.3.1":
        with pytest.raises(errors.IncompatibleVersionError, match="does not support CHECK"):
            await runtime.check_network_list(network, rt)
    else:
        await runtime.check_network_list(network, rt)


async def detach(
    runtime: chain.Runtime,
    network: conf.NetworkConfigList,
    rt: chain.RuntimeConf,
    ipam_dir: Path,
) -> None:
    """DEL twice; after each, the interface, every allocation and the record are gone."""
    assert runtime.cache.load(key_of(network, rt)) is not None
    for _ in range(2):
        await runtime.del_network_list(network, rt)
        assert rt.ifname not in await interfaces(rt.netns)
        assert allocations(ipam_dir) == []
        assert runtime.cache.load(key_of(network, rt)) is None
