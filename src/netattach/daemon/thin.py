"""The thin plugin: the whole orchestrator in the process the runtime executes.

No daemon, no cache kept between calls: each call loads the settings and the manifest
directory, runs, and exits. Simple to deploy and the reference for what the daemon must do
faster; `bench/` measures what it costs.
"""

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from netattach.cluster import files, store
from netattach.cni import errors
from netattach.daemon import dispatch, locks, orchestrator, records, settings
from netattach.runtime import chain

log = logging.getLogger("netattach.thin")


def build_orchestrator(cfg: settings.Settings) -> orchestrator.Orchestrator:
    if not isinstance(cfg.feed, settings.DirectoryFeed):
        raise errors.InvalidNetworkConfigError(
            f"{cfg.source}: the thin plugin needs feed.directory",
            "the Kubernetes feed is served by the node daemon",
        )
    view = store.ClusterStore()
    feed = files.DirectoryFeed(cfg.feed.path, view)
    for problem in feed.load():
        log.warning("%s", problem)
    state_dir = cfg.runtime.state_dir
    return orchestrator.Orchestrator(
        settings=cfg,
        view=view,
        sink=feed,
        runtime=chain.Runtime(
            path=[str(p) for p in cfg.runtime.bin_dirs],
            cache_dir=state_dir / "cache",
            timeout=cfg.runtime.delegate_timeout,
        ),
        records=records.PodRecords(state_dir),
        locks=locks.ContainerLocks(state_dir),
    )


def handle(environ: Mapping[str, str], stdin: bytes) -> dispatch.Reply:
    """One CNI call as the runtime makes it: environment and stdin in, reply out."""

    async def orchestrator_for(netconf: Mapping[str, Any]) -> orchestrator.Orchestrator:
        cfg = settings.settings_from_cni_config(netconf)
        logging.getLogger("netattach").setLevel(cfg.logging.level.upper())
        return build_orchestrator(cfg)

    return asyncio.run(dispatch.handle(environ, stdin, orchestrator_for))
