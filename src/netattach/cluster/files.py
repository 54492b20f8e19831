"""The embedded default feed: a directory of manifests stands in for the Kubernetes API.

This module owns two things:

    <directory>/*.yaml, *.yml, *.json      Namespaces, Pods, NADs, MultiNetworkPolicies, read
                                           into a `ClusterStore` (`DirectoryFeed.load`, `.run`)
    <directory>/status/<ns>/<pod>.json     each pod's network-status, the annotation's JSON list
                                           (`DirectoryFeed.publish_status`, `.remove_status`)

`DirectoryFeed` is a `feeds.Feed`: it records no Events and holds nothing to close (both
no-ops). The store it fills by itself (`DirectoryFeed.store`, the daemon's) reads through it: a
pod or NAD it has not seen makes it re-read the manifests once before the object counts as
missing (`fetch_pod`, `fetch_nad`).

The manifests are untrusted text. Each document is checked for what netattach reads and what
the API server would have refused (kind/apiVersion, DNS-1123 names, string labels, annotations
and NAD `spec.config`: `manifests`); a bad document is skipped and reported as a
`ManifestProblem`, never raised. A file that cannot be read whole (unreadable, larger than
`MAX_FILE_BYTES`, not YAML, nested deeper than `MAX_DEPTH`, or aliases expanding past
`MAX_VALUES_PER_FILE`) contributes nothing and is reported once.

A feed given a `parse_cache` file (the thin plugin, which reads the directory on every call)
keeps there what each file parsed to, keyed by the file's stamp (name, mtime, ctime, size,
inode): an unchanged file is not parsed again. The cache is an optimisation only: one that is
missing, unreadable or of another directory is rebuilt, and one that cannot be written is
skipped.

Errors raised (status files, and reads through the feed):
    errors.InvalidEnvironmentError   a namespace or pod name that is not a DNS-1123 label
    errors.IOFailureError            a status file could not be written or removed
    errors.DecodingFailureError      a status file that is not a JSON list of objects
    errors.InternalError             status entries that are not JSON
    errors.UnknownContainerError     (fetch_pod) a pod still missing while manifests were skipped
    errors.AttachmentNotFoundError   (fetch_nad) a NAD still missing while manifests were skipped
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from netattach import __version__, atomic, loggers, offload
from netattach.cluster import documents, manifests, model
from netattach.cluster import store as store_mod
from netattach.cni import errors
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

log = loggers.get(__name__)

MANIFEST_SUFFIXES: Final = frozenset({".yaml", ".yml", ".json"})
STATUS_DIRECTORY: Final = "status"
# Far beyond any real manifest file, and small enough that parsing one stays in seconds.
MAX_FILE_BYTES: Final = 4 * 1024 * 1024
STATUS_MODE: Final = 0o644


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class ManifestProblem(NamedTuple):
    """Why a document (or a whole file, `document` 0) was not loaded."""

    path: str
    document: int  # 1-based index of the YAML document in the file; 0 for the file as a whole
    message: str

    def __str__(self) -> str:
        if self.document:
            return f"{self.path} document {self.document}: {self.message}"
        return f"{self.path}: {self.message}"


_FileRefusedError = documents.DocumentsRefusedError
_PARSE_CACHE_KIND: Final = "netattachManifestCacheV1"
# A file's documents as parsed and checked: (1-based document index, object or problem message).
_Parsed = list[tuple[int, "model.KubeObject | str"]]


# (file name, mtime_ns, ctime_ns, size, inode) of every manifest; None when the directory cannot
# be listed. Inode and ctime catch a same-size rename over within one mtime tick.
_FileStamp = tuple[str, int, int, int, int]
_Fingerprint = frozenset[_FileStamp] | None


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class _Snapshot(NamedTuple):
    objects: list[model.KubeObject]
    problems: tuple[ManifestProblem, ...]
    fingerprint: _Fingerprint


class DirectoryFeed:
    """Feeds a store from the manifests in `directory`; keeps pod status files beside them."""

    def __init__(
        self,
        directory: Path,
        store: store_mod.ClusterStore | None = None,
        *,
        parse_cache: Path | None = None,
    ) -> None:
        """`store`: the store to fill (the thin plugin's and the CLI's, which load once); None:
        the feed's own, which reads through the feed (the daemon's)."""
        self.directory = directory
        self.store = store_mod.ClusterStore(read_through=self) if store is None else store
        self._parse_cache = parse_cache
        self._fingerprint: _Fingerprint = None
        self._loaded = False
        self._problems: tuple[ManifestProblem, ...] = ()
        self._objects: dict[tuple[str, str, str], model.KubeObject] = {}  # as last loaded
        # What each file parsed to, by stamp, when there is no parse cache file (the daemon).
        self._parsed: dict[str, tuple[_FileStamp, _Parsed]] = {}

    @property
    def problems(self) -> tuple[ManifestProblem, ...]:
        """What the last load reported."""
        return self._problems

    # -- manifests ------------------------------------------------------------------------------

    def load(self) -> tuple[ManifestProblem, ...]:
        """Read every manifest, replace the store's contents with them, and mark it synced."""
        snapshot = self._read()
        self._apply(snapshot)
        return snapshot.problems

    async def start(self) -> None:
        """Read every manifest once before the daemon serves (in a worker thread): the view is
        synced before the first call, and the daemon's readiness finds the default network."""
        for problem in await offload.to_thread(self.load):
            log.warning("%s", problem)

    async def run(
        self, *, interval: float = 1.0, on_change: Callable[[], None] | None = None
    ) -> None:
        """Reload whenever the manifest files change, until cancelled: woken by inotify where
        there is one (`dirwatch`), and polled every `interval` s in any case.

        Reading happens in a worker thread, and only files whose stamp changed are parsed again;
        the store is changed on the event loop's thread, object by object (what was added,
        changed or removed), so readers of the store never see half a reload. `on_change` runs
        after each reload.
        """
        # Imported here: the thin plugin loads the directory once and neither watches nor waits.
        import asyncio

        from netattach.cluster import dirwatch

        watch = dirwatch.DirectoryWatch(self.directory)
        watch.start()
        try:
            while True:
                fingerprint = await asyncio.to_thread(self._scan_fingerprint)
                if not self._loaded or fingerprint != self._fingerprint:
                    snapshot = await asyncio.to_thread(self._read)
                    self._apply(snapshot)
                    for problem in snapshot.problems:
                        log.warning("manifest skipped: %s", problem)
                    if on_change is not None:
                        try:
                            on_change()
                        except Exception:
                            # The feed outlives a faulty subscriber: the next change calls it
                            # again.
                            log.exception(
                                "on_change callback failed after reloading %s", self.directory
                            )
                if watch.active:
                    await watch.wait(interval)
                else:
                    await asyncio.sleep(interval)
        finally:
            watch.close()

    def _apply(self, snapshot: _Snapshot) -> None:
        if not self._loaded:
            self.store.replace_all(snapshot.objects)
        else:
            self._update(snapshot.objects)
        self._objects = {_object_key(obj): obj for obj in snapshot.objects}
        self.store.mark_synced()
        self._fingerprint = snapshot.fingerprint
        self._problems = snapshot.problems
        self._loaded = True

    def _update(self, objects: list[model.KubeObject]) -> None:
        """Tell the store what differs from the last load: each object added, changed (parsed
        again from a changed file, and not equal) or gone."""
        fresh = {_object_key(obj): obj for obj in objects}
        for key in self._objects.keys() - fresh.keys():
            self.store.remove(*key)
        for key, obj in fresh.items():
            before = self._objects.get(key)
            if before is not obj and before != obj:
                self.store.upsert(obj)

    def _manifest_entries(self) -> list[os.DirEntry[str]]:
        """Manifest files directly in the directory, in lexical order (OSError if unlistable)."""
        with os.scandir(self.directory) as entries:
            found = [
                entry
                for entry in entries
                # Dotfiles are editors' swap files and ConfigMap volumes' `..data` machinery.
                if not entry.name.startswith(".")
                and os.path.splitext(entry.name)[1] in MANIFEST_SUFFIXES
                and not entry.is_dir()
            ]
        return sorted(found, key=lambda entry: entry.name)

    def _scan_fingerprint(self) -> _Fingerprint:
        try:
            entries = self._manifest_entries()
        except OSError:
            return None
        return _fingerprint_of(entries)

    def _read(self) -> _Snapshot:
        try:
            entries = self._manifest_entries()
        except OSError as exc:
            problem = ManifestProblem(
                path=str(self.directory),
                document=0,
                message=f"cannot list the manifest directory ({exc.strerror or exc})",
            )
            return _Snapshot(objects=[], problems=(problem,), fingerprint=None)
        # Stamped before reading: a file changed while being read differs from its stamp, so the
        # next poll reads it again.
        fingerprint = _fingerprint_of(entries)
        stamps = {stamp[0]: stamp for stamp in fingerprint}
        cached = self._read_parse_cache()
        parsed: dict[str, tuple[_FileStamp, _Parsed]] = {}
        kept: dict[tuple[str, str, str], tuple[model.KubeObject, str]] = {}
        problems: list[ManifestProblem] = []
        for entry in entries:
            path = str(Path(self.directory, entry.name))
            stamp = stamps[entry.name]
            hit = cached.get(entry.name)
            contents = hit[1] if hit is not None and hit[0] == stamp else list(_load_file(path))
            if stamp[1] != -1:  # a file that could not be stat'ed is read again every time
                parsed[entry.name] = (stamp, contents)
            for document, found in contents:
                if isinstance(found, str):
                    problems.append(ManifestProblem(path=path, document=document, message=found))
                    continue
                key = (found["kind"], model.namespace_of(found), model.name_of(found))
                where = f"{path} document {document}"
                if key in kept:
                    problems.append(
                        ManifestProblem(
                            path=path,
                            document=document,
                            message=f"duplicate {manifests.describe(found)}"
                            f" (also in {kept[key][1]}); this one wins",
                        )
                    )
                    del kept[key]  # the winner takes the later position too
                kept[key] = (found, where)
        if self._parse_cache is None:
            self._parsed = parsed
        elif parsed != cached:
            self._write_parse_cache(parsed)
        return _Snapshot(
            objects=[obj for obj, _ in kept.values()],
            problems=tuple(problems),
            fingerprint=fingerprint,
        )

    def _read_parse_cache(self) -> dict[str, tuple[_FileStamp, _Parsed]]:
        if self._parse_cache is None:
            return self._parsed
        try:
            raw = json.loads(self._parse_cache.read_bytes())
            if any(raw.get(key) != value for key, value in self._parse_cache_header().items()):
                return {}  # another directory's, or another version's (its checks may differ)
            return {
                str(name): _cached_file(str(name), entry) for name, entry in raw["files"].items()
            }
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return {}  # missing or damaged: every file is parsed again, and the cache rewritten

    def _parse_cache_header(self) -> dict[str, str]:
        return {
            "kind": _PARSE_CACHE_KIND,
            "netattach": __version__,
            "directory": str(self.directory),
        }

    def _write_parse_cache(self, parsed: dict[str, tuple[_FileStamp, _Parsed]]) -> None:
        if self._parse_cache is None:
            return
        raw = {
            **self._parse_cache_header(),
            "files": {
                name: {"stamp": list(stamp[1:]), "found": [list(pair) for pair in contents]}
                for name, (stamp, contents) in parsed.items()
            },
        }
        try:
            atomic.write_atomic(
                self._parse_cache, json.dumps(raw, separators=(",", ":")).encode(), durable=False
            )
        except OSError as exc:
            log.debug("manifest parse cache %s not written: %s", self._parse_cache, exc)

    # -- reads through the feed (KUBE-CACHE, KUBE-NADREAD) -------------------------------------

    async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None:
        """The pod after a re-read of the manifests (the feed polls every second, and a pod
        written just before its ADD must not get "pod not found"); a pod still missing while
        manifests were skipped is an error that names them (the pod's own manifest may be one:
        too large, not YAML...)."""
        # On the loop thread, on purpose: the reload swaps the store's contents and must not
        # race the loop's readers. It runs only on a miss and reads a few small files.
        problems = self.load()
        for problem in problems:
            log.warning("manifest skipped: %s", problem)
        pod = self.store.lookup_pod(namespace, name)
        if pod is None and problems:
            raise errors.UnknownContainerError(
                "pod not found",
                "the directory feed skipped: " + "; ".join(str(p) for p in problems),
            )
        return pod

    async def fetch_nad(self, namespace: str, name: str) -> model.KubeObject | None:
        """The NAD after a re-read (KUBE-NADREAD: one written since the last poll is no 101);
        a NAD still missing while manifests were skipped names them."""
        problems = self.load()  # on the loop thread, as `fetch_pod` says why
        for problem in problems:
            log.warning("manifest skipped: %s", problem)
        nad = self.store.lookup_nad(namespace, name)
        if nad is None and problems:
            raise errors.AttachmentNotFoundError(
                f"NetworkAttachmentDefinition {namespace}/{name} not found",
                "the directory feed skipped: " + "; ".join(str(p) for p in problems),
            )
        return nad

    # -- status files ---------------------------------------------------------------------------

    def status_path(self, namespace: str, pod: str) -> Path:
        """`<directory>/status/<namespace>/<pod>.json`: the namespace must be a DNS-1123 label,
        the pod's name a DNS-1123 subdomain."""
        manifests.check_label("pod namespace", namespace)
        problem = manifests.subdomain_problem(pod) if isinstance(pod, str) else "is not a string"
        if problem is not None:
            raise errors.InvalidEnvironmentError(f"invalid pod name {pod!r}", problem)
        return self.directory / STATUS_DIRECTORY / namespace / f"{pod}.json"

    async def publish_status(
        self, namespace: str, pod: str, entries: list[dict[str, object]], *, uid: str = ""
    ) -> None:
        """Write the pod's network-status (the annotation's JSON list) atomically."""
        path = self.status_path(namespace, pod)
        try:
            # Indented like the annotation Multus writes, so a person can read the file.
            text = json.dumps(entries, indent=2, allow_nan=False) + "\n"
        except (TypeError, ValueError) as exc:
            raise errors.InternalError(
                f"network-status of {namespace}/{pod} is not JSON", str(exc)
            ) from exc
        try:
            # Not fsynced: a status lost in a power cut is published again by the pod's next
            # ADD, and the pod's record, not this file, is what DEL reads. Without an fsync
            # the write takes ~0.1 ms: less than a hop to a worker thread and back.
            atomic.write_atomic(path, text.encode(), mode=STATUS_MODE, durable=False)
        except OSError as exc:
            raise errors.IOFailureError(
                f"cannot write network-status of {namespace}/{pod}", str(exc)
            ) from exc

    async def remove_status(self, namespace: str, pod: str, *, uid: str = "") -> None:
        """Delete the pod's status file; nothing to do when there is none."""
        path = self.status_path(namespace, pod)
        try:
            await offload.to_thread(atomic.remove, path, durable=False)  # False: already gone
        except OSError as exc:
            raise errors.IOFailureError(
                f"cannot remove network-status of {namespace}/{pod}", str(exc)
            ) from exc

    def read_status(self, namespace: str, pod: str) -> list[dict[str, object]] | None:
        """The pod's published network-status; None when none is published."""
        path = self.status_path(namespace, pod)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise errors.IOFailureError(f"cannot read {str(path)!r}", str(exc)) from exc
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise errors.DecodingFailureError(
                f"corrupt status file {str(path)!r}", str(exc)
            ) from exc
        if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
            raise errors.DecodingFailureError(
                f"corrupt status file {str(path)!r}", "not a JSON list of objects"
            )
        return raw

    # -- what a directory has none of -----------------------------------------------------------

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
        """Nothing: a directory has no Events."""

    async def aclose(self) -> None:
        """Nothing: the feed holds no connection (`run` closes its own watch when cancelled)."""


# -- reading one file -----------------------------------------------------------------------------


def _object_key(obj: model.KubeObject) -> tuple[str, str, str]:
    return obj.get("kind", ""), model.namespace_of(obj), model.name_of(obj)


def _fingerprint_of(entries: list[os.DirEntry[str]]) -> frozenset[_FileStamp]:
    stamps: set[_FileStamp] = set()
    for entry in entries:
        try:
            st = entry.stat()
        except OSError:
            stamps.add((entry.name, -1, -1, -1, -1))  # e.g. a dangling symlink; load reports it
            continue
        stamps.add((entry.name, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino))
    return frozenset(stamps)


def _cached_file(name: str, entry: Any) -> tuple[_FileStamp, _Parsed]:
    """One file's entry of the parse cache (ValueError, TypeError, KeyError when damaged)."""
    mtime, ctime, size, inode = (int(n) for n in entry["stamp"])
    contents: _Parsed = []
    for document, found in entry["found"]:
        # Parsed JSON: exactly a str or a dict (by type, so `found` keeps the type read).
        if type(found) not in (str, dict):
            raise TypeError(f"cached document of {name!r} is a {type(found).__name__}")
        contents.append((int(document), found))
    return (name, mtime, ctime, size, inode), contents


def _load_file(path: str) -> Iterator[tuple[int, model.KubeObject | str]]:
    """The file's objects of our kinds and its problems (messages), each with its 1-based
    document index (0: the whole file)."""
    try:
        documents = _parse_file(path)
    except _FileRefusedError as exc:
        yield exc.document, exc.message
        return
    for index, document in enumerate(documents, start=1):
        if document is None:
            continue  # an empty document, as between two `---`
        for found in manifests.objects_of(document):
            yield index, found


def _parse_file(path: str) -> list[Any]:
    """Every document of the file as plain JSON values, or `_FileRefusedError`."""
    data = _read_bounded(path)
    try:
        return documents.parse_documents(data, is_json=path.endswith(".json"))
    except documents.DocumentsRefusedError as exc:
        raise _FileRefusedError(f"{exc.message}; file skipped", exc.document) from None


def _read_bounded(path: str) -> bytes:
    # O_NONBLOCK: a FIFO named x.yaml must not hang the feed; it is refused below.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _FileRefusedError(f"cannot open ({exc.strerror or exc})") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _FileRefusedError("not a regular file")
        chunks: list[bytes] = []
        total = 0
        while total <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise _FileRefusedError(f"cannot read ({exc.strerror or exc})") from exc
    finally:
        os.close(fd)
    if total > MAX_FILE_BYTES:
        raise _FileRefusedError(f"larger than {MAX_FILE_BYTES} bytes; file skipped")
    return b"".join(chunks)
