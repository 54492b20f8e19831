"""What a feed is to the daemon, whichever source it reads: the Kubernetes API (`kube.KubeFeed`)
or a directory of manifests (`files.DirectoryFeed`).

A feed fills its `store`, which reads through the feed what the cache has not seen yet
(`store.ReadThrough`); it runs, publishes and removes a pod's network-status, reads it back,
records Events and closes. A verb a feed has nothing to do for is a no-op (the directory feed
records no Events and holds no connections; the API feed has nothing to read before it runs).
The daemon is given a `Feed` and never asks which one it is.
"""

from __future__ import annotations

from typing import Protocol

from netattach.cluster import model, store


class Feed(Protocol):
    """A source of the cluster view, and the place a pod's network-status and Events go."""

    store: store.ClusterStore  # what the feed fills

    async def start(self) -> None:
        """What must be done before the daemon serves (the directory feed reads its manifests
        once, so the view is synced before the first call); `run` does the rest."""
        ...

    async def run(self) -> None:
        """Keep the store current until cancelled."""
        ...

    async def publish_status(
        self, namespace: str, pod: str, entries: list[dict[str, object]], *, uid: str = ""
    ) -> None:
        """Publish the pod's network-status (`uid`: the pod's, when known, so a status is never
        written on a recreated namesake)."""
        ...

    async def remove_status(self, namespace: str, pod: str, *, uid: str = "") -> None: ...

    def read_status(self, namespace: str, pod: str) -> list[dict[str, object]] | None:
        """The pod's published network-status; None when none is published."""
        ...

    async def record_event(
        self,
        namespace: str,
        pod: str,
        *,
        reason: str,
        message: str,
        type_: str = "Normal",
        uid: str = "",
        kind: str = model.POD,
    ) -> None:
        """Record a Kubernetes Event on the pod (or the `kind` object named `pod`); never
        raises."""
        ...

    async def aclose(self) -> None:
        """Release what the feed holds (queued Events go out first, within a bound)."""
        ...
