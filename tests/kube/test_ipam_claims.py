"""Addresses that outlive a pod, on a real API server (IPAM-CLAIM): an IPAMClaim's addresses are
given to each pod that names it, on any node, kept past the pod's DEL, never handed out by a
node's own blocks, and back in the pool once the claim is deleted."""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netattach.cluster import kube_blocks, kube_claims
from netattach.cni import errors
from tests.kube.ipam_nodes import Node, Planned, given, network
from tests.kube.kube_http import KubeHttp

pytestmark = pytest.mark.req("IPAM-CLAIM")


@pytest.fixture
def no_blocks(kube_http: KubeHttp) -> Iterator[None]:
    yield
    kube_http.delete(kube_blocks.PATH)


def make_claim(http: KubeHttp, namespace: str, name: str, network: str) -> None:
    body = {
        "apiVersion": "k8s.cni.cncf.io/v1alpha1",
        "kind": "IPAMClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"network": network, "interface": "net1"},
    }
    response = http.post(kube_claims._path(namespace), body)
    assert response.status == 201, response.body


def claim_object(http: KubeHttp, namespace: str, name: str) -> dict[str, Any]:
    response = http.get(kube_claims._path(namespace, name))
    assert response.status == 200, response.body
    found: dict[str, Any] = response.json()
    return found


def claims_blocks(http: KubeHttp, pool: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = http.get(kube_blocks.PATH).json()["items"]
    return [i for i in items if i["spec"]["pool"] == pool and i["spec"]["node"] == ""]


def test_a_claims_address_follows_it_from_node_to_node_and_is_freed_with_it(
    kubeconfig: Path, kube_http: KubeHttp, kube_namespace: str, no_blocks: None, tmp_path: Path
) -> None:
    pool = f"na-{secrets.token_hex(3)}"
    subnet = "10.206.0.0/24"
    make_claim(kube_http, kube_namespace, "vm-a", pool)
    pod = f"{kube_namespace}/vm-a-launcher"

    def plan(claim: str) -> list[Planned]:
        return [Planned(network(pool, subnet), claim)]

    async def body() -> None:
        async with (
            Node(kubeconfig, tmp_path / "a", "na-claim-a") as a,
            Node(kubeconfig, tmp_path / "b", "na-claim-b") as b,
        ):
            first = given(
                await a.pools.assign(
                    [Planned(network(pool, subnet), "vm-a")], container_id="c-a", pod=pod
                )
            )
            assert claim_object(kube_http, kube_namespace, "vm-a")["status"]["ips"] == [first]
            a.pools.release("c-a")  # the pod's DEL: the address stays the claim's
            # the pod made again on another node: the same address
            again = given(
                await b.pools.assign(
                    [Planned(network(pool, subnet), "vm-a")], container_id="c-b", pod=pod
                )
            )
            assert again == first
            # the nodes' own pods never get it
            plain = [
                given(
                    await node.pools.assign([Planned(network(pool, subnet))], container_id=f"p{i}")
                )
                for i, node in enumerate([a, b] * 12)
            ]
            assert first not in plain
            assert len(set(plain)) == len(plain)
            (block,) = claims_blocks(kube_http, pool)
            (holder,) = block["status"]["allocations"].values()
            assert holder["claim"].startswith(f"{kube_namespace}/vm-a/")

            # the claim deleted: its address back in the pool at the next sweep
            response = kube_http.delete(kube_claims._path(kube_namespace, "vm-a"))
            assert response.status == 200, response.body
            await a.source.claims.sweep(await a.source.objects.list())  # type: ignore[union-attr]
            assert claims_blocks(kube_http, pool) == []

    asyncio.run(body())


def test_claims_taken_at_once_from_three_nodes_get_distinct_addresses(
    kubeconfig: Path, kube_http: KubeHttp, kube_namespace: str, no_blocks: None, tmp_path: Path
) -> None:
    pool = f"na-{secrets.token_hex(3)}"
    subnet = "10.207.0.0/24"
    names = [f"vm-{i}" for i in range(24)]  # more than one block of 16
    for name in names:
        make_claim(kube_http, kube_namespace, name, pool)

    async def body() -> dict[str, str]:
        nodes = [Node(kubeconfig, tmp_path / f"n{i}", f"na-claims-{i}") for i in range(3)]
        for node in nodes:
            await node.pools.start()
        try:

            async def one(index: int, name: str) -> tuple[str, str]:
                plan = [Planned(network(pool, subnet), name)]
                got = await nodes[index % 3].pools.assign(
                    plan, container_id=f"c-{name}", pod=f"{kube_namespace}/{name}"
                )
                return name, given(got)

            return dict(await asyncio.gather(*(one(i, n) for i, n in enumerate(names))))
        finally:
            for node in nodes:
                await node.pools.close()
                await node.api.aclose()

    addresses = asyncio.run(body())
    assert len(set(addresses.values())) == len(names)
    held = {
        address: holder["claim"].split("/")[1]
        for block in claims_blocks(kube_http, pool)
        for address, holder in block["status"]["allocations"].items()
    }
    assert {str(ipaddress.ip_interface(a).ip): n for n, a in addresses.items()} == held
    for name, address in addresses.items():
        assert claim_object(kube_http, kube_namespace, name)["status"]["ips"] == [address]


@pytest.mark.req("IPAM-BAD")
def test_a_missing_claim_or_one_of_another_network_is_refused_holding_nothing(
    kubeconfig: Path, kube_http: KubeHttp, kube_namespace: str, no_blocks: None, tmp_path: Path
) -> None:
    pool = f"na-{secrets.token_hex(3)}"
    make_claim(kube_http, kube_namespace, "other-net", "some-other-network")

    async def body() -> None:
        async with Node(kubeconfig, tmp_path / "n", "na-claim-bad") as node:
            plan = [Planned(network(pool, "10.208.0.0/24"), "nowhere")]
            with pytest.raises(errors.InvalidSelectionError) as missing:
                await node.pools.assign(plan, container_id="c1", pod=f"{kube_namespace}/p")
            assert f"there is no IPAMClaim {kube_namespace}/nowhere" in missing.value.msg
            plan = [Planned(network(pool, "10.208.0.0/24"), "other-net")]
            with pytest.raises(errors.InvalidSelectionError) as other:
                await node.pools.assign(plan, container_id="c2", pod=f"{kube_namespace}/p")
            assert "is for network 'some-other-network'" in other.value.msg
            assert node.pools.containers() == set()

    asyncio.run(body())
    assert claims_blocks(kube_http, pool) == []
