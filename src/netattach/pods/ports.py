"""The seams the pod operations are given at construction, as the type checker sees them.

    ClusterView      the cluster as the cache holds it: pods, NADs, whether it has synced
    PodFetcher       a view that can also read a pod the cache has not seen yet (KUBE-CACHE)
    NADFetcher       a view that can also read a NAD the cache has not seen yet (KUBE-NADREAD)
    StatusSink       where a pod's network-status goes (an API patch, a status file)
    EventRecorder    a sink that can also record Kubernetes Events (KUBE-EVENTS)
    PolicyEnforcer   MultiNetworkPolicy on the pods of this node (daemon/policy_sync.py)
    AddressPools     netattach's IPAM: a plan's addresses taken, a container's freed
                     (ipam/service.py)

The daemon gives its feed's store and the feed (cluster/feeds.py), the thin plugin the
directory feed's; tests give fakes. `typing` stays off the thin plugin's path (netattach.values
says why), so they are not classes at run time and this module is imported for the type checker
only: whoever needs an optional capability asks for it where it is used (`fetch_pod`,
`fetch_nad`, `record_event`).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol

    from netattach.cluster import model
    from netattach.pods import plan as plan_mod
    from netattach.pods import records as records_mod

    class ClusterView(Protocol):
        def lookup_pod(self, namespace: str, name: str) -> model.KubeObject | None: ...
        def lookup_nad(self, namespace: str, name: str) -> model.KubeObject | None: ...
        async def wait_synced(self, timeout: float) -> bool: ...

    class EventRecorder(Protocol):
        """A sink that can also record Kubernetes Events on the pod (KUBE-EVENTS), or on another
        object of the namespace (`kind`: a MultiNetworkPolicy, say) named `pod`."""

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
        ) -> None: ...

    class PodFetcher(Protocol):
        """A view that can read a pod the cache has not seen yet (KUBE-CACHE)."""

        async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None: ...

    class NADFetcher(Protocol):
        """A view that can read a NAD the cache has not seen yet (KUBE-NADREAD)."""

        async def fetch_nad(self, namespace: str, name: str) -> model.KubeObject | None: ...

    class PolicyEnforcer(Protocol):
        """MultiNetworkPolicy on the pods of this node (daemon/policy_sync.py)."""

        async def enforce(
            self, record: records_mod.PodRecord, pod: model.KubeObject | None = None
        ) -> None: ...
        async def discard(self, record: records_mod.PodRecord) -> None: ...

    class PeerGroupSource(Protocol):
        """The policy controller's peer groups, as a node reads those it needs (POL-SPAN,
        cluster/kube.py)."""

        def select_groups(self, ids: set[str]) -> None: ...
        def published_groups(self) -> set[str]: ...
        async def wait_groups(self, ids: set[str], timeout: float) -> bool: ...

    class AddressPools(Protocol):
        """netattach's IPAM (ipam/service.py): a plan's `"type": "netattach"` IPAM turned into
        the addresses taken for it, all or none; a container's addresses freed."""

        async def assign(
            self,
            plan: Sequence[plan_mod.PlannedAttachment],
            *,
            container_id: str,
            pod: str = "",
            uid: str = "",
        ) -> list[plan_mod.PlannedAttachment]: ...
        def release(self, container_id: str) -> None: ...
        def containers(self) -> set[str]: ...

    class StatusSink(Protocol):
        # `uid`: the pod's, when known, so a status is never written on a recreated namesake.
        async def publish_status(
            self, namespace: str, pod: str, entries: list[dict[str, object]], *, uid: str = ""
        ) -> None: ...
        async def remove_status(self, namespace: str, pod: str, *, uid: str = "") -> None: ...
