"""netattach's IPAM on a real API server: node allocators, each with its own state directory,
claim blocks of one pool as IPBlocks (deploy/crds/ipblocks.yaml) and hand out addresses; no
address twice, whatever the order; a gone node's blocks come back; a node whose disk is lost
takes its blocks and allocations back from the API (IPAM-UNIQUE, IPAM-NOLEAK, IPAM-BAD)."""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from netattach.cluster import kube_blocks
from netattach.cni import errors
from netattach.ipam import blocks, config, kube_source, ledger
from tests.kube.ipam_nodes import Node, RecordedObjects, given, planned
from tests.kube.kube_http import KubeHttp
from tests.kube.real_api import with_token_only

pytestmark = pytest.mark.req("IPAM-UNIQUE")

BLOCKS = kube_blocks.PATH


@pytest.fixture
def clean_blocks(kube_http: KubeHttp) -> Iterator[list[str]]:
    """The Nodes a test makes (listed in the fixture's value); every IPBlock and those Nodes
    deleted afterwards."""
    nodes: list[str] = []
    yield nodes
    kube_http.delete(BLOCKS)
    for node in nodes:
        kube_http.delete(f"/api/v1/nodes/{node}")


def make_node(kube_http: KubeHttp, nodes: list[str], name: str) -> None:
    response = kube_http.post(
        "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    )
    assert response.status == 201, response.body
    nodes.append(name)


def api_blocks(kube_http: KubeHttp) -> list[dict[str, Any]]:
    response = kube_http.get(BLOCKS)
    assert response.status == 200, response.body
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def test_ten_nodes_at_once_never_hand_out_one_address_twice(
    kubeconfig: Path, kube_http: KubeHttp, clean_blocks: list[str], tmp_path: Path
) -> None:
    pool = f"na-{secrets.token_hex(3)}"
    subnet = "10.201.0.0/23"  # 32 blocks; 10 nodes need 2 each for 20 addresses
    names = [f"na-node-{i}" for i in range(10)]
    for name in names:
        make_node(kube_http, clean_blocks, name)

    async def body() -> dict[str, list[str]]:
        nodes = [Node(kubeconfig, tmp_path / name, name) for name in names]
        taken: dict[str, list[str]] = {name: [] for name in names}
        for node in nodes:
            await node.pools.start()
        try:

            async def take(index: int, count: int) -> None:
                for n in range(count):
                    got = await nodes[index].pools.assign(
                        [planned(pool, subnet)], container_id=f"c-{index}-{n}", pod=f"blue/p{n}"
                    )
                    taken[names[index]].append(given(got))

            await asyncio.gather(*(take(i, 20) for i in range(10)))
            nodes[0].pools.release("c-0-0")  # its DEL: the address leaves the block's status
            for node in nodes:
                await node.source.close()  # the allocations written
        finally:
            for node in nodes:
                await node.api.aclose()
        return taken

    taken = asyncio.run(body())
    everything = [a for addresses in taken.values() for a in addresses]
    assert len(everything) == 200
    assert len(set(everything)) == 200  # never twice
    # each block is one node's, and holds only that node's addresses
    by_block = {item["spec"]["cidr"]: item for item in api_blocks(kube_http)}
    freed = ipaddress.ip_interface(taken[names[0]].pop(0)).ip
    assert str(freed) not in by_block[str(blocks.block_of(freed))]["status"]["allocations"]
    for name, addresses in taken.items():
        for address in addresses:
            block = str(blocks.block_of(ipaddress.ip_interface(address).ip))
            assert by_block[block]["spec"]["node"] == name
            assert (
                str(ipaddress.ip_interface(address).ip) in by_block[block]["status"]["allocations"]
            )
    assert {item["spec"]["pool"] for item in by_block.values()} == {pool}


@pytest.mark.req("IPAM-BAD", "IPAM-NOLEAK")
def test_an_exhausted_pool_an_overlap_and_a_gone_nodes_blocks(
    kubeconfig: Path, kube_http: KubeHttp, clean_blocks: list[str], tmp_path: Path
) -> None:
    pool = f"na-{secrets.token_hex(3)}"
    subnet = "10.202.0.0/28"  # one block: 13 addresses (gateway, network, broadcast out)
    make_node(kube_http, clean_blocks, "na-here")

    async def body() -> None:
        async with Node(kubeconfig, tmp_path / "gone", "na-gone") as gone:
            for n in range(13):
                await gone.pools.assign([planned(pool, subnet)], container_id=f"g{n}")
        async with Node(kubeconfig, tmp_path / "here", "na-here", lease=0.5) as here:
            with pytest.raises(errors.AddressesExhaustedError) as caught:
                await here.pools.assign([planned(pool, subnet)], container_id="h0")
            assert "0 held on this node, 1 blocks of 16 held by other nodes" in caught.value.details
            # another network whose range meets this pool's: refused, naming it
            with pytest.raises(errors.InvalidNetworkConfigError, match=f"network '{pool}'"):
                await here.pools.assign([planned("na-other", "10.202.0.0/27")], container_id="h1")
            # node na-gone has no Node object: once its block is seen unchanged for a lease,
            # it goes back to the pool, and this node takes it
            await here.source._reclaim()
            await asyncio.sleep(0.6)
            await here.source._reclaim()
            got = await here.pools.assign([planned(pool, subnet)], container_id="h2")
            assert given(got) == "10.202.0.2/28"

    asyncio.run(body())
    (block,) = api_blocks(kube_http)
    assert block["spec"]["node"] == "na-here"


@pytest.mark.req("IPAM-NOLEAK")
def test_a_node_whose_disk_is_lost_takes_its_blocks_back_from_the_api(
    kubeconfig: Path, kube_http: KubeHttp, clean_blocks: list[str], tmp_path: Path
) -> None:
    pool = f"na-{secrets.token_hex(3)}"
    subnet = "10.203.0.0/24"
    make_node(kube_http, clean_blocks, "na-disk")

    async def body() -> None:
        async with Node(kubeconfig, tmp_path / "before", "na-disk") as before:
            first = [
                given(await before.pools.assign([planned(pool, subnet)], container_id=f"c{n}"))
                for n in range(3)
            ]
        # the same node, its state directory gone
        async with Node(kubeconfig, tmp_path / "after", "na-disk") as after:
            book = after.pools.ledgers[pool]
            assert sorted(str(a) for a in book.held) == sorted(f.split("/")[0] for f in first)
            got = given(await after.pools.assign([planned(pool, subnet)], container_id="c9"))
            assert got not in first
            assert (tmp_path / "after" / ledger.file_name(pool)).exists()

    asyncio.run(body())


def test_a_block_name_is_accepted_by_the_api_for_both_families(
    kube_http: KubeHttp, clean_blocks: list[str]
) -> None:
    for text in ("10.204.0.37", "fd00:204::1:0:37"):
        block = blocks.block_of(ipaddress.ip_address(text))
        body = {
            "apiVersion": f"{kube_blocks.GROUP}/{kube_blocks.VERSION}",
            "kind": "IPBlock",
            "metadata": {"name": blocks.name_of(block)},
            "spec": {"pool": "p", "cidr": str(block), "node": "n"},
        }
        response = kube_http.post(BLOCKS, body)
        assert response.status == 201, response.body
    # a block's spec never changes: it is deleted and made again
    name = blocks.name_of(blocks.block_of(ipaddress.ip_address("10.204.0.37")))
    response = kube_http.patch(
        f"{BLOCKS}/{name}", {"spec": {"node": "other"}}, "application/merge-patch+json"
    )
    assert response.status == 422, response.body
    assert config.TYPE == "netattach"


def test_a_node_cut_off_from_the_api_stops_handing_out_once_its_lease_lapses(
    kubeconfig: Path, kube_http: KubeHttp, clean_blocks: list[str], tmp_path: Path
) -> None:
    """Fencing: the node keeps allocating inside its block while its lease (renewed by its
    writer) is current; cut off from the API it cannot renew, and once a lease has passed since
    its last renewal began it hands out nothing more from the block, the time after which another
    node could take the block (were its Node gone). Reconnected, it goes on."""
    pool = f"na-{secrets.token_hex(3)}"
    subnet = "10.205.0.0/24"
    make_node(kube_http, clean_blocks, "na-cut")

    async def body() -> None:
        async with Node(kubeconfig, tmp_path / "cut", "na-cut", lease=1.5, renew_every=0.3) as cut:
            first = given(await cut.pools.assign([planned(pool, subnet)], container_id="c0"))
            await asyncio.sleep(2.0)  # renewed all along: still the node's to hand out from
            await cut.pools.assign([planned(pool, subnet)], container_id="c1")
            reachable = cut.source.objects
            dead = httpx2.AsyncClient(base_url="http://127.0.0.1:9")  # nothing listens
            cut.source.objects = kube_blocks.BlockObjects(dead)
            try:
                await asyncio.sleep(2.0)  # a lease without a renewal
                with pytest.raises(errors.TryAgainLaterError, match="did not answer"):
                    await cut.pools.assign([planned(pool, subnet)], container_id="c2")
                assert {h.container_id for h in cut.pools.ledgers[pool].held.values()} == {
                    "c0",
                    "c1",
                }
            finally:
                cut.source.objects = reachable
                await dead.aclose()
            await asyncio.sleep(1.0)  # the writer renews again
            got = given(await cut.pools.assign([planned(pool, subnet)], container_id="c3"))
            # from the block it held all along, two on from the first
            first_ip = ipaddress.ip_interface(first).ip
            assert ipaddress.ip_interface(got).ip == first_ip + 2
            assert len(cut.pools.ledgers[pool].blocks) == 1

    asyncio.run(body())


@pytest.mark.req("IPAM-FAST")
def test_an_add_makes_no_api_request_while_the_nodes_blocks_have_room(
    kubeconfig: Path, kube_http: KubeHttp, clean_blocks: list[str], tmp_path: Path
) -> None:
    """The first ADD claims a block (the list and the create); the next ADDs of the block make
    no request on their way (the allocations are written behind them, one PATCH for many); the
    ADD after the block is full claims the next."""
    pool = f"na-{secrets.token_hex(3)}"
    subnet = "10.209.0.0/24"  # blocks of 16: .0/28 gives 14 (.0 and the gateway .1 out)

    async def body() -> None:
        node = Node(kubeconfig, tmp_path / "fast", "na-fast", objects=RecordedObjects,
                    renew_every=3600)  # fmt: skip
        objects, pools = node.objects, node.pools
        assert isinstance(objects, RecordedObjects)
        try:
            await pools.start()
            started = len(objects.sent)
            await pools.assign([planned(pool, subnet)], container_id="c0")
            claim = objects.sent[started:]
            assert [r.split()[0] for r in claim] == ["GET", "POST"], claim
            (block,) = pools.ledgers[pool].blocks
            room = len(blocks.given_in(block, config.parse_pool(
                {"type": "netattach", "subnet": subnet}, pool, source="test")))  # fmt: skip
            for n in range(1, room):
                before = len(objects.sent)
                await pools.assign([planned(pool, subnet)], container_id=f"c{n}")
                assert objects.sent[before:] == []  # no request on the ADD's way
            await asyncio.sleep(kube_source.FLUSH_DELAY * 3)
            writes = [r for r in objects.sent[started:] if r.startswith("PATCH")]
            assert 1 <= len(writes) <= 3, writes  # the allocations, written behind the ADDs
            before = len(objects.sent)
            await pools.assign([planned(pool, subnet)], container_id="c-next")
            assert [r.split()[0] for r in objects.sent[before:] if "PATCH" not in r] == [
                "GET", "POST",
            ]  # fmt: skip
        finally:
            await node.close()

    asyncio.run(body())


def test_a_refused_write_keeps_the_block_unless_another_node_holds_it(
    kubeconfig: Path, kube_http: KubeHttp, clean_blocks: list[str], tmp_path: Path
) -> None:
    """The writer refused (a token the server does not know: 401, as a restarted server's 403
    before its RBAC cache fills) keeps the node's block and tries again; a block whose object
    now names another node (deleted and made again meanwhile) is dropped from the ledger."""
    pool = f"na-{secrets.token_hex(3)}"
    subnet = "10.210.8.0/24"
    stranger = with_token_only(kubeconfig, tmp_path / "stranger", "not-a-token")

    async def body() -> None:
        async with Node(kubeconfig, tmp_path / "n", "na-refused", renew_every=3600) as node:
            await node.pools.assign([planned(pool, subnet)], container_id="c0")
            (block,) = node.pools.ledgers[pool].blocks
            reachable = node.source.objects
            refused = Node(stranger, tmp_path / "x", "na-refused")
            node.source.objects = refused.objects
            try:
                node.source.changed(node.pools.ledgers[pool], {block})
                with pytest.raises(errors.CNIError):
                    await node.source._flush()
                assert node.pools.ledgers[pool].blocks == {block}  # kept, still dirty
            finally:
                node.source.objects = reachable
                await refused.close()
            await node.source._flush()  # written at the next try
            name = blocks.name_of(block)
            assert kube_http.delete(f"{BLOCKS}/{name}").status == 200
            other = {"apiVersion": f"{kube_blocks.GROUP}/{kube_blocks.VERSION}", "kind": "IPBlock",
                     "metadata": {"name": name},
                     "spec": {"pool": pool, "cidr": str(block), "node": "na-other"}}  # fmt: skip
            assert kube_http.post(BLOCKS, other).status == 201
            node.source.changed(node.pools.ledgers[pool], {block})
            await node.source._flush()
            assert node.pools.ledgers[pool].blocks == set()

    asyncio.run(body())
