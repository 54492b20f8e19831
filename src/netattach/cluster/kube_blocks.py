"""The IPBlock objects of netattach's IPAM in the API (`deploy/crds/ipblocks.yaml`): the verbs
`ipam/kube_source.py` needs, as plain JSON (IPAM-UNIQUE).

An IPBlock is cluster-scoped and named after its CIDR (`ipam/blocks.py`), so two nodes, or two
pools, that want one block meet on one name: the API's create is the only arbiter (409 to the
second), never a lock. Its holder writes `status` (the lease's renewal, who holds each address);
another node deletes it only with the resourceVersion it saw unchanged for a whole lease.

Errors raised: errors.TryAgainLaterError (no answer, 429, 5xx), errors.IOFailureError (a refusal
for good: 403, 422, ...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import httpx2

from netattach.cluster import kube_client
from netattach.cni import errors

GROUP: Final = "ipam.netattach.io"
VERSION: Final = "v1alpha1"
KIND: Final = "IPBlock"
PATH: Final = f"/apis/{GROUP}/{VERSION}/ipblocks"
_TRANSIENT: Final = frozenset({429, 500, 502, 503, 504})
JSON_PATCH: Final = "application/json-patch+json"
MERGE_PATCH: Final = "application/merge-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"  # JSON is YAML


class BlockObjects:
    """The IPBlocks of the cluster, through `http` (the feed's writes client)."""

    def __init__(self, http: httpx2.AsyncClient) -> None:
        self._http = http

    async def list(self) -> list[dict[str, Any]]:
        reply = await self._send("GET", PATH)
        items = reply.get("items") if reply else None
        return [item for item in items or [] if isinstance(item, dict)]

    async def get(self, name: str) -> dict[str, Any] | None:
        return await self._send("GET", f"{PATH}/{name}", missing_ok=True)

    async def create(self, name: str, spec: Mapping[str, Any]) -> dict[str, Any] | None:
        """The block made; None when it exists already (another node, or pool, was first)."""
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": name},
            "spec": dict(spec),
        }
        return await self._send("POST", PATH, body, conflict_ok=True)

    async def patch_status(
        self, name: str, status: Mapping[str, Any], *, node: str
    ) -> dict[str, Any] | None:
        """The block's whole `status` replaced by `status` (a JSON patch: a merge patch cannot
        drop an address no longer held), only while `node` holds it (the patch's `test` op:
        else IOFailureError); None when the block is gone."""
        body = [
            {"op": "test", "path": "/spec/node", "value": node},
            {"op": "add", "path": "/status", "value": dict(status)},
        ]
        return await self._send(
            "PATCH", f"{PATH}/{name}", body, missing_ok=True, content_type=JSON_PATCH
        )

    async def delete(self, name: str, resource_version: str) -> bool:
        """The block deleted if it is still at `resource_version`; False when it changed or is
        gone."""
        body = {"preconditions": {"resourceVersion": resource_version}}
        reply = await self._send(
            "DELETE", f"{PATH}/{name}", body, missing_ok=True, conflict_ok=True
        )
        return reply is not None

    async def patch_allocations(
        self, name: str, resource_version: str, changes: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """`changes` (address -> holder, or None to drop it) merged into the block's
        allocations, only if the block is still at `resource_version`: None when it changed or
        is gone (read it again)."""
        body = {
            "metadata": {"resourceVersion": resource_version},
            "status": {"allocations": dict(changes)},
        }
        return await self._send(
            "PATCH", f"{PATH}/{name}", body, missing_ok=True, conflict_ok=True,
            content_type=MERGE_PATCH,
        )  # fmt: skip

    async def node_exists(self, node: str) -> bool:
        return await self._send("GET", f"/api/v1/nodes/{node}", missing_ok=True) is not None

    async def _send(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | Sequence[Any] | None = None,
        **options: Any,
    ) -> dict[str, Any] | None:
        return await send_json(self._http, method, path, body, **options)


async def send_json(
    http: httpx2.AsyncClient,
    method: str,
    path: str,
    body: Mapping[str, Any] | Sequence[Any] | None = None,
    *,
    missing_ok: bool = False,
    conflict_ok: bool = False,
    content_type: str = "application/json",
    force: bool = False,
) -> dict[str, Any] | None:
    """One request of a JSON body; its JSON reply, or None for a 404 (`missing_ok`) or a 409
    (`conflict_ok`). `force`: a server-side apply taking the fields of other managers."""
    what = f"{method} {path}"
    try:
        response = await http.request(
            method,
            path,
            content=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": content_type} if body is not None else None,
            params=(
                None
                if method == "GET"
                else {"fieldManager": kube_client.COMPONENT, **({"force": "true"} if force else {})}
            ),
        )
    except httpx2.HTTPError as exc:
        raise errors.TryAgainLaterError(f"{what}: the API did not answer", str(exc)) from exc
    code = response.status_code
    if code == kube_client.NOT_FOUND and missing_ok:
        return None
    if code == kube_client.CONFLICT and conflict_ok:
        return None
    if code >= 300:
        text = response.text[:300]
        if code in _TRANSIENT:
            raise errors.TryAgainLaterError(f"{what}: HTTP {code}", text)
        raise errors.IOFailureError(f"{what}: HTTP {code}", text)
    reply = response.json() if response.content else {}
    return reply if isinstance(reply, dict) else {}
