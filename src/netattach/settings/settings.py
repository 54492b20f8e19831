"""The node's settings file: what the daemon (and the thin plugin) runs with, checked once.

A YAML (or JSON, which YAML reads too) mapping with camelCase keys; `docs/configuration.md`
describes each. It becomes a `Settings` value of small frozen groups that callers are handed
explicitly (as kopf passes its settings), never a global; each group, with the checks of its
keys, is a module of this package:

    Settings
    ├── networks: NetworkSettings     clusterNetwork, networksDir, namespaceIsolation,
    │                                 globalNamespaces, podResourcesSocket, deviceInfoDir
    │                                 (settings.network); delegatePolicy (settings.policy)
    ├── runtime: RuntimeSettings      binDirs, stateDir, delegateTimeout (settings.runtime)
    ├── feed: DirectoryFeed | KubernetesFeed                            (settings.feed)
    ├── logging: LoggingSettings      logLevel, loggers                 (settings.log_levels)
    └── daemon: DaemonSettings        nodeName, daemonSocket, cniConfDir, cniBinDir,
        │                             maxConcurrentDelegates, memoryWaitEvent, cleanupOnExit
        │                             (settings.daemon)
        ├── readiness: ReadinessSettings   readiness.mode, .indicatorFile, .timeout
        ├── metrics: MetricsSettings       metrics.address, .enabled    (settings.metrics)
        ├── policy: PolicySettings         policy.enabled, .peers       (settings.policy)
        └── hotplug: HotPlugSettings       hotplug.enabled

    load_settings(path)               the daemon: a file
    parse_settings(raw, source=...)   a mapping already decoded
    settings_problems(raw)            every problem, without raising (`netattach validate`)
    settings_from_cni_config(raw)     the thin plugin (settings.cni_config): its CNI config names
                                      the file (`configFile`) or carries the settings (`settings`)

Every key is checked and every problem is collected, then raised together as one
`errors.InvalidNetworkConfigError` (7) whose msg names the file and whose details list each
problem as `key.path: reason, got value`. Unknown keys are problems too, so a misspelt key is
never silently ignored in favour of its default. A key written as null (as templating tools
write an unset value) takes its default; `nodeName`'s default is the environment variable
`NODE_NAME`, else this machine's hostname, so one file serves every node. An unreadable file is
`IOFailureError` (5); text that is not YAML is `DecodingFailureError` (6).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from netattach import values
from netattach.cluster import documents
from netattach.cni import errors
from netattach.guard import delegate_policy
from netattach.settings import daemon as daemon_mod
from netattach.settings import feed as feed_mod
from netattach.settings import fields, log_levels, metrics, network, policy
from netattach.settings import runtime as runtime_mod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar, Final

# The top-level YAML keys, in the order docs/configuration.md lists them.
KEYS: Final = (
    "clusterNetwork",
    "networksDir",
    "binDirs",
    "stateDir",
    "namespaceIsolation",
    "globalNamespaces",
    "delegateTimeout",
    "feed",
    "logLevel",
    "loggers",
    "nodeName",
    "daemonSocket",
    "cniConfDir",
    "cniBinDir",
    "maxConcurrentDelegates",
    "memoryWaitEvent",
    "readiness",
    "metrics",
    "cleanupOnExit",
    "policy",
    "hotplug",
    "delegatePolicy",
    "podResourcesSocket",
    "deviceInfoDir",
)


_DEFAULT_RUNTIME: Final = runtime_mod.RuntimeSettings()
_DEFAULT_LOGGING: Final = log_levels.LoggingSettings()


def _default_daemon_settings() -> daemon_mod.DaemonSettings:
    return daemon_mod.DaemonSettings(node_name=daemon_mod.default_node_name())


# A values.Frozen rather than a NamedTuple: `daemon` defaults to this machine's settings, computed
# when the Settings is built (a NamedTuple has no default factory); and not a frozen dataclass,
# which the thin plugin would create on every exec (see values.py).
class Settings(values.Frozen):
    """One node's netattach settings; `source` names where they were read from.

    `daemon` defaults (for Settings built by hand) to the daemon defaults on this machine.
    """

    _FIELDS: ClassVar[tuple[str, ...]] = (
        "networks",
        "feed",
        "runtime",
        "logging",
        "daemon",
        "source",
    )
    __slots__ = _FIELDS

    networks: network.NetworkSettings
    feed: feed_mod.DirectoryFeed | feed_mod.KubernetesFeed
    runtime: runtime_mod.RuntimeSettings
    logging: log_levels.LoggingSettings
    daemon: daemon_mod.DaemonSettings
    source: str

    def __init__(
        self,
        *,
        networks: network.NetworkSettings,
        feed: feed_mod.DirectoryFeed | feed_mod.KubernetesFeed,
        runtime: runtime_mod.RuntimeSettings = _DEFAULT_RUNTIME,
        logging: log_levels.LoggingSettings = _DEFAULT_LOGGING,
        daemon: daemon_mod.DaemonSettings | None = None,
        source: str = "<settings>",
    ) -> None:
        self._init(
            networks=networks,
            feed=feed,
            runtime=runtime,
            logging=logging,
            daemon=_default_daemon_settings() if daemon is None else daemon,
            source=source,
        )


def load_settings(path: Path) -> Settings:
    """The settings in the YAML file at `path`; every error names the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise errors.DecodingFailureError(
            f"{path}: netattach settings are not UTF-8 text", str(exc)
        ) from exc
    except OSError as exc:
        raise errors.IOFailureError(
            f"cannot read netattach settings {str(path)!r}", str(exc)
        ) from exc
    try:
        found = documents.parse_documents(text.encode(), is_json=False)
    except documents.DocumentsRefusedError as exc:
        raise errors.DecodingFailureError(
            f"{path}: netattach settings are not valid YAML", " ".join(exc.message.split())
        ) from exc
    found = [d for d in found if d is not None]
    if len(found) > 1:
        raise errors.DecodingFailureError(
            f"{path}: netattach settings are one YAML document, this file has {len(found)}"
        )
    raw = found[0] if found else None
    return parse_settings(raw, source=str(path))


def parse_settings(raw: object, *, source: str, prefix: str = "") -> Settings:
    """`raw` (a decoded YAML/JSON mapping) as Settings; `source` names it in the error, and
    `prefix` goes in front of every key a problem names (`settings.`: the thin plugin's inline
    settings).

    Raises `errors.InvalidNetworkConfigError` listing every problem found.
    """
    problems: list[str] = []
    settings = _build(raw, prefix, source, problems)
    if problems or settings is None:
        count = f"{len(problems)} problem" + ("" if len(problems) == 1 else "s")
        raise errors.InvalidNetworkConfigError(
            f"{source}: invalid netattach settings ({count})", "; ".join(problems)
        )
    return settings


def settings_problems(raw: object) -> tuple[str, ...]:
    """Every problem of `raw` as settings (unknown keys first), `()` when it is valid."""
    problems: list[str] = []
    _build(raw, "", "<settings>", problems)
    return tuple(problems)


def _build(raw: object, prefix: str, source: str, problems: list[str]) -> Settings | None:
    if not isinstance(raw, Mapping):
        where = prefix.rstrip(".") or "settings"
        problems.append(
            f"{where}: must be a mapping of settings keys ({', '.join(KEYS)}), "
            f"got {fields.show(raw)}"
        )
        return None
    start = len(problems)
    fields.check_keys(raw, KEYS, prefix, problems)

    def key(name: str) -> str:
        return prefix + name

    cluster_network = network.cluster_network(
        raw.get("clusterNetwork"), key("clusterNetwork"), problems
    )
    networks_dir = fields.path(raw.get("networksDir"), key("networksDir"), problems)
    bin_dirs = runtime_mod.bin_dirs(raw.get("binDirs"), key("binDirs"), problems)
    state_dir = fields.path(raw.get("stateDir"), key("stateDir"), problems)
    isolation = fields.flag(raw.get("namespaceIsolation"), key("namespaceIsolation"), problems)
    global_namespaces = network.namespace_names(
        raw.get("globalNamespaces"), key("globalNamespaces"), problems
    )
    timeout = runtime_mod.delegate_timeout(
        raw.get("delegateTimeout"), key("delegateTimeout"), problems
    )
    feed = feed_mod.source(raw.get("feed"), key("feed"), problems)
    level = log_levels.level(raw.get("logLevel"), key("logLevel"), problems)
    loggers = log_levels.loggers(raw.get("loggers"), key("loggers"), problems)
    # Only the Kubernetes feed uses the node name (to watch this node's pods): with any other
    # feed an unusable *default* (a hostname like build_host) must not fail the settings.
    needs_node = feed_mod.wants_kubernetes(raw.get("feed"))
    node_name = daemon_mod.node_name(raw.get("nodeName"), key("nodeName"), problems, needs_node)
    daemon_socket = daemon_mod.socket(raw.get("daemonSocket"), key("daemonSocket"), problems)
    cni_conf_dir = fields.path(raw.get("cniConfDir"), key("cniConfDir"), problems)
    cni_bin_dir = fields.path(raw.get("cniBinDir"), key("cniBinDir"), problems)
    delegates = daemon_mod.delegate_count(
        raw.get("maxConcurrentDelegates"), key("maxConcurrentDelegates"), problems
    )
    memory_wait = fields.seconds(
        raw.get("memoryWaitEvent"), key("memoryWaitEvent"), problems,
        most=daemon_mod.MAX_MEMORY_WAIT_EVENT,
    )  # fmt: skip
    readiness = daemon_mod.readiness(raw.get("readiness"), key("readiness"), problems)
    metrics_settings = metrics.section(raw.get("metrics"), key("metrics"), problems)
    cleanup = fields.flag(raw.get("cleanupOnExit"), key("cleanupOnExit"), problems)
    policy_settings = policy.section(raw.get("policy"), key("policy"), problems)
    hotplug = daemon_mod.hotplug(raw.get("hotplug"), key("hotplug"), problems)
    delegates_allowed = delegate_policy.parse_policy(
        raw.get("delegatePolicy"), key("delegatePolicy"), problems
    )
    pod_resources = daemon_mod.socket(
        raw.get("podResourcesSocket"), key("podResourcesSocket"), problems
    )
    device_info_dir = fields.path(raw.get("deviceInfoDir"), key("deviceInfoDir"), problems)
    if len(problems) > start or cluster_network is None or feed is None or node_name is None:
        return None
    return Settings(
        networks=network.NetworkSettings(
            cluster_network=cluster_network,
            networks_dir=network.DEFAULT_NETWORKS_DIR if networks_dir is None else networks_dir,
            namespace_isolation=True if isolation is None else isolation,
            global_namespaces=(
                network.DEFAULT_GLOBAL_NAMESPACES
                if global_namespaces is None
                else global_namespaces
            ),
            delegate_policy=policy.protected(
                delegates_allowed,
                _own_dirs(
                    state_dir=state_dir,
                    networks_dir=networks_dir,
                    cni_conf_dir=cni_conf_dir,
                    cni_bin_dir=cni_bin_dir,
                    socket=daemon_socket,
                    bin_dirs=bin_dirs,
                    device_info_dir=device_info_dir,
                ),
            ),
            pod_resources_socket=pod_resources or network.DEFAULT_POD_RESOURCES_SOCKET,
            device_info_dir=device_info_dir or network.DEFAULT_DEVICE_INFO_DIR,
        ),
        runtime=runtime_mod.RuntimeSettings(
            bin_dirs=runtime_mod.DEFAULT_BIN_DIRS if bin_dirs is None else bin_dirs,
            state_dir=runtime_mod.DEFAULT_STATE_DIR if state_dir is None else state_dir,
            delegate_timeout=runtime_mod.DEFAULT_DELEGATE_TIMEOUT if timeout is None else timeout,
        ),
        feed=feed,
        logging=log_levels.LoggingSettings(
            level="info" if level is None else level, loggers=loggers or ()
        ),
        daemon=daemon_mod.DaemonSettings(
            node_name=node_name,
            socket=daemon_mod.DEFAULT_SOCKET if daemon_socket is None else daemon_socket,
            cni_conf_dir=daemon_mod.DEFAULT_CNI_CONF_DIR if cni_conf_dir is None else cni_conf_dir,
            cni_bin_dir=daemon_mod.DEFAULT_CNI_BIN_DIR if cni_bin_dir is None else cni_bin_dir,
            max_concurrent_delegates=(
                daemon_mod.DEFAULT_MAX_CONCURRENT_DELEGATES if delegates is None else delegates
            ),
            memory_wait_event=(
                daemon_mod.DEFAULT_MEMORY_WAIT_EVENT if memory_wait is None else memory_wait
            ),
            readiness=daemon_mod.ReadinessSettings() if readiness is None else readiness,
            metrics=metrics.MetricsSettings() if metrics_settings is None else metrics_settings,
            cleanup_on_exit=False if cleanup is None else cleanup,
            policy=policy.PolicySettings() if policy_settings is None else policy_settings,
            hotplug=daemon_mod.HotPlugSettings() if hotplug is None else hotplug,
        ),
        source=source,
    )


def _own_dirs(
    *,
    state_dir: Path | None,
    networks_dir: Path | None,
    cni_conf_dir: Path | None,
    cni_bin_dir: Path | None,
    socket: Path | None,
    bin_dirs: tuple[Path, ...] | None,
    device_info_dir: Path | None,
) -> tuple[Path, ...]:
    """netattach's directories as these settings place them, which no delegate may write into
    (SEC-NODE): its state, its networks, the runtime's config and plugin directories it
    installs into, its socket's directory, the plugin directories it runs from and the
    device-info files it hands to delegates (DEV-INFO)."""
    return (
        state_dir or runtime_mod.DEFAULT_STATE_DIR,
        networks_dir or network.DEFAULT_NETWORKS_DIR,
        cni_conf_dir or daemon_mod.DEFAULT_CNI_CONF_DIR,
        cni_bin_dir or daemon_mod.DEFAULT_CNI_BIN_DIR,
        (socket or daemon_mod.DEFAULT_SOCKET).parent,
        *(runtime_mod.DEFAULT_BIN_DIRS if bin_dirs is None else bin_dirs),
        device_info_dir or network.DEFAULT_DEVICE_INFO_DIR,
    )
