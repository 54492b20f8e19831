"""The thin plugin: the whole orchestrator in the process the runtime executes.

No daemon: each call loads the settings and the manifest directory, runs, and exits. What each
manifest file parsed to is kept in `<stateDir>/manifest-cache.json` (keyed by the file's stamp),
so a call parses only the files changed since the last one. Simple to deploy and the reference
for what the daemon must do faster; `bench/` measures what it costs.
"""

from __future__ import annotations

from collections.abc import Mapping

from netattach import loggers, offload
from netattach.cluster import files, store
from netattach.cni import errors
from netattach.pods import call_log, dispatch, locks, orchestrator, records
from netattach.runtime import chain, execute
from netattach.settings import cni_config, settings
from netattach.settings import feed as feed_settings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from netattach.pods import ports

log = loggers.get("netattach.thin")

PARSE_CACHE = "manifest-cache.json"


class _NoStatus:
    """Where a sweep off the Kubernetes feed "removes" status: nowhere. The pods it sweeps are
    gone, and with them their annotations; the records and allocations are what matter."""

    async def publish_status(
        self, namespace: str, pod: str, entries: list[dict[str, object]], *, uid: str = ""
    ) -> None:
        return None

    async def remove_status(self, namespace: str, pod: str, *, uid: str = "") -> None:
        return None


def build_orchestrator(
    cfg: settings.Settings, *, sweep_only: bool = False
) -> orchestrator.Orchestrator:
    """The orchestrator of one call. `sweep_only` (`netattach gc`): the pod records are all it
    reads, so any feed will do; with the Kubernetes feed no API is contacted."""
    view = store.ClusterStore()
    sink: ports.StatusSink
    state_dir = cfg.runtime.state_dir
    if isinstance(cfg.feed, feed_settings.DirectoryFeed):
        feed = files.DirectoryFeed(cfg.feed.path, view, parse_cache=state_dir / PARSE_CACHE)
        for problem in feed.load():
            log.warning("%s", problem)
        sink = feed
    elif sweep_only:
        sink = _NoStatus()
    else:
        raise errors.InvalidNetworkConfigError(
            f"{cfg.source}: the thin plugin needs feed.directory",
            "the Kubernetes feed is served by the node daemon",
        )
    return orchestrator.Orchestrator(
        settings=cfg,
        view=view,
        sink=sink,
        runtime=chain.Runtime(
            path=[str(p) for p in cfg.runtime.bin_dirs],
            cache_dir=state_dir / "cache",
            timeout=cfg.runtime.delegate_timeout,
            executor=execute.BlockingExec(),
        ),
        records=records.PodRecords(state_dir),
        locks=locks.ContainerLocks(state_dir),
    )


def handle(environ: Mapping[str, str], stdin: bytes) -> dispatch.Reply:
    """One CNI call as the runtime makes it: environment and stdin in, reply out."""

    async def orchestrator_for(netconf: Mapping[str, Any]) -> orchestrator.Orchestrator:
        cfg = cni_config.settings_from_cni_config(netconf)
        level = cfg.logging.level.upper()
        loggers.set_level("netattach", level)
        # Its stderr is the runtime's journal: a line per call there only at debug.
        loggers.set_level(call_log.log.name, level if level == "DEBUG" else "WARNING")
        return build_orchestrator(cfg)

    # No event loop: one call, then exit (netattach.offload says why).
    return offload.run(dispatch.handle(environ, stdin, orchestrator_for))
