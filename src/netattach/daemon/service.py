"""The node daemon: the long-lived orchestrator behind the shim's socket.

Composition root for thick mode: the cluster view and its feed, the runtime with its bound on
concurrent delegates, the orchestrator, the socket server, readiness and install (standard
§6.1), the periodic sweep, metrics. `run()` returns when `stop` is set.
"""

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from netattach import atomic
from netattach.cluster import feeds, files, kube
from netattach.cni import errors, spec
from netattach.daemon import hotplug, introspect, metrics, policy_sync, server, shim_install
from netattach.ipam import claims as ipam_claims
from netattach.ipam import kube_source, sources
from netattach.ipam import service as ipam_service
from netattach.pods import delegate_guard, devices, dispatch, locks, orchestrator, plan, records
from netattach.runtime import chain
from netattach.runtime import memory as runtime_memory
from netattach.settings import feed as feed_settings
from netattach.settings import policy as policy_settings
from netattach.settings import settings

log = logging.getLogger("netattach.daemon")

CONFIG_NAME = "00-netattach.conflist"
SWEEP_INTERVAL = 300.0
SHUTDOWN_GRACE = 20.0  # below the DaemonSet's terminationGracePeriodSeconds (30)
REMOVALS_GRACE = 2.0  # status removals DELs left running, after the calls in flight
READINESS_POLL = 1.0


class Daemon:
    def __init__(self, cfg: settings.Settings, *, shim: Path | None = None) -> None:
        self.cfg = cfg
        # Checked now, so a --shim that is not there stops the daemon before it serves anything;
        # the default is chosen (and a zipapp built, if it comes to that) at the first install.
        self.shim = shim_install.check_explicit(shim)
        self._shim_source: Path | None = None
        self.runtime = chain.Runtime(
            path=[str(p) for p in cfg.runtime.bin_dirs],
            cache_dir=cfg.runtime.state_dir / "cache",
            timeout=cfg.runtime.delegate_timeout,
            max_concurrent=cfg.daemon.max_concurrent_delegates,
            # REL-BURST: and by memory, inside the cgroup's limit (none: the count alone)
            memory=runtime_memory.MemoryGate(runtime_memory.cgroup_limit()),
            observer=self._observe_delegate,
        )
        # The server before the feed: the feed's Events wait while it has calls under way. Its
        # handlers are this daemon's methods, which read what is built below only when called.
        self.server = server.CNIServer(self.handle, pods=self.describe_pods)
        self.feed: feeds.Feed = self._build_feed(idle=self.server.idle)
        # The feed's own store, which reads through it: a pod or NAD the cache has not seen is
        # read from the API, or from the manifests read again (KUBE-CACHE, KUBE-NADREAD).
        self.view = self.feed.store
        pod_records = records.PodRecords(cfg.runtime.state_dir)
        self.policy: policy_sync.PolicySync | None = None
        if cfg.daemon.policy.enabled:
            self.policy = policy_sync.PolicySync(
                view=self.view,
                records=pod_records,
                status_entries=functools.partial(
                    devices.network_status,
                    device_info_dir=cfg.networks.device_info_dir,
                ),
                events=self.feed,
                status_file=self.feed.read_status,
                # POL-SPAN: the peers from the policy controller's groups, on the API's feed
                groups=self.feed
                if isinstance(self.feed, kube.KubeFeed) and self._spanned()
                else None,
                fail_open=cfg.daemon.policy.unpublished_groups == policy_settings.FAIL_OPEN,
            )
        # IPAM-UNIQUE: netattach's own IPAM, its blocks the node's alone (the directory feed)
        # or the cluster's, kept in the API (the Kubernetes feed).
        source, claims = self._build_block_source()
        self.addresses = ipam_service.Addresses(
            cfg.runtime.state_dir / "ipam", source, claims=claims
        )
        self.orchestrator = orchestrator.Orchestrator(
            settings=cfg,
            view=self.view,
            sink=self.feed,
            runtime=self.runtime,
            records=pod_records,
            locks=locks.ContainerLocks(cfg.runtime.state_dir),
            policy=self.policy,
            addresses=self.addresses,
        )
        self.hotplug: hotplug.HotPlug | None = None
        if cfg.daemon.hotplug.enabled:
            self.hotplug = hotplug.HotPlug(
                view=self.view, records=pod_records, replug=self.orchestrator.replug
            )
            self.view.listeners.append(self.hotplug.notify)
        self.health = metrics.HealthServer(ready=self.ready, before_scrape=self._sample)
        self._ready = False
        self._watch_events_seen: dict[str, int] = {}  # by kind, counted into the metric

    def _build_feed(self, *, idle: asyncio.Event) -> feeds.Feed:
        """The feed the settings name (the one place that knows there are two); `idle`: the
        server's, which the API feed's Events wait for."""
        match self.cfg.feed:
            case feed_settings.DirectoryFeed(path=path):
                return files.DirectoryFeed(path)
            case feed_settings.KubernetesFeed(kubeconfig=kubeconfig):
                try:
                    return kube.KubeFeed(
                        node_name=self.cfg.daemon.node_name,
                        kubeconfig=kubeconfig,
                        all_pods=self.cfg.daemon.policy.enabled and not self._spanned(),
                        peer_groups=self._spanned(),
                        idle=idle,
                    )
                except errors.CNIError as exc:
                    raise errors.InvalidNetworkConfigError(
                        f"{self.cfg.source}: feed.kubernetes: {exc.msg}", exc.details
                    ) from exc

    def _spanned(self) -> bool:
        """Whether policy reads its peers from the policy controller's groups (POL-SPAN)."""
        policy = self.cfg.daemon.policy
        return policy.enabled and policy.peers == policy_settings.CONTROLLER

    def _build_block_source(
        self,
    ) -> "tuple[sources.BlockSource, ipam_claims.ClaimAddresses | None]":
        """Where the node's blocks come from, and IPAMClaims' addresses (the API's only)."""
        if isinstance(self.feed, kube.KubeFeed):
            source = kube_source.KubeBlockSource(self.feed.blocks, node=self.cfg.daemon.node_name)
            source.claims = ipam_claims.ClaimAddresses(self.feed.blocks, self.feed.claims)
            return source, source.claims
        return sources.LocalSource(), None

    # -- readiness (standard §6.1) --------------------------------------------------------------

    def ready(self) -> bool:
        return self._ready

    def _check_ready(self) -> bool:
        indicator = self.cfg.daemon.readiness.indicator_file
        if indicator is not None and not indicator.exists():
            return False
        try:
            plan.resolve_default(self.view, self.cfg.networks)
        except errors.CNIError:
            return False
        return True

    def _default_capabilities(self) -> dict[str, bool]:
        """The capabilities the default network declares; none while it is not there yet
        (block mode installs before it is: the config is rewritten once it is ready)."""
        try:
            _, network = plan.resolve_default(self.view, self.cfg.networks)
        except errors.CNIError:
            return {}
        caps = sorted({c for p in network.plugins for c in p.capabilities})
        return dict.fromkeys(caps, True)

    def install(self) -> None:
        """The shim into cniBinDir, then our config into cniConfDir, each written beside and
        renamed (KUBE-INSTALL): a runtime running the old shim never reads half a file."""
        daemon_cfg = self.cfg.daemon
        if self._shim_source is None:
            self._shim_source = shim_install.choose_shim(self.shim, self.cfg.runtime.state_dir)
        shim_install.install_shim(self._shim_source, daemon_cfg.cni_bin_dir)
        plugin: dict[str, Any] = {
            "type": shim_install.SHIM_NAME,
            "daemonSocket": str(daemon_cfg.socket),
        }
        capabilities = self._default_capabilities()
        if capabilities:
            plugin["capabilities"] = capabilities  # so the runtime passes what the default takes
        config = {"cniVersion": "1.0.0", "name": "netattach", "plugins": [plugin]}
        atomic.write_atomic(
            daemon_cfg.cni_conf_dir / CONFIG_NAME, json.dumps(config, indent=2).encode(), mode=0o644
        )
        log.info("installed %s", daemon_cfg.cni_conf_dir / CONFIG_NAME)

    def uninstall(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            atomic.remove(self.cfg.daemon.cni_conf_dir / CONFIG_NAME)

    async def _become_ready(self) -> bool:
        readiness = self.cfg.daemon.readiness
        if readiness.mode == "block":
            await asyncio.to_thread(self.install)  # §6.1.2: install now, block ADD/DEL until ready
        deadline = time.monotonic() + readiness.timeout
        while not self._check_ready():
            if time.monotonic() > deadline:
                log.error(
                    "the cluster default network %s is not ready after %gs (%s)",
                    self.cfg.networks.cluster_network,
                    readiness.timeout,
                    f"waiting for {readiness.indicator_file}"
                    if readiness.indicator_file
                    else f"looked in {self.cfg.networks.networks_dir}",
                )
                return False
            await asyncio.sleep(READINESS_POLL)
        # §6.1.1 (wait): install only now. Block mode installed early, maybe without the
        # default network's capabilities: rewriting it is idempotent and atomic.
        await asyncio.to_thread(self.install)
        self._ready = True
        metrics.READY.set(1)
        log.info(
            "ready: the cluster default network %s is available", self.cfg.networks.cluster_network
        )
        return True

    # -- serving --------------------------------------------------------------------------------

    async def _orchestrator_for(self, netconf: Mapping[str, Any]) -> orchestrator.Orchestrator:
        # A daemon just started (a rolling update: the shim waited for its socket) has not
        # listed the cluster yet, so it cannot tell whether the default network is there: the
        # call waits for the first sync (bounded), then readiness is judged on what it shows.
        if not self._ready and not (
            await self.view.wait_synced(orchestrator.SYNC_TIMEOUT) and self._check_ready()
        ):
            raise errors.TryAgainLaterError(
                "netattach is not ready yet",
                f"waiting for the cluster default network {self.cfg.networks.cluster_network}",
            )
        return self.orchestrator

    async def handle(self, environ: Mapping[str, str], stdin: bytes) -> dispatch.Reply:
        # a label value per known command only: a client must not mint metric series
        command = environ.get(spec.ENV_COMMAND, "")
        command = command if command in spec.COMMANDS else "other"
        started = time.perf_counter()
        if command == spec.STATUS and not self._ready:
            # CNI 1.1 STATUS: "not ready to serve ADD" is code 50, not "try again" (11)
            reply = dispatch.error_reply(
                errors.PluginNotAvailableError(
                    "netattach is not ready yet",
                    f"waiting for the cluster default network {self.cfg.networks.cluster_network}",
                ),
                spec.CURRENT_VERSION,
            )
        else:
            reply = await dispatch.handle(environ, stdin, self._orchestrator_for)
        code = "0"
        if reply.exit_code != 0:
            with contextlib.suppress(ValueError, AttributeError):
                code = str(json.loads(reply.stdout).get("code", "?"))
        metrics.REQUESTS.labels(command=command, code=code).inc()
        metrics.LATENCY.labels(command=command).observe(time.perf_counter() - started)
        return reply

    @staticmethod
    def _observe_delegate(plugin: str, command: str, seconds: float) -> None:
        if command in spec.COMMANDS:  # a bounded label set, like the request metrics
            metrics.DELEGATE_SECONDS.labels(plugin=plugin, command=command).observe(seconds)

    def _sample(self) -> None:
        metrics.DELEGATES_RUNNING.set(self.runtime.invoker.running)
        metrics.DELEGATES_QUEUED.set(self.runtime.invoker.waiting)
        gate = self.runtime.invoker.memory
        if gate is not None:
            metrics.DELEGATES_WAITING_MEMORY.set(gate.waiting)
            metrics.DELEGATE_MEMORY_ADMITTED.set(gate.admitted)
        metrics.CACHE_SYNCED.set(1 if self.view.synced else 0)
        if isinstance(self.feed, kube.KubeFeed):
            for kind, count in self.feed.watch_events().items():
                counted = self._watch_events_seen.get(kind, 0)
                if count > counted:
                    metrics.WATCH_EVENTS.labels(kind).inc(count - counted)
                    self._watch_events_seen[kind] = count

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL)
            try:
                await asyncio.to_thread(self._remove_stale_temp_files)
                swept = await self.orchestrator.sweep()
                if swept:
                    log.info("swept %d containers whose netns is gone", len(swept))
            except errors.CNIError as exc:
                log.warning("sweep: %s", exc)

    async def _enforce_policies(self, sync: policy_sync.PolicySync) -> None:
        """Once the view has synced (never reconcile against a half-known cluster: an absent
        policy would open traffic), converge every pod's policy table, then keep them so."""
        while not await self.view.wait_synced(60.0):
            log.warning("policy enforcement waits for the cluster view to sync")
        await sync.run()

    def _remove_stale_temp_files(self) -> None:
        state = self.cfg.runtime.state_dir
        for directory in (state / "pods", state / "cache" / "results"):
            for path in atomic.remove_stale_temp_files(directory):
                log.info("removed %s, left by an interrupted write", path)

    async def run(self, stop: asyncio.Event) -> int:
        await asyncio.to_thread(self._remove_stale_temp_files)
        await self.feed.start()
        # The view kept current in the background; ADDs wait (bounded) for the first sync.
        tasks = [asyncio.create_task(self.feed.run())]
        await self.addresses.start()
        if self.policy is not None:
            tasks.append(asyncio.create_task(self._enforce_policies(self.policy)))
        await self.server.start(self.cfg.daemon.socket)
        if self.cfg.daemon.metrics.enabled:
            await self.health.start(self.cfg.daemon.metrics.address)
        log.info("serving CNI calls on %s", self.cfg.daemon.socket)
        try:
            readiness = asyncio.create_task(self._become_ready())
            stopping = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({readiness, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if readiness in done:
                failure = readiness.exception()
                if failure is not None:
                    log.error("cannot become ready: %s", failure, exc_info=failure)
                    return 1
                if not readiness.result():
                    return 1
            else:
                readiness.cancel()
            tasks.append(asyncio.create_task(self._sweep_forever()))
            if self.hotplug is not None:
                # Only once ready: a new attachment is planned with the default network.
                tasks.append(asyncio.create_task(self.hotplug.run()))
            await stopping
            return 0
        finally:
            # Stop taking calls, let the ones in flight finish (bounded), then stop the rest.
            await self.server.close(grace=SHUTDOWN_GRACE)
            await self.orchestrator.finish_status_removals(REMOVALS_GRACE)
            for task in tasks:
                task.cancel()
            await self.health.close()
            await asyncio.gather(*tasks, return_exceptions=True)  # the watches end first
            await self.addresses.close()  # the allocations not yet in the API, written
            await self.feed.aclose()  # then queued Events go out, within a bound
            if self.cfg.daemon.cleanup_on_exit:
                self.uninstall()

    async def describe_pods(self, query: Mapping[str, str]) -> object:
        """`GET /v1/pods` on the socket (`netattach status`): the recorded pods, read-only."""
        state = self.policy.state if self.policy is not None else _no_policy
        networks = self.cfg.networks
        refused = delegate_guard.refused_nads(
            self.view,
            networks.delegate_policy,
            networks.networks_dir,
            namespace=query.get("namespace", ""),
        )
        pools, orphans = self.addresses.usage(set(self.orchestrator.records.container_ids()))
        return await introspect.pods_reply(
            self.orchestrator.records,
            state,
            query,
            [*refused, *orphans],
            [introspect.PoolReport.from_raw(p, "pool") for p in pools],
        )


def _no_policy(_container_id: str) -> None:
    return None
