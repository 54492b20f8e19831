"""An indexed in-memory store of the objects a feed delivers, by kind and (namespace, name),
and the one port through which it reads what its feed has not delivered yet."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from netattach.cluster import model

TYPE_CHECKING = False

if TYPE_CHECKING:
    import asyncio
    from typing import Protocol

    # The port, as the type checker sees it: `typing` stays off the thin plugin's path
    # (netattach.values says why), so it is no class at run time.
    class ReadThrough(Protocol):
        """A pod or NAD the cache has not seen yet, as the feed has it now (KUBE-CACHE,
        KUBE-NADREAD): read from the API, or from the manifests read again; None when the
        source has none either. Each feed is the port of the store it fills by itself."""

        async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None: ...
        async def fetch_nad(self, namespace: str, name: str) -> model.KubeObject | None: ...


_Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds


class ClusterStore:
    """What a feed knows, looked up without I/O. Feeds call `replace_all`/`upsert`/`remove`.

    `listeners` are called with the kind after each change (`replace_all`: with ""); they must
    be quick and must not raise (the policy sync only marks itself dirty). `observers` are
    called with (kind, namespace, name) of each object added, changed or removed (`replace_all`:
    ("", "", "")), for consumers that follow changes one object at a time.

    `read_through`: where `fetch_pod` and `fetch_nad` read what the cache has not seen (the
    API feed reads it directly, the directory feed re-reads its manifests); None: they answer
    from the cache alone.
    """

    def __init__(self, read_through: ReadThrough | None = None) -> None:
        self._read_through = read_through
        self._objects: dict[str, dict[_Key, model.KubeObject]] = {
            kind: {} for kind in model.STORED_KINDS
        }
        self._synced = False
        # Made for the first call that must wait: the thin plugin's view is synced before it is
        # read, and its process runs without asyncio (netattach.offload).
        self._synced_event: asyncio.Event | None = None
        self.listeners: list[Callable[[str], None]] = []
        self.observers: list[Callable[[str, str, str], None]] = []

    def _changed(self, kind: str, namespace: str = "", name: str = "") -> None:
        for observer in self.observers:
            observer(kind, namespace, name)
        for listener in self.listeners:
            listener(kind)

    # -- writes (feeds) -------------------------------------------------------------------------

    def upsert(self, obj: model.KubeObject) -> None:
        kind = obj.get("kind", "")
        if kind in self._objects:
            key = (model.namespace_of(obj), model.name_of(obj))
            self._objects[kind][key] = obj
            self._changed(kind, *key)

    def remove(self, kind: str, namespace: str, name: str) -> None:
        if self._objects.get(kind, {}).pop((namespace, name), None) is not None:
            self._changed(kind, namespace, name)

    def replace_all(self, objects: Iterable[model.KubeObject]) -> None:
        """A full resync: afterwards the store holds exactly `objects`."""
        fresh: dict[str, dict[_Key, model.KubeObject]] = {kind: {} for kind in self._objects}
        for obj in objects:
            kind = obj.get("kind", "")
            if kind in fresh:
                fresh[kind][(model.namespace_of(obj), model.name_of(obj))] = obj
        self._objects = fresh
        self._changed("")

    def mark_synced(self) -> None:
        self._synced = True
        if self._synced_event is not None:
            self._synced_event.set()

    # -- reads ----------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced

    async def wait_synced(self, timeout: float) -> bool:
        if self._synced:
            return True
        import asyncio

        if self._synced_event is None:
            self._synced_event = asyncio.Event()
        try:
            await asyncio.wait_for(self._synced_event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def lookup(self, kind: str, namespace: str, name: str) -> model.KubeObject | None:
        return self._objects.get(kind, {}).get((namespace, name))

    def lookup_pod(self, namespace: str, name: str) -> model.KubeObject | None:
        return self.lookup(model.POD, namespace, name)

    def lookup_nad(self, namespace: str, name: str) -> model.KubeObject | None:
        return self.lookup(model.NAD, namespace, name)

    def lookup_namespace(self, name: str) -> model.KubeObject | None:
        return self.lookup(model.NAMESPACE, "", name)

    def objects(self, kind: str) -> list[model.KubeObject]:
        return list(self._objects.get(kind, {}).values())

    # -- reads through the feed (KUBE-CACHE, KUBE-NADREAD) ---------------------------------------

    async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None:
        """The pod as the feed has it now, for a pod the cache lacks or has stale (an ADD right
        after the pod's creation, or an API restart)."""
        if self._read_through is None:
            return self.lookup_pod(namespace, name)
        return await self._read_through.fetch_pod(namespace, name)

    async def fetch_nad(self, namespace: str, name: str) -> model.KubeObject | None:
        """The NAD as the feed has it now, for a NAD the cache lacks."""
        if self._read_through is None:
            return self.lookup_nad(namespace, name)
        return await self._read_through.fetch_nad(namespace, name)
