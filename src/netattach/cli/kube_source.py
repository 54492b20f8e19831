"""The cluster source of `netattach status|graph` (`--kubeconfig`, and `kubectl netattach`):
pods, NetworkAttachmentDefinitions and MultiNetworkPolicies listed from the API with the user's
credentials, through the feed's own client set-up (`kube_client.build_client`) and trimming
(`kube_objects`); the network-status is each pod's annotation.
"""

import asyncio
from pathlib import Path
from typing import Any

import lightkube
from lightkube.resources import core_v1

from netattach.cli import cluster_pods
from netattach.cluster import kube_client, kube_objects, store
from netattach.cni import errors

KUBE_TIMEOUT = 15.0
LIST_CHUNK = 500  # objects per page of a list, as the daemon's feed reads them


class UnreadableClusterError(Exception):
    """The API could not be read; the message says which and why."""


async def read_cluster(kubeconfig: Path | None, namespace: str, name: str) -> cluster_pods.Listing:
    timing = kube_client.KubeTiming(request_timeout=KUBE_TIMEOUT)
    try:
        client = kube_client.build_client(kubeconfig, timing)
    except errors.CNIError as exc:
        raise UnreadableClusterError(f"{exc}") from exc
    view = store.ClusterStore()
    where = str(kubeconfig) if kubeconfig is not None else "the in-cluster service account"
    try:
        async with asyncio.timeout(KUBE_TIMEOUT * 4):
            await _list_into(view, client, namespace, name)
    except lightkube.ApiError as exc:
        raise UnreadableClusterError(
            f"the API server of {where} refused: {exc.status.code} {exc.status.message}"
        ) from exc
    except TimeoutError as exc:
        raise UnreadableClusterError(f"the API server of {where} did not answer in time") from exc
    except Exception as exc:  # httpx transport errors: no route, refused, TLS
        raise UnreadableClusterError(f"cannot reach the API server of {where}: {exc}") from exc
    finally:
        await client.close()
    return cluster_pods.build_listing(
        view,
        cluster_pods.status_from_annotation,
        cluster_pods.Networks(),
        namespace=namespace,
        name=name,
    )


async def _list_into(
    view: store.ClusterStore, client: lightkube.AsyncClient, namespace: str, name: str
) -> None:
    scope = namespace or lightkube.ALL_NS
    if name:
        try:
            pod = await client.get(core_v1.Pod, name, namespace=namespace)
        except lightkube.ApiError as exc:
            if exc.status.code != 404:
                raise  # a 404 leaves the view without it: the command says it is not there
        else:
            view.upsert(kube_objects.trim_pod(pod))
    else:
        async for found in client.list(core_v1.Pod, namespace=scope, chunk_size=LIST_CHUNK):
            view.upsert(kube_objects.trim_pod(found))
    # A NAD may be in another namespace than its pods (a global namespace): all of them.
    await _list_custom(
        view,
        client,
        kube_client.NetworkAttachmentDefinition,
        lightkube.ALL_NS,
        kube_objects.trim_nad,
    )
    await _list_custom(
        view, client, kube_client.MultiNetworkPolicy, scope, kube_objects.trim_policy
    )


async def _list_custom(
    view: store.ClusterStore,
    client: lightkube.AsyncClient,
    resource: Any,
    scope: str,
    trim: Any,
) -> None:
    try:
        async for found in client.list(resource, namespace=scope, chunk_size=LIST_CHUNK):
            view.upsert(trim(found))
    except lightkube.ApiError as exc:
        if exc.status.code != 404:  # 404: the CRD is not installed, so there are none
            raise
