"""Config lists that fail half-way, and attachments whose runtime died, with the real plugins."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from netattach.cni import conf, errors
from netattach.runtime import chain, execute
from tests.netns import VERSIONS, attach, bridge, config_list, host_local, interfaces, key_of
from tests.netns_fixtures import Node, allocations, container_id

pytestmark = pytest.mark.netns


@pytest.mark.req("RT-LIST")
@pytest.mark.parametrize("version", VERSIONS)
def test_second_plugin_fails_and_rollback_leaves_nothing(
    version: str,
    node: Node,
    make_pod: Callable[[], str],
    ipam_dir: Path,
    tmp_path: Path,
    runtime: chain.Runtime,
) -> None:
    pod = make_pod()
    rt = chain.RuntimeConf(container_id=container_id(), ifname="eth0", netns=pod)
    network = config_list(
        version,
        "na-broken",
        bridge(host_local(ipam_dir, "10.81.0.0/24")),
        {
            "type": "tuning",
            "dataDir": str(tmp_path / "tuning"),
            "sysctl": {"net.nonexistent.key": "1"},
        },
    )

    async def scenario() -> None:
        with pytest.raises(errors.CNIError) as failure:
            await runtime.add_network_list(network, rt)
        assert str(failure.value).startswith("plugin tuning failed (add)")
        # bridge (first) did its part before tuning (second) failed: there is something to undo,
        # and the record written before the first plugin ran says so, without a result.
        assert rt.ifname in await interfaces(pod)
        assert len(allocations(ipam_dir)) == 1
        record = runtime.cache.load(key_of(network, rt))
        assert record is not None
        assert record.result is None
        assert record.config == network.raw

        # The caller's rollback.
        await runtime.del_network_list(network, rt)
        assert rt.ifname not in await interfaces(pod)
        assert allocations(ipam_dir) == []
        assert runtime.cache.load(key_of(network, rt)) is None
        node_links = await interfaces(node.path)
        assert [name for name, s in node_links.items() if s.kind == "veth"] == []

    asyncio.run(scenario())


@pytest.mark.req("CNI-11")
@pytest.mark.parametrize("version", VERSIONS)
def test_gc_after_restart_deletes_stale_attachments_only(
    version: str,
    node: Node,
    make_pod: Callable[[], str],
    ipam_dir: Path,
    runtime: chain.Runtime,
) -> None:
    """ADD, then the process "dies": a fresh Runtime knows only the on-disk cache, and GC
    deletes the attachments that are not valid any more, and only those."""
    kept_pod, stale_pod = make_pod(), make_pod()
    kept = chain.RuntimeConf(container_id=container_id(), ifname="eth0", netns=kept_pod)
    stale = chain.RuntimeConf(container_id=container_id(), ifname="eth0", netns=stale_pod)
    subnet = "10.82.0.0/24"
    network = config_list(version, "na-gc", bridge(host_local(ipam_dir, subnet)))

    async def scenario() -> None:
        kept_ips = (await attach(runtime, network, kept, subnets=[subnet])).result.ips
        stale_ips = (await attach(runtime, network, stale, subnets=[subnet])).result.ips
        assert len(allocations(ipam_dir)) == 2

        restarted = chain.Runtime(
            path=runtime.path,
            cache_dir=runtime.cache.directory.parent,
            executor=execute.SubprocessExec(host_netns=node.path),
            timeout=30.0,
        )
        valid = [chain.GCAttachment(container_id=kept.container_id, ifname=kept.ifname)]
        await restarted.gc_network_list(network, valid)

        assert "eth0" not in await interfaces(stale_pod)
        assert restarted.cache.load(key_of(network, stale)) is None
        stale_ip = stale_ips[0].address.split("/")[0]
        kept_ip = kept_ips[0].address.split("/")[0]
        assert allocations(ipam_dir) == [kept_ip]
        assert stale_ip != kept_ip
        # The valid one is untouched: interface, address, allocation and record.
        state = (await interfaces(kept_pod))["eth0"]
        assert kept_ips[0].address in state.addresses
        kept_record = restarted.cache.load(key_of(network, kept))
        assert kept_record is not None
        assert kept_record.result is not None

        # With nothing valid, GC takes the last one too.
        await restarted.gc_network_list(network, valid=[])
        assert "eth0" not in await interfaces(kept_pod)
        assert allocations(ipam_dir) == []
        assert restarted.cache.load(key_of(network, kept)) is None
        assert list(restarted.cache.entries()) == []
        # A DEL of either afterwards finds nothing left and still succeeds.
        await detach_again(restarted, network, stale, ipam_dir)

    asyncio.run(scenario())


async def detach_again(
    runtime: chain.Runtime,
    network: conf.NetworkConfigList,
    rt: chain.RuntimeConf,
    ipam_dir: Path,
) -> None:
    await runtime.del_network_list(network, rt)
    assert allocations(ipam_dir) == []
    assert runtime.cache.load(key_of(network, rt)) is None
