"""netattach's IPAM as pure code: the config checked (IPAM-BAD), blocks, the allocator's
invariants under any order of ADDs and DELs (IPAM-UNIQUE, IPAM-NOLEAK), and the orchestrator
turning `"type": "netattach"` into `static` addresses, all or none (fake plugins, no root)."""

from __future__ import annotations

import asyncio
import io
import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.cli import cluster_pods, status
from netattach.cli import sources as cli_sources
from netattach.cluster import model, store
from netattach.cni import errors
from netattach.daemon import introspect
from netattach.ipam import allocator, blocks, config, ledger, service, sources
from netattach.pods import orchestrator
from tests.builders import call, nad, orchestrated, pod, view_of
from tests.unit import fake_plugins


def pool_of(ipam: dict[str, Any], name: str = "data") -> config.PoolConfig:
    return config.parse_pool({"type": "netattach", **ipam}, name, source="NAD blue/net-a")


def problems_of(ipam: dict[str, Any]) -> str:
    with pytest.raises(errors.InvalidNetworkConfigError) as caught:
        pool_of(ipam)
    assert caught.value.msg.startswith("NAD blue/net-a: ipam of type 'netattach' is invalid: ")
    return caught.value.details


# --- the config ----------------------------------------------------------------------------


@pytest.mark.req("IPAM-BAD")
def test_host_locals_keys_read_as_host_local_reads_them() -> None:
    single = pool_of({"subnet": "10.70.0.0/24"})
    (r,) = single.range_sets[0]
    assert (str(r.first), str(r.last), str(r.gateway)) == ("10.70.0.1", "10.70.0.254", "10.70.0.1")
    assert not single.given(ipaddress.ip_address("10.70.0.1"))  # the gateway
    assert not single.given(ipaddress.ip_address("10.70.0.255"))  # the broadcast
    dual = pool_of(
        {
            "ranges": [
                [{"subnet": "10.70.0.0/24", "rangeStart": "10.70.0.10", "rangeEnd": "10.70.0.20"}],
                [{"subnet": "fd00:70::/120", "gateway": "fd00:70::fe"}],
            ],
            "exclude": ["10.70.0.12/31"],
            "routes": [{"dst": "10.0.0.0/8"}],
        }
    )
    assert len(dual.range_sets) == 2
    assert [str(a) for a in blocks.given_in(ipaddress.ip_network("10.70.0.0/28"), dual)] == [
        "10.70.0.10", "10.70.0.11", "10.70.0.14", "10.70.0.15",
    ]  # fmt: skip
    assert dual.given(ipaddress.ip_address("fd00:70::ff"))  # IPv6: no broadcast
    assert not dual.given(ipaddress.ip_address("fd00:70::fe"))  # its gateway


@pytest.mark.req("IPAM-BAD")
def test_every_problem_of_a_bad_config_is_named_with_its_value_quoted() -> None:
    details = problems_of(
        {
            "ranges": [
                [{"subnet": "10.70.0.1/24"}],
                [{"subnet": "10.71.0.0/24", "rangeStart": "::ffff:10.71.0.5"}],
                [{"subnet": "10.72.0.0/31"}],
                [{"subnet": "10.73.0.0/24", "rangeStart": "10.73.0.50", "rangeEnd": "10.73.0.5"}],
                [{"subnet": "10.74.0.0/24"}, {"subnet": "10.74.0.128/25"}],
            ],
            "exclude": "10.70.0.0/28",
            "reuseDelay": "soon",
            "bogus": 1,
        }
    )
    for expected in (
        'unknown keys "bogus"',
        'ranges[0][0].subnet "10.70.0.1/24" has host bits set',
        'ranges[1][0].rangeStart must be an address (IPv4 written as IPv4), got "::ffff:10.71.0.5"',
        'ranges[2][0].subnet "10.72.0.0/31" is too small',
        "ranges[3][0]: rangeStart 10.73.0.50 is after rangeEnd 10.73.0.5",
        "overlap",
        'exclude must be a list of CIDRs, got "10.70.0.0/28"',
        'reuseDelay must be seconds from 0 to 86400, got "soon"',
    ):
        assert expected in details, (expected, details)
    assert "no range" in problems_of({})
    assert "not both" in problems_of(
        {"subnet": "10.0.0.0/24", "ranges": [[{"subnet": "10.1.0.0/24"}]]}
    )
    assert "is not in the subnet" in problems_of({"subnet": "10.0.0.0/24", "gateway": "10.1.0.1"})


@given(st.ip_addresses())
def test_a_block_name_is_a_dns_subdomain_that_names_the_block_back(address: Any) -> None:
    block = blocks.block_of(address)
    name = blocks.name_of(block)
    assert len(name) <= 253
    assert name == name.lower()
    assert all(c.isalnum() or c in "-." for c in name)
    assert name[0].isalnum()
    assert name[-1].isalnum()
    assert blocks.parse_name(name) == block
    assert block.num_addresses == blocks.BLOCK_ADDRESSES
    assert address in block


# --- the allocator -------------------------------------------------------------------------


POOL = pool_of({"subnet": "10.70.0.0/26", "reuseDelay": 30})


@pytest.mark.req("IPAM-UNIQUE", "IPAM-NOLEAK")
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 9), st.integers(0, 40)), max_size=120))
def test_no_address_is_handed_out_twice_and_a_freed_one_waits(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[bool, int, int]]
) -> None:
    """Any order of ADDs (take an address) and DELs (free a container's), the clock moving on:
    every held address is the pool's and in a block the node holds, none has two holders, and a
    freed one is not handed out again before its reuse delay."""
    book = ledger.Ledger(tmp_path_factory.mktemp("l") / "p.json", POOL.pool)
    book.blocks = set(blocks.blocks_of(POOL.range_sets[0]))
    now = 0.0
    freed_at: dict[config.Address, float] = {}
    for adding, container, wait in steps:
        now += wait
        holder = ledger.Holder(f"c{container}", "net1")
        if adding:
            address = allocator.pick(book, POOL, 0, holder, now)
            if address is not None:
                assert now - freed_at.get(address, -1e9) >= POOL.reuse_delay
        else:
            for address in allocator.release(book, f"c{container}", now):
                freed_at[address] = now
        assert all(POOL.given(a) and blocks.block_of(a) in book.blocks for a in book.held)
        assert not set(book.held) & set(book.freed)
    # every address comes back: released, and once the delay passed, all free again
    for container in range(10):
        allocator.release(book, f"c{container}", now)
    assert book.held == {}
    expected = sum(len(blocks.given_in(b, POOL)) for b in book.blocks)
    assert allocator.free_count(book, POOL, 0, now + POOL.reuse_delay) == expected


# --- the service and the orchestrator -----------------------------------------------------


def bridge_nad(name: str, ipam: dict[str, Any], **more: Any) -> model.KubeObject:
    config = {"cniVersion": "1.0.0", "name": "data", "type": "bridge", "bridge": "na-x", **more}
    return nad(name, {**config, "ipam": {"type": "netattach", **ipam}})


def one_pool(tmp_path: Path) -> tuple[orchestrator.Orchestrator, service.Addresses]:
    """The orchestrator on pod blue/web selecting net-a, a bridge network of pool `data`
    (10.70.0.0/24), with the pools of one machine."""
    view = view_of(pod("net-a"), bridge_nad("net-a", {"subnet": "10.70.0.0/24"}))
    pools = service.Addresses(tmp_path / "ipam", sources.LocalSource())
    orch, _, _ = orchestrated(tmp_path, view, addresses=pools)
    return orch, pools


def static_behaviour(fake_call: Any) -> Any:
    """A bridge plugin whose result gives the addresses its `static` IPAM names (as the real
    pair does), so the orchestrator's check of requested `ips` sees them."""
    outcome = fake_plugins.default_behaviour(fake_call)
    ipam = fake_call.config.get("ipam") or {}
    if fake_call.command != "ADD" or ipam.get("type") != "static":
        return outcome
    result = json.loads(outcome.stdout)
    result["ips"] = [{"address": a["address"], "interface": 0} for a in ipam["addresses"]]
    return fake_plugins.ok(result)


def addresses_of(fake: Any, pod_ifname: str = "net1") -> list[dict[str, Any]]:
    """The `static` IPAM the bridge plugin was given at ADD for interface `pod_ifname`."""
    return [
        c.config["ipam"]
        for c in fake.calls
        if c.plugin == "bridge" and c.command == "ADD" and c.env.get("CNI_IFNAME") == pod_ifname
    ]


@pytest.mark.req("IPAM-UNIQUE", "IPAM-NOLEAK")
def test_an_add_is_given_static_addresses_and_its_del_frees_them(tmp_path: Path) -> None:
    ipam = {"ranges": [[{"subnet": "10.70.0.0/24"}], [{"subnet": "fd00:70::/64"}]],
            "routes": [{"dst": "10.0.0.0/8"}], "reuseDelay": 0}  # fmt: skip
    pods = [pod("net-a", name=f"web-{i}", uid=f"u{i}") for i in range(3)]
    view = view_of(*pods, bridge_nad("net-a", ipam))
    pools = service.Addresses(tmp_path / "ipam", sources.LocalSource())
    orch, _, fake = orchestrated(tmp_path, view, addresses=pools)

    async def body() -> None:
        await pools.start()
        for i in range(3):
            add = call(pod_name=f"web-{i}", uid=f"u{i}", container_id=f"c{i}")
            await orch.add(add, {"cniVersion": "1.0.0"})
        given = addresses_of(fake)
        assert [g["type"] for g in given] == ["static"] * 3
        assert given[0]["addresses"] == [
            {"address": "10.70.0.2/24", "gateway": "10.70.0.1"},
            {"address": "fd00:70::2/64", "gateway": "fd00:70::1"},
        ]
        assert given[0]["routes"] == [{"dst": "10.0.0.0/8"}]
        taken = [a["address"] for g in given for a in g["addresses"]]
        assert len(set(taken)) == 6
        book = pools.ledgers["data"]
        assert {h.pod for h in book.held.values()} == {"blue/web-0", "blue/web-1", "blue/web-2"}
        on_disk = json.loads(book.path.read_text())
        assert len(on_disk["held"]) == 6
        assert on_disk["blocks"] == sorted(on_disk["blocks"])

        await orch.delete(call("DEL", pod_name="web-1", uid="u1", container_id="c1"))
        assert len(book.held) == 4
        assert {h.container_id for h in book.held.values()} == {"c0", "c2"}
        # freed, and (reuseDelay 0) the next pod takes the lowest free address again
        await orch.add(call(pod_name="web-1", uid="u1", container_id="c9"), {"cniVersion": "1.0.0"})
        assert addresses_of(fake)[-1]["addresses"][0]["address"] == "10.70.0.3/24"

    asyncio.run(body())


@pytest.mark.req("IPAM-BAD", "IPAM-NOLEAK")
def test_an_exhausted_pool_fails_the_add_whole_and_holds_nothing_of_it(tmp_path: Path) -> None:
    # two addresses in the IPv4 range, plenty in the IPv6 one
    two = {"subnet": "10.70.0.0/24", "rangeStart": "10.70.0.10", "rangeEnd": "10.70.0.11"}
    ipam = {"ranges": [[{"subnet": "fd00:70::/64"}], [two]]}
    pods = [pod("net-a", name=f"web-{i}", uid=f"u{i}") for i in range(3)]
    pools = service.Addresses(tmp_path / "ipam", sources.LocalSource())
    orch, _sink, fake = orchestrated(
        tmp_path, view_of(*pods, bridge_nad("net-a", ipam)), addresses=pools
    )

    async def body() -> None:
        await pools.start()
        for i in range(2):
            await orch.add(call(pod_name=f"web-{i}", uid=f"u{i}", container_id=f"c{i}"), {})
        ran = len(fake.calls)
        with pytest.raises(errors.AddressesExhaustedError) as caught:
            await orch.add(call(pod_name="web-2", uid="u2", container_id="c2"), {})
        assert caught.value.code == 105
        assert "NetworkAttachmentDefinition blue/net-a: pool 'data' has no free address in " in (
            caught.value.msg
        )
        assert "10.70.0.0/24 (10.70.0.10-10.70.0.11)" in caught.value.msg
        assert caught.value.details.startswith("2 held on this node")
        assert len(fake.calls) == ran  # no plugin ran
        assert {h.container_id for h in pools.ledgers["data"].held.values()} == {"c0", "c1"}

    asyncio.run(body())


@pytest.mark.req("IPAM-UNIQUE", "IPAM-BAD")
def test_a_requested_address_is_given_only_inside_the_pool_and_when_free(tmp_path: Path) -> None:
    ipam = {"subnet": "10.70.0.0/24"}
    selections = {
        "a": [{"name": "net-a", "ips": ["10.70.0.50/24"]}],
        "b": [{"name": "net-a", "ips": ["10.70.0.50/24"]}],
        "c": [{"name": "net-a", "ips": ["10.99.0.50/24"]}],
    }
    pods = [pod(json.dumps(s), name=n, uid=f"u-{n}") for n, s in selections.items()]
    caps = {"capabilities": {"ips": True}}
    pools = service.Addresses(tmp_path / "ipam", sources.LocalSource())
    orch, _, fake = orchestrated(
        tmp_path, view_of(*pods, bridge_nad("net-a", ipam, **caps)), addresses=pools
    )
    fake.behaviour["bridge"] = static_behaviour

    async def body() -> None:
        await pools.start()
        await orch.add(call(pod_name="a", uid="u-a", container_id="ca"), {})
        assert addresses_of(fake)[-1]["addresses"][0]["address"] == "10.70.0.50/24"
        # the node guard (SEC-NODE) refuses it before the pool is asked
        with pytest.raises(errors.CNIError, match="is held by the live attachment blue/net-a"):
            await orch.add(call(pod_name="b", uid="u-b", container_id="cb"), {})
        with pytest.raises(errors.InvalidSelectionError, match="is not one the pool 'data' hands"):
            await orch.add(call(pod_name="c", uid="u-c", container_id="cc"), {})
        assert {h.container_id for h in pools.ledgers["data"].held.values()} == {"ca"}

    asyncio.run(body())


@pytest.mark.req("IPAM-BAD")
def test_networks_of_other_names_whose_ranges_overlap_are_refused(tmp_path: Path) -> None:
    first = bridge_nad("net-a", {"subnet": "10.70.0.0/24"})
    second = nad("net-b", {"cniVersion": "1.0.0", "name": "other", "type": "bridge",
                           "ipam": {"type": "netattach", "subnet": "10.70.0.0/25"}})  # fmt: skip
    pods = [pod("net-a", name="a", uid="ua"), pod("net-b", name="b", uid="ub")]
    pools = service.Addresses(tmp_path / "ipam", sources.LocalSource())
    orch, _, _ = orchestrated(tmp_path, view_of(*pods, first, second), addresses=pools)

    async def body() -> None:
        await pools.start()
        await orch.add(call(pod_name="a", uid="ua", container_id="ca"), {})
        with pytest.raises(errors.InvalidNetworkConfigError) as caught:
            await orch.add(call(pod_name="b", uid="ub", container_id="cb"), {})
        assert "overlap those of network 'data'" in caught.value.msg
        assert pools.ledgers["other"].held == {}

    asyncio.run(body())


@pytest.mark.req("IPAM-NOLEAK")
def test_the_ledgers_are_read_back_after_a_restart(tmp_path: Path) -> None:
    orch, pools = one_pool(tmp_path)

    async def body() -> None:
        await pools.start()
        await orch.add(call(), {})
        again = service.Addresses(tmp_path / "ipam", sources.LocalSource())
        await again.start()
        assert [str(a) for a in again.ledgers["data"].held] == ["10.70.0.2"]
        again.release("c1")
        assert again.ledgers["data"].held == {}

    asyncio.run(body())


@pytest.mark.req("IPAM-BAD")
def test_without_the_daemon_or_at_hot_plug_the_ipam_is_refused_by_name(tmp_path: Path) -> None:
    """The thin plugin has no pools (addresses=None): error 7 naming why, nothing run. Hot-plug
    does not take addresses from the pools yet: refused the same way, the pod left as it was."""
    plain = nad("net-a", {"cniVersion": "1.0.0", "name": "plain", "type": "bridge"})
    pooled = bridge_nad("net-b", {"subnet": "10.70.0.0/24"})
    (tmp_path / "thin").mkdir()
    thin, _, fake = orchestrated(tmp_path / "thin", view_of(pod("net-b"), plain, pooled))
    with pytest.raises(errors.InvalidNetworkConfigError, match="served by the netattach daemon"):
        asyncio.run(thin.add(call(), {}))
    assert fake.calls == []

    sandbox = tmp_path / "sandbox"
    sandbox.write_text("")
    view = view_of(pod("net-a"), plain, pooled)
    pools = service.Addresses(tmp_path / "ipam", sources.LocalSource())
    (tmp_path / "thick").mkdir()
    orch, _, _ = orchestrated(tmp_path / "thick", view, addresses=pools)

    async def body() -> None:
        await pools.start()
        await orch.add(call(netns=str(sandbox)), {})
        view.upsert(pod("net-a,net-b"))
        with pytest.raises(errors.InvalidNetworkConfigError, match="hot-plug does not take"):
            await orch.replug("c1")
        record = orch.records.load("c1")
        assert record is not None
        assert [a.status_name for a in record.attachments] == ["cluster-default", "blue/net-a"]
        assert pools.ledgers == {}

    asyncio.run(body())


@pytest.mark.req("IPAM-NOLEAK")
def test_the_sweep_frees_the_addresses_of_a_container_without_a_record(tmp_path: Path) -> None:
    """An ADD took addresses and stopped before its record was written (the daemon killed in
    between): the periodic sweep frees them; a container with a record keeps its own."""
    orch, pools = one_pool(tmp_path)
    sandbox = tmp_path / "sandbox"
    sandbox.write_text("")

    async def body() -> None:
        await pools.start()
        await orch.add(call(netns=str(sandbox)), {})
        (planned,) = [
            p for p in await orch._build_plan(pod("net-a"), "eth0", {}) if not p.is_default
        ]
        await pools.assign([planned], container_id="c-orphan", pod="blue/gone")
        assert pools.containers() == {"c1", "c-orphan"}
        assert await orch.sweep() == ["c-orphan"]
        assert pools.containers() == {"c1"}

    asyncio.run(body())


@pytest.mark.req("IPAM-NOLEAK")
def test_status_shows_each_pools_use_and_an_address_no_recorded_container_holds(
    tmp_path: Path,
) -> None:
    orch, pools = one_pool(tmp_path)

    async def body() -> None:
        await pools.start()
        await orch.add(call(), {})
        await orch.add(call(container_id="c2"), {})
        await orch.delete(call("DEL", container_id="c2"))  # waits out reuseDelay 30 s

    asyncio.run(body())
    usage, problems = pools.usage({"c1"})
    # one block, 10.70.0.0/28: .1 the gateway, .0 not in the range: 14 given
    assert usage == [
        {"pool": "data", "blocks": ["10.70.0.0/28"], "held": 1, "free": 12, "waiting": 1}
    ]
    assert problems == []
    _, problems = pools.usage(set())  # c1's record gone
    assert problems == [
        "address 10.70.0.2 of pool 'data' is held by pod blue/web (container c1, net1), which "
        "has no record: the daemon's sweep frees it"
    ]
    listing = cluster_pods.Listing(
        pods=[], policies=[], problems=problems,
        pools=[introspect.PoolReport.from_raw(u, "pool") for u in usage],
    )  # fmt: skip
    out = io.StringIO()
    status.render(listing, cli_sources.Source(kind="daemon", path=Path("/s")), "table", out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["POOL", "BLOCKS", "HELD", "FREE", "WAITING"]
    assert lines[1].split() == ["data", "10.70.0.0/28", "1", "12", "1"]
    assert lines[2].startswith("problem: address 10.70.0.2 of pool 'data'")


class ReadableStore(store.ClusterStore):
    """The cache, and the API behind it: here one and the same (`fetch_pod` reads the store)."""

    async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None:
        return self.lookup_pod(namespace, name)


@pytest.mark.req("IPAM-NOLEAK")
def test_a_pod_gone_from_the_api_without_a_del_has_its_addresses_freed_at_the_second_sweep(
    tmp_path: Path,
) -> None:
    """The pod's sandbox lives on (its netns is there) but the API has no such pod any more, or
    one of the same name and another UID: no DEL is coming (the kubelet's state wiped, the pod
    force-deleted while its node was away). Seen gone at one sweep, it is left to a DEL on its
    way; still gone at the next, it is DELeted and its addresses freed. A pod the API still
    shows keeps its own."""
    view = ReadableStore()
    view.replace_all(
        [pod("net-a"), pod("net-a", name="db", uid="u2"),
         bridge_nad("net-a", {"subnet": "10.70.0.0/24"})]
    )  # fmt: skip
    view.mark_synced()
    pools = service.Addresses(tmp_path / "ipam", sources.LocalSource())
    orch, _, _ = orchestrated(tmp_path, view, addresses=pools)
    sandbox = tmp_path / "sandbox"
    sandbox.write_text("")

    async def body() -> None:
        await pools.start()
        await orch.add(call(netns=str(sandbox)), {})
        await orch.add(call(netns=str(sandbox), container_id="c2", pod_name="db", uid="u2"), {})
        assert pools.containers() == {"c1", "c2"}
        view.remove("Pod", "blue", "web")  # deleted, no DEL reached the node
        view.upsert(pod("net-a", name="db", uid="u3"))  # made again: another pod
        assert await orch.sweep() == []
        assert pools.containers() == {"c1", "c2"}
        assert sorted(await orch.sweep()) == ["c1", "c2"]
        assert pools.containers() == set()
        assert list(orch.records.container_ids()) == []

    asyncio.run(body())
