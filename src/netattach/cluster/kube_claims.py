"""The IPAMClaims pods name (`ipam-claim-reference`; the Network Plumbing WG's `ipamclaims` CRD,
k8s.cni.cncf.io/v1alpha1, deploy/crds/ipamclaims.yaml): the verbs `ipam/claims.py` needs, as
plain JSON (IPAM-CLAIM).

Errors raised: errors.TryAgainLaterError (no answer, 429, 5xx), errors.IOFailureError (a refusal
for good: 403, 422, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import httpx2

from netattach.cluster.kube_blocks import MERGE_PATCH, send_json

GROUP: Final = "k8s.cni.cncf.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "ipamclaims"


def _path(namespace: str, name: str = "") -> str:
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    return f"{base}/{name}" if name else base


class ClaimObjects:
    """The IPAMClaims of the cluster, through `http` (the feed's writes client)."""

    def __init__(self, http: httpx2.AsyncClient) -> None:
        self._http = http

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim; None when there is none (or the CRD is not installed: the same to a pod
        that names one)."""
        return await send_json(self._http, "GET", _path(namespace, name), missing_ok=True)

    async def keys(self) -> set[str]:
        """`namespace/name/uid` of every claim of the cluster."""
        reply = await send_json(self._http, "GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}")
        found = set()
        for item in (reply or {}).get("items") or []:
            meta = item.get("metadata") or {} if isinstance(item, dict) else {}
            found.add(f"{meta.get('namespace')}/{meta.get('name')}/{meta.get('uid')}")
        return found

    async def set_ips(self, namespace: str, name: str, ips: Sequence[str]) -> None:
        """The claim's `status.ips` (its status subresource)."""
        await send_json(
            self._http,
            "PATCH",
            _path(namespace, name) + "/status",
            {"status": {"ips": list(ips)}},
            missing_ok=True,
            content_type=MERGE_PATCH,
        )
