"""Direct reads for the Kubernetes feed: one bounded GET of a pod or NAD the watch has not
delivered yet (KUBE-CACHE, KUBE-NADREAD), kept in the store on the watch's terms.

Errors raised:
    errors.TryAgainLaterError     the API did not answer within `KubeTiming.fetch_timeout`, or
                                  answered with a transient failure
"""

import asyncio
from collections.abc import Callable
from typing import Any

import httpx2
import lightkube
from lightkube.resources import core_v1

from netattach.cluster import kube_client, kube_objects, model, store
from netattach.cni import errors


class DirectReads:
    """Reads a pod or NAD from the API; `keep(kind, trimmed)` stores what was read when the
    watch has seen nothing newer (`kube_watch.Reflectors.keep_if_newer`)."""

    def __init__(
        self,
        client: lightkube.AsyncClient,
        store: store.ClusterStore,
        *,
        node_name: str,
        shared: kube_objects.Shared,
        timing: kube_client.KubeTiming,
        keep: Callable[[str, model.KubeObject], None],
    ) -> None:
        self._client = client
        self._store = store
        self.node_name = node_name
        self._shared = shared
        self.timing = timing
        self._keep = keep

    async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None:
        """Read the pod from the API (one request, `fetch_timeout`); None when there is none.

        Kept in the store when it is of this node and newer than what the watch has seen, so a
        later lookup finds it; an older one could be a pod whose deletion the watch delivered
        while this read was on its way.
        """
        pod = await self._fetch(core_v1.Pod, "pod", namespace, name)
        if pod is None:
            return None
        trimmed = kube_objects.trim_pod(pod, shared=self._shared)
        on_node = (trimmed.get("spec") or {}).get("nodeName") == self.node_name
        if on_node and self._store.lookup_pod(namespace, name) is None:
            self._keep(model.POD, trimmed)
        return trimmed

    async def fetch_nad(self, namespace: str, name: str) -> model.KubeObject | None:
        """Read the NAD from the API (one request, `fetch_timeout`); None when there is none,
        or when its CRD is not installed (a 404 too).

        KUBE-NADREAD: the watch may not have delivered a NAD created a moment ago, nor any
        while it reconnects after an API restart; Multus reads NADs live. Kept in the store on
        the terms of `fetch_pod`.
        """
        nad = await self._fetch(kube_client.NetworkAttachmentDefinition, "NAD", namespace, name)
        if nad is None:
            return None
        trimmed = kube_objects.trim_nad(nad, shared=self._shared)
        if self._store.lookup_nad(namespace, name) is None:
            self._keep(model.NAD, trimmed)
        return trimmed

    async def _fetch(self, resource: type[Any], what: str, namespace: str, name: str) -> Any:
        """One GET of `resource` named `namespace/name`, within `fetch_timeout`; None on 404."""
        try:
            async with asyncio.timeout(self.timing.fetch_timeout):
                return await self._client.get(resource, name, namespace=namespace)
        except Exception as exc:
            if kube_client.status_code(exc) == kube_client.NOT_FOUND:
                return None
            if not (kube_client.is_transient(exc) or isinstance(exc, httpx2.HTTPError)):
                raise
            raise errors.TryAgainLaterError(
                f"cannot read {what} {namespace}/{name} from the API", kube_client.describe(exc)
            ) from exc
