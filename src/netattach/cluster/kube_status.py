"""Status writes for the Kubernetes feed: the pod's network-status annotation (KUBE-STATUS).

A JSON merge patch of metadata.annotations[network-status] and nothing else, retried on
conflicts, 429, 5xx and transport errors within a budget; with the pod's UID as a precondition,
so a status is never written on a recreated namesake. The status read back is the annotation as
the cache holds it.

Errors raised:
    errors.TryAgainLaterError     the API did not answer well within the budget (transient)
    errors.IOFailureError         the API refused the request for good (403, 422, ...)
    errors.InternalError          status entries that are not JSON
    errors.DecodingFailureError   (read_status) an annotation that is not a JSON list of objects
"""

import asyncio
import json
import logging
from typing import Final, Literal

import httpx2
from lightkube.resources import core_v1

from netattach.cluster import kube_client, model, store
from netattach.cni import errors

log = logging.getLogger(kube_client.LOGGER)

# What a write with a UID precondition gets when the name is another pod's now: 409 from a
# precondition, 422 ("metadata.uid: field is immutable") from a real server's PATCH.
_UID_REFUSALS: Final = frozenset({kube_client.CONFLICT, kube_client.INVALID})


class StatusWriter:
    """Publishes and removes pods' network-status through `api`; `store` tells it which pods
    the cache knows gone."""

    def __init__(
        self, api: kube_client.ApiClients, store: store.ClusterStore, timing: kube_client.KubeTiming
    ) -> None:
        self._api = api
        self._store = store
        self.timing = timing

    async def publish_status(
        self, namespace: str, pod: str, entries: list[dict[str, object]], *, uid: str = ""
    ) -> None:
        """Set the pod's network-status annotation to `entries` (a JSON list), nothing else.

        A pod that is gone (404, or another pod of that name when `uid` is given) is logged and
        tolerated, as Multus does: the ADD of a deleted pod has no one to tell.
        """
        try:
            # Indented as Multus writes it (json.MarshalIndent, four spaces): kubectl shows it.
            text = json.dumps(entries, indent=4, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise errors.InternalError(
                f"network-status of {namespace}/{pod} is not JSON", str(exc)
            ) from exc
        outcome = await self._patch_status(
            namespace, pod, text, uid=uid, budget=self.timing.status_budget, verb="publish"
        )
        if outcome == "gone":
            log.warning("pod %s/%s is gone; its network-status was not published", namespace, pod)

    async def remove_status(self, namespace: str, pod: str, *, uid: str = "") -> None:
        """Remove the pod's network-status annotation (a merge patch setting it to null).

        No request when the synced cache knows the pod is gone (a DEL after the pod's deletion,
        the usual case, needs no API: RT-NOAPI), or that the name is another pod's now.
        """
        if self._store.synced:
            cached = self._store.lookup_pod(namespace, pod)
            if cached is None or (uid and model.uid_of(cached) not in ("", uid)):
                return
        await self._patch_status(
            namespace, pod, None, uid=uid, budget=self.timing.remove_budget, verb="remove"
        )

    def read_status(self, namespace: str, pod: str) -> list[dict[str, object]] | None:
        """The pod's network-status as the cache holds it (its annotation); None when the cache
        has no such pod, or the pod no annotation."""
        cached = self._store.lookup_pod(namespace, pod)
        text = None if cached is None else model.annotation(cached, model.STATUS_ANNOTATION)
        if text is None:
            return None
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise errors.DecodingFailureError(
                f"annotation {model.STATUS_ANNOTATION} of {namespace}/{pod} is not JSON",
                str(exc)[:80],
            ) from exc
        if not isinstance(raw, list) or not all(isinstance(entry, dict) for entry in raw):
            raise errors.DecodingFailureError(
                f"annotation {model.STATUS_ANNOTATION} of {namespace}/{pod} is not a JSON list "
                "of objects"
            )
        return raw

    async def _patch_status(
        self, namespace: str, pod: str, text: str | None, *, uid: str, budget: float, verb: str
    ) -> Literal["written", "gone", "another pod"]:
        """The merge patch, retried within `budget`: "written", "gone" (404), or "another pod"
        (the name is a recreated pod's now: nothing written, nothing to fail for)."""
        metadata: dict[str, object] = {"annotations": {model.STATUS_ANNOTATION: text}}
        if uid:
            # A precondition, not a change: a recreated pod of the same name refuses it (409,
            # or 422 from a real server's PATCH: metadata.uid is immutable).
            metadata["uid"] = uid
        patch = {"metadata": metadata}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        attempt = 0
        while True:
            attempt += 1
            try:
                async with asyncio.timeout(
                    max(0.0, min(self.timing.request_timeout, deadline - loop.time()))
                ):
                    # Raw JSON, the reply not decoded: lightkube's patch() would build a whole
                    # typed Pod from it, the largest share of the daemon's CPU per ADD here.
                    await self._api.send_json(
                        "PATCH",
                        f"/api/v1/namespaces/{namespace}/pods/{pod}",
                        patch,
                        kube_client.MERGE_PATCH,
                    )
                return "written"
            except Exception as exc:
                failure = exc
            code = kube_client.status_code(failure)
            if code == kube_client.NOT_FOUND:
                return "gone"
            if code in _UID_REFUSALS and uid and await self._is_other_pod(namespace, pod, uid):
                log.debug(
                    "%s network-status of %s/%s: the name is another pod's now (%s, not UID %s); "
                    "nothing written",
                    verb,
                    namespace,
                    pod,
                    code,
                    uid,
                )
                return "another pod"
            if not kube_client.is_transient(failure):
                if not isinstance(failure, httpx2.HTTPError):
                    log.error("%s network-status of %s/%s", verb, namespace, pod, exc_info=failure)
                # Only CNI errors leave: a DEL logs them and goes on (RT-NOAPI).
                raise errors.IOFailureError(
                    f"the API refused to {verb} the network-status of {namespace}/{pod}",
                    kube_client.describe(failure),
                ) from failure
            delay = max(self.timing.retry.delay(attempt), kube_client.retry_after(failure) or 0.0)
            if loop.time() + delay >= deadline:
                last = kube_client.describe(failure)
                raise errors.TryAgainLaterError(
                    f"cannot {verb} the network-status of {namespace}/{pod}",
                    f"{attempt} attempt(s) in {budget:g}s, the last: {last}",
                ) from failure
            log.info(
                "%s network-status of %s/%s: %s; again in %.2fs",
                verb,
                namespace,
                pod,
                kube_client.describe(failure),
                delay,
            )
            await asyncio.sleep(delay)

    async def _is_other_pod(self, namespace: str, pod: str, uid: str) -> bool:
        """After a 409/422 on a patch with a UID precondition: is the name another pod's now?"""
        try:
            async with asyncio.timeout(self.timing.request_timeout):
                current = await self._api.client.get(core_v1.Pod, pod, namespace=namespace)
        except Exception as exc:
            return kube_client.status_code(exc) == kube_client.NOT_FOUND
        return current.metadata is not None and current.metadata.uid not in (None, uid)
