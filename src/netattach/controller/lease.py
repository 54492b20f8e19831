"""Leader election through a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does
it (POL-CTRL): one replica of the policy controller writes, the others wait to take over.

    acquire   the Lease made, or taken when its holder let it lapse (`renewTime` older than
              `leaseDurationSeconds`), or already ours; every write carries the resourceVersion
              read, so of two replicas racing only one wins (409 to the other)
    hold      renewed every `renew_every` seconds; when no renewal succeeded for `duration`,
              another replica may hold it now: `LostLeaseError` (the process ends and starts
              again as a follower, as client-go's controllers do)
    release   on a clean stop, the Lease given up at once (holder cleared), so a follower takes
              over without waiting for it to lapse

Errors raised: LostLeaseError (hold).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from typing import Any, Final

import httpx2

from netattach.cluster import kube_blocks
from netattach.cni import errors

log = logging.getLogger("netattach.controller")

PATH: Final = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


class LostLeaseError(Exception):
    """The Lease was not renewed within its duration: another replica may lead now."""


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _age(stamp: str | None) -> float:
    """Seconds since a MicroTime (infinite for none, or one unreadable)."""
    if not stamp:
        return float("inf")
    try:
        then = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    return (datetime.datetime.now(datetime.UTC) - then).total_seconds()


class Lease:
    """The Lease `namespace`/`name`, held by `identity` once `acquire` returns."""

    def __init__(
        self,
        http: httpx2.AsyncClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        duration: float = 15.0,
        renew_every: float = 5.0,
        retry_every: float = 2.0,
    ) -> None:
        self._http = http
        self._collection = PATH.format(namespace=namespace)
        self._path = f"{self._collection}/{name}"
        self.name = name
        self.identity = identity
        self.duration = duration
        self.renew_every = renew_every
        self.retry_every = retry_every
        self._held: dict[str, Any] | None = None  # the Lease as last written by us
        self._seen: dict[str, Any] | None = None  # the Lease as last read

    async def acquire(self) -> None:
        """Return once this replica holds the Lease."""
        waiting_on = None
        while True:
            try:
                if await self._try_acquire():
                    log.info("leading as %s (lease %s)", self.identity, self.name)
                    return
            except errors.CNIError as exc:
                log.warning("lease %s: %s; trying again", self.name, exc)
            holder = ((self._seen or {}).get("spec") or {}).get("holderIdentity")
            if holder != waiting_on:
                waiting_on = holder
                log.info("lease %s held by %s; waiting to lead", self.name, holder)
            await asyncio.sleep(self.retry_every)

    async def _try_acquire(self) -> bool:
        found = await kube_blocks.send_json(self._http, "GET", self._path, missing_ok=True)
        self._seen = found
        spec = self._spec(found)
        if found is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name},
                "spec": spec,
            }
            made = await kube_blocks.send_json(
                self._http, "POST", self._collection, body, conflict_ok=True
            )
            self._held = made
            return made is not None
        current = found.get("spec") or {}
        holder = current.get("holderIdentity")
        lapsed = _age(current.get("renewTime")) > float(
            current.get("leaseDurationSeconds") or self.duration
        )
        if holder and holder != self.identity and not lapsed:
            return False
        transitions = int(current.get("leaseTransitions") or 0)
        if holder != self.identity:
            transitions += 1
        else:
            spec["acquireTime"] = current.get("acquireTime") or spec["acquireTime"]
        spec["leaseTransitions"] = transitions
        body = {**found, "spec": spec}
        taken = await kube_blocks.send_json(self._http, "PUT", self._path, body, conflict_ok=True)
        self._held = taken
        return taken is not None

    def _spec(self, found: dict[str, Any] | None) -> dict[str, Any]:
        now = _now()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.duration),
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": int(((found or {}).get("spec") or {}).get("leaseTransitions") or 0),
        }

    async def hold(self) -> None:
        """Renew the Lease until cancelled; LostLeaseError when it could not be for `duration`."""
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.renew_every)
            try:
                if await self._renew():
                    renewed = time.monotonic()
                    continue
                raise LostLeaseError(f"lease {self.name}: another replica took it")
            except errors.CNIError as exc:
                log.warning("lease %s: renewal failed: %s", self.name, exc)
            if time.monotonic() - renewed > self.duration:
                raise LostLeaseError(f"lease {self.name}: not renewed for {self.duration:g}s")

    async def _renew(self) -> bool:
        held = self._held
        if held is None:
            return False
        body = {**held, "spec": {**(held.get("spec") or {}), "renewTime": _now()}}
        renewed = await kube_blocks.send_json(self._http, "PUT", self._path, body, conflict_ok=True)
        if renewed is None:
            return False
        self._held = renewed
        return True

    async def release(self) -> None:
        """Give the Lease up (a clean stop): a follower takes over at once."""
        held = self._held
        if held is None:
            return
        spec = {**(held.get("spec") or {}), "holderIdentity": "", "renewTime": None}
        try:
            await kube_blocks.send_json(
                self._http, "PUT", self._path, {**held, "spec": spec}, conflict_ok=True
            )
        except errors.CNIError as exc:
            log.info("lease %s: not released (%s); it lapses", self.name, exc)
        self._held = None
