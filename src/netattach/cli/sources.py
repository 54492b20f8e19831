"""Where `netattach status` and `netattach graph` read pods from, chosen by a flag:

    --socket PATH        the node daemon: `GET /v1/pods` on its UNIX socket (what it recorded,
                         with the policy state it enforces)
    --config FILE        the settings of a directory-feed node: its manifests and status files
    --kubeconfig FILE    the cluster, with the user's credentials: pods, NADs and policies

`read()` answers a `Listing` or raises `SourceError` (unreachable, unreadable, refused), which
the commands turn into exit status 2. With no flag, `netattach` asks the daemon at the default
socket and `kubectl netattach` the cluster of `$KUBECONFIG` or `~/.kube/config`, as kubectl does.
The cluster is read by `netattach.cli.kube_source`, imported only then (lightkube is slow to
import).
"""

import asyncio
import contextlib
import dataclasses
import http.client
import json
import os
import socket
import urllib.parse
from pathlib import Path
from typing import Any, Literal

from netattach.cli import cluster_pods
from netattach.cluster import files, model, store
from netattach.cni import errors
from netattach.daemon import introspect, server
from netattach.pods import delegate_guard, plan
from netattach.settings import daemon as daemon_settings
from netattach.settings import feed as feed_settings
from netattach.settings import settings

SourceKind = Literal["daemon", "directory", "cluster"]
DAEMON_TIMEOUT = 10.0
MAX_REPLY_BYTES = 64 * 1024 * 1024


class SourceError(Exception):
    """The source could not be read; the message says which and why."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    kind: SourceKind
    path: Path | None = None  # the socket, the settings file, the kubeconfig (None: in-cluster)

    def describe(self) -> str:
        where = str(self.path) if self.path is not None else "the in-cluster service account"
        return {
            "daemon": f"the daemon at {where}",
            "directory": f"the directory feed of {where}",
            "cluster": f"the cluster of {where}",
        }[self.kind]


def user_kubeconfig() -> Path | None:
    """The kubeconfig kubectl would use: the first file of $KUBECONFIG, else ~/.kube/config;
    None (the in-cluster service account) when neither exists and we run in a pod."""
    for entry in os.environ.get("KUBECONFIG", "").split(os.pathsep):
        if entry:
            return Path(entry)
    home = Path.home() / ".kube" / "config"
    if home.exists() or "KUBERNETES_SERVICE_HOST" not in os.environ:
        return home
    return None


def choose(
    *, socket_path: str | None, config: str | None, kubeconfig: str | None, default: SourceKind
) -> Source:
    if config is not None:
        return Source(kind="directory", path=Path(config))
    if kubeconfig is not None:
        return Source(kind="cluster", path=Path(kubeconfig))
    if socket_path is not None or default == "daemon":
        return Source(kind="daemon", path=Path(socket_path or daemon_settings.DEFAULT_SOCKET))
    return Source(kind="cluster", path=user_kubeconfig())


def read(source: Source, *, namespace: str = "", name: str = "") -> cluster_pods.Listing:
    if source.kind == "daemon":
        assert source.path is not None
        pods, problems, pools = _from_daemon(source.path, namespace, name)
        return cluster_pods.Listing(pods=pods, policies=[], problems=problems, pools=pools)
    if source.kind == "directory":
        assert source.path is not None
        return _from_directory(source.path, namespace, name)
    # lightkube costs ~100 ms to import: only the cluster source pays it.
    from netattach.cli import kube_source

    try:
        return asyncio.run(kube_source.read_cluster(source.path, namespace, name))
    except kube_source.UnreadableClusterError as exc:
        raise SourceError(str(exc)) from exc


# -- the daemon ---------------------------------------------------------------------------------


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=DAEMON_TIMEOUT)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(DAEMON_TIMEOUT)
        try:
            sock.connect(str(self.socket_path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _from_daemon(
    path: Path, namespace: str, name: str
) -> tuple[list[introspect.PodReport], list[str], list[introspect.PoolReport]]:
    query = urllib.parse.urlencode(
        {k: v for k, v in (("namespace", namespace), ("name", name)) if v}
    )
    target = server.PODS_PATH + (f"?{query}" if query else "")
    connection = _UnixConnection(path)
    try:
        connection.request("GET", target)
        reply = connection.getresponse()
        body = reply.read(MAX_REPLY_BYTES + 1)
    except OSError as exc:
        raise SourceError(
            f"cannot reach the netattach daemon at {str(path)!r}: {exc.strerror or exc} "
            "(is it running? give its socket with --socket)"
        ) from exc
    except http.client.HTTPException as exc:
        raise SourceError(f"the daemon at {str(path)!r} answered no HTTP: {exc!r}") from exc
    finally:
        connection.close()
    if len(body) > MAX_REPLY_BYTES:
        raise SourceError(f"the daemon at {str(path)!r} answered more than {MAX_REPLY_BYTES} bytes")
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise SourceError(
            f"the daemon at {str(path)!r} answered {reply.status} without JSON: {body[:120]!r}"
        ) from exc
    if reply.status != 200:
        raise SourceError(
            f"the daemon at {str(path)!r} refused {target!r} ({reply.status}): {_reason(raw)}"
        )
    try:
        return (
            introspect.parse_reply(raw),
            introspect.parse_problems(raw),
            introspect.parse_pools(raw),
        )
    except introspect.ReportFormatError as exc:
        raise SourceError(f"the daemon at {str(path)!r} answered an unknown shape: {exc}") from exc


def _reason(raw: Any) -> str:
    """The message of an error body: ours (`error`) or a CNI error inside a wire reply."""
    if isinstance(raw, dict) and isinstance(raw.get("error"), str):
        return str(raw["error"])
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        inner = json.loads(raw["stdout"])
        return f"{inner['msg']}"
    return repr(raw)[:200]


# -- a directory feed ---------------------------------------------------------------------------


def _from_directory(path: Path, namespace: str, name: str) -> cluster_pods.Listing:
    try:
        cfg = settings.load_settings(path)
    except errors.CNIError as exc:
        raise SourceError(f"cannot use settings {str(path)!r}: {exc}") from exc
    if not isinstance(cfg.feed, feed_settings.DirectoryFeed):
        raise SourceError(
            f"settings {str(path)!r} use the Kubernetes feed: read that cluster with "
            "--kubeconfig, or ask the node's daemon with --socket"
        )
    if not cfg.feed.path.is_dir():
        # Nothing to read is no empty cluster: a picture or a listing of it would say "no pods".
        why = "does not exist" if not cfg.feed.path.exists() else "is not a directory"
        raise SourceError(f"settings {str(path)!r}: feed.directory {str(cfg.feed.path)!r} {why}")
    view = store.ClusterStore()
    feed = files.DirectoryFeed(cfg.feed.path, view)
    manifest_problems = feed.load()
    try:
        default_name, default_network = plan.resolve_default(view, cfg.networks)
        default: tuple[str, dict[str, Any]] | None = (default_name, default_network.raw)
    except errors.CNIError:
        default = None  # then whether it should give addresses is not checked

    def read_status(pod: model.KubeObject) -> list[dict[str, object]] | None:
        return feed.read_status(model.namespace_of(pod), model.name_of(pod))

    listing = cluster_pods.build_listing(
        view,
        read_status,
        cluster_pods.Networks(default=default, networks_dir=cfg.networks.networks_dir),
        namespace=namespace,
        name=name,
    )
    listing.problems.extend(f"manifest skipped: {problem}" for problem in manifest_problems)
    listing.problems.extend(
        delegate_guard.refused_nads(
            view, cfg.networks.delegate_policy, cfg.networks.networks_dir, namespace=namespace
        )
    )
    return listing
