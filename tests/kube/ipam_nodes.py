"""What the IPAM tests and benchmarks on a real API server share: a planned attachment as
`ipam.service.Addresses` reads it, a network of netattach's IPAM, and one node's allocator (its
own API connection, block source, IPAMClaims and state directory)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

from netattach.cluster import kube_claims, kube_client
from netattach.cluster.kube_blocks import BlockObjects
from netattach.cni import conf
from netattach.ipam import claims, kube_source, service


class Planned:
    """What `Addresses.assign` reads of a planned attachment (pods/plan.py's)."""

    def __init__(
        self, network: conf.NetworkConfigList, claim: str = "", ips: tuple[str, ...] = ()
    ) -> None:
        self.status_name = "blue/net-a"
        self.ifname = "net1"
        self.network = network
        self.ips = ips
        self.claim = claim

    def _replace(self, *, network: conf.NetworkConfigList) -> Planned:
        return Planned(network, self.claim, self.ips)


def network(pool: str, subnet: str, reuse_delay: float = 0) -> conf.NetworkConfigList:
    raw = {"cniVersion": "1.0.0", "name": pool, "type": "macvlan",
           "ipam": {"type": "netattach", "subnet": subnet, "reuseDelay": reuse_delay}}  # fmt: skip
    return conf.parse_any(raw, source="test")


def planned(pool: str, subnet: str, claim: str = "") -> Planned:
    return Planned(network(pool, subnet), claim)


def given(assigned: list[Planned]) -> str:
    """The address the one attachment was given (its `static` IPAM's)."""
    (one,) = assigned
    return str(one.network.plugins[0].raw["ipam"]["addresses"][0]["address"])


class RecordedObjects(BlockObjects):
    """The IPBlock verbs, each request noted as "METHOD path" (what an ADD asks of the API)."""

    def __init__(self, http: httpx2.AsyncClient) -> None:
        super().__init__(http)
        self.sent: list[str] = []

    async def _send(
        self, method: str, path: str, body: Any = None, **options: Any
    ) -> dict[str, Any] | None:
        self.sent.append(f"{method} {path}")
        return await super()._send(method, path, body, **options)


class Node:
    """One node's allocator, as the daemon on the Kubernetes feed builds it."""

    def __init__(
        self,
        kubeconfig: Path,
        state: Path,
        name: str,
        *,
        objects: Callable[[httpx2.AsyncClient], BlockObjects] = BlockObjects,
        request_timeout: float = 10.0,
        **timing: float,
    ) -> None:
        self.api = kube_client.ApiClients(
            kubeconfig, kube_client.KubeTiming(request_timeout=request_timeout)
        )
        self.objects = objects(self.api.writes)
        self.source = kube_source.KubeBlockSource(self.objects, node=name, **timing)
        self.claims = claims.ClaimAddresses(self.objects, kube_claims.ClaimObjects(self.api.writes))
        self.source.claims = self.claims
        self.pools = service.Addresses(state, self.source, claims=self.claims)

    async def __aenter__(self) -> Node:
        await self.pools.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.pools.close()
        await self.api.aclose()
