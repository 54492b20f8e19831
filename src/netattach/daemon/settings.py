"""The node's settings file: what the daemon (and the thin plugin) runs with, checked once.

A YAML (or JSON, which YAML reads too) mapping with camelCase keys; `docs/configuration.md`
describes each. It becomes a `Settings` value of small frozen groups that callers are handed
explicitly (as kopf passes its settings), never a global:

    Settings
    ├── networks: NetworkSettings     clusterNetwork, networksDir, namespaceIsolation,
    │                                 globalNamespaces, delegatePolicy (guard/delegate_policy.py),
    │                                 podResourcesSocket, deviceInfoDir
    ├── runtime: RuntimeSettings      binDirs, stateDir, delegateTimeout
    ├── feed: DirectoryFeed | KubernetesFeed
    ├── logging: LoggingSettings      logLevel, loggers
    └── daemon: DaemonSettings        nodeName, daemonSocket, cniConfDir, cniBinDir,
        │                             maxConcurrentDelegates, cleanupOnExit
        ├── readiness: ReadinessSettings   readiness.mode, .indicatorFile, .timeout
        ├── metrics: MetricsSettings       metrics.address, .enabled
        ├── policy: PolicySettings         policy.enabled
        └── hotplug: HotPlugSettings       hotplug.enabled

    load_settings(path)               the daemon: a file
    settings_from_cni_config(raw)     the thin plugin: its CNI config names the file
                                      (`configFile`) or carries the settings (`settings`)
    parse_settings(raw, source=...)   a mapping already decoded
    settings_problems(raw)            every problem, without raising (`netattach validate`)

Every key is checked and every problem is collected, then raised together as one
`errors.InvalidNetworkConfigError` (7) whose msg names the file and whose details list each
problem as `key.path: reason, got value`. Unknown keys are problems too, so a misspelt key is
never silently ignored in favour of its default. A key written as null (as templating tools
write an unset value) takes its default; `nodeName`'s default is the environment variable
`NODE_NAME`, else this machine's hostname, so one file serves every node. An unreadable file is
`IOFailureError` (5); text that is not YAML is `DecodingFailureError` (6).
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import reprlib
from collections.abc import Mapping
from pathlib import Path

from netattach import names, values
from netattach.attach import status
from netattach.cluster import documents
from netattach.cni import conf, errors
from netattach.guard import delegate_policy
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar, Final, Literal

DEFAULT_NETWORKS_DIR: Final = Path("/etc/cni/netattach.d")
DEFAULT_BIN_DIRS: Final = (Path("/opt/cni/bin"),)
DEFAULT_STATE_DIR: Final = Path("/var/lib/netattach")
DEFAULT_GLOBAL_NAMESPACES: Final = ("default",)
DEFAULT_DELEGATE_TIMEOUT: Final = 60.0
# A delegate that needs more than an hour is hung; the bound also catches milliseconds written
# where seconds are meant.
MAX_DELEGATE_TIMEOUT: Final = 3600.0
DEFAULT_SOCKET: Final = Path("/run/netattach/netattach.sock")
DEFAULT_CNI_CONF_DIR: Final = Path("/etc/cni/net.d")
DEFAULT_CNI_BIN_DIR: Final = Path("/opt/cni/bin")
DEFAULT_MAX_CONCURRENT_DELEGATES: Final = 8
MAX_CONCURRENT_DELEGATES: Final = 1024
DEFAULT_READINESS_TIMEOUT: Final = 300.0
# A day: a default network that has not come up by then will not; the bound also catches
# milliseconds written where seconds are meant.
MAX_READINESS_TIMEOUT: Final = 86400.0
DEFAULT_METRICS_ADDRESS: Final = "127.0.0.1:9108"
# DEV-RESOURCE: the kubelet's PodResources socket, and the NPWG device-info directory (its
# `dp/` files written by device plugins, its `cni/` files by netattach and the delegates).
DEFAULT_POD_RESOURCES_SOCKET: Final = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_DEVICE_INFO_DIR: Final = status.DEVICE_INFO_DIR
# The environment variable the DaemonSet sets from the downward API (spec.nodeName).
NODE_NAME_ENV: Final = "NODE_NAME"

if TYPE_CHECKING:
    ReadinessMode = Literal["wait", "block"]
READINESS_MODES: Final[tuple[ReadinessMode, ...]] = ("wait", "block")

if TYPE_CHECKING:
    LogLevel = Literal["debug", "info", "warning", "error"]
LOG_LEVELS: Final[tuple[LogLevel, ...]] = ("debug", "info", "warning", "error")
# Patterns as text: `re` compiles each on first use and caches it, so a start of the thin
# plugin compiles only those its call needs.
_LOGGER_NAME: Final = r"^[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*$"

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
    "readiness",
    "metrics",
    "cleanupOnExit",
    "policy",
    "hotplug",
    "delegatePolicy",
    "podResourcesSocket",
    "deviceInfoDir",
)
_FEED_KEYS: Final = ("directory", "kubernetes")
_READINESS_KEYS: Final = ("mode", "indicatorFile", "timeout")
_METRICS_KEYS: Final = ("address", "enabled")
_POLICY_KEYS: Final = ("enabled",)
_HOTPLUG_KEYS: Final = ("enabled",)
_KUBERNETES_KEYS: Final = ("kubeconfig",)
_CNI_CONFIG_KEYS: Final = ("configFile", "settings")

# Linux: sockaddr_un.sun_path is 108 bytes, the last a NUL.
_SOCKET_PATH_MAX: Final = 107
_PORT: Final = r"[0-9]{1,5}"
_ADDRESS_FORM: Final = (
    "host:port, an IPv6 address in brackets ('[::1]:9108'), the port from 1 to 65535"
)
_CONFIG_EXTENSIONS: Final = conf.CONF_EXTENSIONS + conf.LIST_EXTENSIONS
_CLUSTER_NETWORK_FORMS: Final = (
    "'namespace/name' of a NetworkAttachmentDefinition, a network name from networksDir, or an "
    f"absolute path to a {', '.join(_CONFIG_EXTENSIONS)} file"
)

# Bad values are quoted in problems, cut to this many characters.
_SHOW_CHARS: Final = 80
# reprlib bounds the work as well as the text: YAML aliases let a few bytes stand for a structure
# far too large to repr in full ("billion laughs").
_REPR = reprlib.Repr()
_REPR.maxstring = _SHOW_CHARS
_REPR.maxother = _SHOW_CHARS
_REPR.maxlevel = 3


# The value types below are NamedTuples rather than frozen dataclasses: the thin plugin imports
# this module on every exec, and a dataclass costs ~0.5 ms to create (it compiles each of its
# methods), a `values.NamedTuple` ~6 us. They are built by keyword and never changed.
class ClusterNetworkRef(NamedTuple):
    """Where the cluster default network's config comes from (standard §6, DEF-ATTACH).

    kind "nad":  the NetworkAttachmentDefinition `namespace/name`
    kind "name": the network called `name` in networksDir (a conflist preferred, §3.4.1)
    kind "file": the .conf/.conflist file at `path`
    """

    kind: Literal["nad", "name", "file"]
    namespace: str = ""
    name: str = ""
    path: Path | None = None

    def __str__(self) -> str:
        if self.kind == "nad":
            return f"{self.namespace}/{self.name}"
        if self.kind == "file":
            return str(self.path)
        return self.name


class NetworkSettings(NamedTuple):
    """Which networks a pod gets: the default one, and which NADs it may select."""

    cluster_network: ClusterNetworkRef
    networks_dir: Path = DEFAULT_NETWORKS_DIR
    # RT-RESTRICT: a pod selects NADs of its own namespace only, or of a global namespace.
    namespace_isolation: bool = True
    global_namespaces: tuple[str, ...] = DEFAULT_GLOBAL_NAMESPACES
    # SEC-DELEGATE: what the NADs of a namespace may make netattach run.
    delegate_policy: delegate_policy.DelegatePolicy = delegate_policy.DEFAULT_POLICY
    # DEV-RESOURCE: where the kubelet says which devices a pod got, and the device-info files.
    pod_resources_socket: Path = DEFAULT_POD_RESOURCES_SOCKET
    device_info_dir: Path = DEFAULT_DEVICE_INFO_DIR


class RuntimeSettings(NamedTuple):
    """How delegates run: where plugins are found, where records go, how long a plugin may take."""

    bin_dirs: tuple[Path, ...] = DEFAULT_BIN_DIRS
    state_dir: Path = DEFAULT_STATE_DIR
    delegate_timeout: float = DEFAULT_DELEGATE_TIMEOUT


class DirectoryFeed(NamedTuple):
    """The cluster view comes from a directory of YAML manifests (the embedded default)."""

    path: Path


class KubernetesFeed(NamedTuple):
    """The cluster view comes from the Kubernetes API; no kubeconfig means in-cluster config."""

    kubeconfig: Path | None = None


class LoggingSettings(NamedTuple):
    level: LogLevel = "info"
    # Other libraries' loggers (httpx2, lightkube, asyncio...) log at warning unless named here.
    loggers: tuple[tuple[str, LogLevel], ...] = ()


class ReadinessSettings(NamedTuple):
    """When the cluster default network counts as ready, and what the daemon does until then.

    mode "wait":  standard §6.1.1, install our CNI config into cniConfDir only once ready
    mode "block": standard §6.1.2, install it at once and hold every ADD and DEL until ready
    Ready means `indicator_file` exists when one is set, and the cluster default network
    resolves (its NAD, or its config in networksDir, or its file). Either wait gives up after
    `timeout` seconds with a message saying what it waited for (DEF-READY).
    """

    mode: ReadinessMode = "wait"
    indicator_file: Path | None = None
    timeout: float = DEFAULT_READINESS_TIMEOUT


class MetricsSettings(NamedTuple):
    """Where the daemon serves its Prometheus metrics: `address` is host:port ("[::1]:9108")."""

    address: str = DEFAULT_METRICS_ADDRESS
    enabled: bool = True

    @property
    def host(self) -> str:
        """The address's host, an IPv6 address without its brackets; ready for `bind`."""
        return _split_address(self.address)[0]

    @property
    def port(self) -> int:
        return _split_address(self.address)[1]


class PolicySettings(NamedTuple):
    """MultiNetworkPolicy enforcement on the pods the daemon attaches (issue POL-*).

    Enabled, the Kubernetes feed watches every pod of the cluster (trimmed), not only this
    node's: a policy's peers may run anywhere.
    """

    enabled: bool = True


class HotPlugSettings(NamedTuple):
    """Dynamic networks (RT-HOTPLUG): an edit of a running pod's selection annotation adds and
    removes its attachments to match."""

    enabled: bool = True


class DaemonSettings(NamedTuple):
    """The node daemon's own settings: who it is, where it listens, what it installs."""

    node_name: str
    socket: Path = DEFAULT_SOCKET
    # The runtime's CNI config directory, where our config is installed (standard §6.1).
    cni_conf_dir: Path = DEFAULT_CNI_CONF_DIR
    # Where the shim is installed, for the runtime to run.
    cni_bin_dir: Path = DEFAULT_CNI_BIN_DIR
    max_concurrent_delegates: int = DEFAULT_MAX_CONCURRENT_DELEGATES
    readiness: ReadinessSettings = ReadinessSettings()
    metrics: MetricsSettings = MetricsSettings()
    cleanup_on_exit: bool = False
    policy: PolicySettings = PolicySettings()
    hotplug: HotPlugSettings = HotPlugSettings()


def default_node_name() -> str:
    """This node's name when `nodeName` is not set: `NODE_NAME`, else the hostname.

    The hostname is stripped and lower-cased, as the kubelet does when it names its Node; the
    DaemonSet's `NODE_NAME` (the downward API's spec.nodeName) is the name itself. An empty
    `NODE_NAME`, as templating writes an unset one, counts as unset.
    """
    # uname's nodename is the hostname (what gethostname() returns), without importing `socket`
    # (~3 ms of every thin-plugin exec).
    return os.environ.get(NODE_NAME_ENV) or os.uname().nodename.strip().lower()


def _default_daemon_settings() -> DaemonSettings:
    return DaemonSettings(node_name=default_node_name())


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

    networks: NetworkSettings
    feed: DirectoryFeed | KubernetesFeed
    runtime: RuntimeSettings
    logging: LoggingSettings
    daemon: DaemonSettings
    source: str

    def __init__(
        self,
        *,
        networks: NetworkSettings,
        feed: DirectoryFeed | KubernetesFeed,
        runtime: RuntimeSettings = RuntimeSettings(),  # noqa: B008 (immutable: a NamedTuple)
        logging: LoggingSettings = LoggingSettings(),  # noqa: B008 (immutable: a NamedTuple)
        daemon: DaemonSettings | None = None,
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


def parse_settings(raw: object, *, source: str) -> Settings:
    """`raw` (a decoded YAML/JSON mapping) as Settings; `source` names it in the error.

    Raises `errors.InvalidNetworkConfigError` listing every problem found.
    """
    return _parse(raw, source=source, prefix="")


def settings_problems(raw: object) -> tuple[str, ...]:
    """Every problem of `raw` as settings (unknown keys first), `()` when it is valid."""
    problems: list[str] = []
    _build(raw, "", "<settings>", problems)
    return tuple(problems)


def settings_from_cni_config(
    raw: Mapping[str, object], *, source: str = "netattach CNI config"
) -> Settings:
    """The settings the thin plugin's CNI config points at, or carries inline.

    The config has exactly one of `configFile` (an absolute path, loaded with `load_settings`)
    and `settings` (the same mapping as the file, inline). Its other keys (`cniVersion`, `name`,
    `type`, `capabilities`, what the runtime injects) are the runtime's business and not read.
    """
    present = [key for key in _CNI_CONFIG_KEYS if raw.get(key) is not None]
    if len(present) != 1:
        got = {key: raw[key] for key in _CNI_CONFIG_KEYS if key in raw}
        raise errors.InvalidNetworkConfigError(
            f"{source}: invalid netattach CNI config",
            "exactly one of 'configFile' (an absolute path to the settings file) and 'settings' "
            f"(the settings inline) is required, got {_show(got) if got else 'neither'}",
        )
    if present == ["settings"]:
        return _parse(raw["settings"], source=source, prefix="settings.")
    value = raw["configFile"]
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise errors.InvalidNetworkConfigError(
            f"{source}: invalid netattach CNI config",
            f"configFile: must be an absolute path to the settings file, got {_show(value)}",
        )
    return load_settings(Path(value))


# --- the whole mapping -----------------------------------------------------------------------


def _parse(raw: object, *, source: str, prefix: str) -> Settings:
    problems: list[str] = []
    settings = _build(raw, prefix, source, problems)
    if problems or settings is None:
        count = f"{len(problems)} problem" + ("" if len(problems) == 1 else "s")
        raise errors.InvalidNetworkConfigError(
            f"{source}: invalid netattach settings ({count})", "; ".join(problems)
        )
    return settings


def _build(raw: object, prefix: str, source: str, problems: list[str]) -> Settings | None:
    if not isinstance(raw, Mapping):
        where = prefix.rstrip(".") or "settings"
        problems.append(
            f"{where}: must be a mapping of settings keys ({', '.join(KEYS)}), got {_show(raw)}"
        )
        return None
    start = len(problems)
    _check_keys(raw, KEYS, prefix, problems)

    def key(name: str) -> str:
        return prefix + name

    cluster_network = _cluster_network(raw.get("clusterNetwork"), key("clusterNetwork"), problems)
    networks_dir = _path(raw.get("networksDir"), key("networksDir"), problems)
    bin_dirs = _bin_dirs(raw.get("binDirs"), key("binDirs"), problems)
    state_dir = _path(raw.get("stateDir"), key("stateDir"), problems)
    isolation = _flag(raw.get("namespaceIsolation"), key("namespaceIsolation"), problems)
    global_namespaces = _labels(raw.get("globalNamespaces"), key("globalNamespaces"), problems)
    timeout = _timeout(raw.get("delegateTimeout"), key("delegateTimeout"), problems)
    feed = _feed(raw.get("feed"), key("feed"), problems)
    level = _log_level(raw.get("logLevel"), key("logLevel"), problems)
    loggers = _loggers(raw.get("loggers"), key("loggers"), problems)
    feed_raw = raw.get("feed")
    # Only the Kubernetes feed uses the node name (to watch this node's pods): with any other
    # feed an unusable *default* (a hostname like build_host) must not fail the settings.
    needs_node = isinstance(feed_raw, Mapping) and "kubernetes" in feed_raw
    node_name = _node_name(raw.get("nodeName"), key("nodeName"), problems, needs_node)
    daemon_socket = _socket(raw.get("daemonSocket"), key("daemonSocket"), problems)
    cni_conf_dir = _path(raw.get("cniConfDir"), key("cniConfDir"), problems)
    cni_bin_dir = _path(raw.get("cniBinDir"), key("cniBinDir"), problems)
    delegates = _count(raw.get("maxConcurrentDelegates"), key("maxConcurrentDelegates"), problems)
    readiness = _readiness(raw.get("readiness"), key("readiness"), problems)
    metrics = _metrics(raw.get("metrics"), key("metrics"), problems)
    cleanup = _flag(raw.get("cleanupOnExit"), key("cleanupOnExit"), problems)
    policy = _policy(raw.get("policy"), key("policy"), problems)
    hotplug = _hotplug(raw.get("hotplug"), key("hotplug"), problems)
    delegates_allowed = delegate_policy.parse_policy(
        raw.get("delegatePolicy"), key("delegatePolicy"), problems
    )
    pod_resources = _socket(raw.get("podResourcesSocket"), key("podResourcesSocket"), problems)
    device_info_dir = _path(raw.get("deviceInfoDir"), key("deviceInfoDir"), problems)
    if len(problems) > start or cluster_network is None or feed is None or node_name is None:
        return None
    return Settings(
        networks=NetworkSettings(
            cluster_network=cluster_network,
            networks_dir=DEFAULT_NETWORKS_DIR if networks_dir is None else networks_dir,
            namespace_isolation=True if isolation is None else isolation,
            global_namespaces=(
                DEFAULT_GLOBAL_NAMESPACES if global_namespaces is None else global_namespaces
            ),
            delegate_policy=(
                delegate_policy.DEFAULT_POLICY if delegates_allowed is None else delegates_allowed
            ).with_protected(
                _own_dirs(
                    state_dir=state_dir,
                    networks_dir=networks_dir,
                    cni_conf_dir=cni_conf_dir,
                    cni_bin_dir=cni_bin_dir,
                    socket=daemon_socket,
                    bin_dirs=bin_dirs,
                    device_info_dir=device_info_dir,
                )
            ),
            pod_resources_socket=pod_resources or DEFAULT_POD_RESOURCES_SOCKET,
            device_info_dir=device_info_dir or DEFAULT_DEVICE_INFO_DIR,
        ),
        runtime=RuntimeSettings(
            bin_dirs=DEFAULT_BIN_DIRS if bin_dirs is None else bin_dirs,
            state_dir=DEFAULT_STATE_DIR if state_dir is None else state_dir,
            delegate_timeout=DEFAULT_DELEGATE_TIMEOUT if timeout is None else timeout,
        ),
        feed=feed,
        logging=LoggingSettings(level="info" if level is None else level, loggers=loggers or ()),
        daemon=DaemonSettings(
            node_name=node_name,
            socket=DEFAULT_SOCKET if daemon_socket is None else daemon_socket,
            cni_conf_dir=DEFAULT_CNI_CONF_DIR if cni_conf_dir is None else cni_conf_dir,
            cni_bin_dir=DEFAULT_CNI_BIN_DIR if cni_bin_dir is None else cni_bin_dir,
            max_concurrent_delegates=(
                DEFAULT_MAX_CONCURRENT_DELEGATES if delegates is None else delegates
            ),
            readiness=ReadinessSettings() if readiness is None else readiness,
            metrics=MetricsSettings() if metrics is None else metrics,
            cleanup_on_exit=False if cleanup is None else cleanup,
            policy=PolicySettings() if policy is None else policy,
            hotplug=HotPlugSettings() if hotplug is None else hotplug,
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
) -> tuple[str, ...]:
    """netattach's directories as these settings place them, which no delegate may write into
    (SEC-NODE): its state, its networks, the runtime's config and plugin directories it
    installs into, its socket's directory, the plugin directories it runs from and the
    device-info files it hands to delegates (DEV-INFO)."""
    dirs = [
        state_dir or DEFAULT_STATE_DIR,
        networks_dir or DEFAULT_NETWORKS_DIR,
        cni_conf_dir or DEFAULT_CNI_CONF_DIR,
        cni_bin_dir or DEFAULT_CNI_BIN_DIR,
        (socket or DEFAULT_SOCKET).parent,
        *(DEFAULT_BIN_DIRS if bin_dirs is None else bin_dirs),
        device_info_dir or DEFAULT_DEVICE_INFO_DIR,
    ]
    return tuple(str(d) for d in dirs)


def _check_keys(
    raw: Mapping[object, object], known: tuple[str, ...], prefix: str, problems: list[str]
) -> None:
    """Report every key of `raw` outside `known`, suggesting the known key it looks like."""
    for name, value in raw.items():
        if name in known:
            continue
        shown = name if isinstance(name, str) else repr(name)
        import difflib  # only for a config with a mistake in it

        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
        problems.append(f"{prefix}{shown}: unknown key{hint}, got {_show(value)}")


# --- one key each ------------------------------------------------------------------------------
# Each returns None for a key that is absent or null (the caller applies the default) and for a
# bad value (after appending the problem).


def _cluster_network(value: object, key: str, problems: list[str]) -> ClusterNetworkRef | None:
    if value is None:
        problems.append(f"{key}: required, {_CLUSTER_NETWORK_FORMS}, got nothing")
        return None
    if not isinstance(value, str) or not value:
        problems.append(f"{key}: must be {_CLUSTER_NETWORK_FORMS}, got {_show(value)}")
        return None
    if value.startswith("/"):
        if "\0" in value or not value.endswith(_CONFIG_EXTENSIONS):
            problems.append(
                f"{key}: a file must be named *{', *'.join(_CONFIG_EXTENSIONS)} (the extensions "
                f"a CNI runtime reads), got {_show(value)}"
            )
            return None
        return ClusterNetworkRef(kind="file", path=Path(value))
    if "/" in value:
        namespace, _, name = value.partition("/")
        bad = [
            f"the {part} {_show(text)}"
            for part, text in (("namespace", namespace), ("name", name))
            if not names.is_label(text)
        ]
        if bad:
            problems.append(
                f"{key}: in a NetworkAttachmentDefinition reference 'namespace/name', "
                f"{' and '.join(bad)} must be a DNS-1123 label ({names.LABEL_RULE}), and a file "
                f"path must start with '/', got {_show(value)}"
            )
            return None
        return ClusterNetworkRef(kind="nad", namespace=namespace, name=name)
    problem = conf.network_name_problem(value)
    if problem is not None:
        problems.append(
            f"{key}: not a CNI network name (a letter or digit, then letters, digits, '_', '.', "
            f"'-'), nor {_CLUSTER_NETWORK_FORMS}, got {_show(value)}"
        )
        return None
    return ClusterNetworkRef(kind="name", name=value)


def _path(value: object, key: str, problems: list[str]) -> Path | None:
    # Absolute only: the daemon and the thin plugin (run by the container runtime) have
    # different working directories, so a relative path would mean two places.
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        problems.append(f"{key}: must be an absolute path, got {_show(value)}")
        return None
    return Path(value)


def _bin_dirs(value: object, key: str, problems: list[str]) -> tuple[Path, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        problems.append(f"{key}: must be a non-empty list of absolute paths, got {_show(value)}")
        return None
    start = len(problems)
    paths: list[Path] = []
    for index, item in enumerate(value):
        item_key = f"{key}[{index}]"
        path = _path(item, item_key, problems)
        if path is None:
            if item is None:
                problems.append(f"{item_key}: must be an absolute path, got None")
            continue
        # CNI spec: CNI_PATH is a ':'-separated list, so a ':' would split one directory in two.
        if ":" in str(path):
            problems.append(
                f"{item_key}: must not contain ':' (CNI_PATH separator), got {_show(item)}"
            )
            continue
        paths.append(path)
    return None if len(problems) > start else tuple(paths)


def _flag(value: object, key: str, problems: list[str]) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    problems.append(f"{key}: must be true or false, got {_show(value)}")
    return None


def _labels(value: object, key: str, problems: list[str]) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        problems.append(f"{key}: must be a list of namespace names, got {_show(value)}")
        return None
    start = len(problems)
    for index, item in enumerate(value):
        if not isinstance(item, str) or not names.is_label(item):
            problems.append(
                f"{key}[{index}]: must be a namespace name, a DNS-1123 label ({names.LABEL_RULE}), "
                f"got {_show(item)}"
            )
    if len(problems) > start:
        return None
    return tuple(str(item) for item in value)


def _timeout(
    value: object, key: str, problems: list[str], *, most: float = MAX_DELEGATE_TIMEOUT
) -> float | None:
    if value is None:
        return None
    # bool is an int to Python, but `true` seconds is a mistake.
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= most
    ):
        problems.append(
            f"{key}: must be a number of seconds, more than 0 and at most {most:g}, "
            f"got {_show(value)}"
        )
        return None
    return float(value)


def _feed(value: object, key: str, problems: list[str]) -> DirectoryFeed | KubernetesFeed | None:
    forms = "{directory: PATH} or {kubernetes: {kubeconfig: PATH}}"
    if value is None:
        # No default: a daemon watching the wrong place would fail every ADD with "pod not
        # found" instead of failing once, at start-up, with this message.
        problems.append(f"{key}: required, one of {forms}, got nothing")
        return None
    if not isinstance(value, Mapping):
        problems.append(f"{key}: must be one of {forms}, got {_show(value)}")
        return None
    _check_keys(value, _FEED_KEYS, f"{key}.", problems)
    given = [name for name in _FEED_KEYS if name in value]
    if len(given) != 1:
        problems.append(
            f"{key}: must have exactly one of 'directory' and 'kubernetes', got {_show(value)}"
        )
        return None
    if given == ["directory"]:
        directory = value["directory"]
        path = _path(directory, f"{key}.directory", problems)
        if directory is None:
            problems.append(f"{key}.directory: must be an absolute path, got None")
        return None if path is None else DirectoryFeed(path=path)
    return _kubernetes_feed(value["kubernetes"], f"{key}.kubernetes", problems)


def _kubernetes_feed(value: object, key: str, problems: list[str]) -> KubernetesFeed | None:
    # `kubernetes: {}` (or a bare `kubernetes:`) is the in-cluster configuration: the pod's
    # service account, as a DaemonSet runs.
    if value is None:
        return KubernetesFeed()
    if not isinstance(value, Mapping):
        problems.append(
            f"{key}: must be a mapping such as {{kubeconfig: PATH}}, got {_show(value)}"
        )
        return None
    start = len(problems)
    _check_keys(value, _KUBERNETES_KEYS, f"{key}.", problems)
    kubeconfig = _path(value.get("kubeconfig"), f"{key}.kubeconfig", problems)
    if len(problems) > start:
        return None
    return KubernetesFeed(kubeconfig=kubeconfig)


def _log_level(value: object, key: str, problems: list[str]) -> LogLevel | None:
    if value is None:
        return None
    for level in LOG_LEVELS:
        if value == level:
            return level
    problems.append(f"{key}: must be one of {', '.join(LOG_LEVELS)}, got {_show(value)}")
    return None


def _loggers(
    value: object, key: str, problems: list[str]
) -> tuple[tuple[str, LogLevel], ...] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(f"{key}: must be a mapping of logger names to levels, got {_show(value)}")
        return None
    named: list[tuple[str, LogLevel]] = []
    for name, level in value.items():
        if not isinstance(name, str) or not re.match(_LOGGER_NAME, name):
            problems.append(f"{key}: {_show(name)} is not a logger name (like httpx2 or a.b)")
            continue
        checked = _log_level(level, f"{key}.{name}", problems)
        if checked is not None:
            named.append((name, checked))
    return tuple(named)


def _node_name(value: object, key: str, problems: list[str], needed: bool) -> str | None:
    # Unlike every other key, a missing nodeName is computed here, not by the caller: it
    # depends on the machine, and when the feed needs it a default that is no Node's name is a
    # problem too.
    if value is None:
        name = default_node_name()
        if needed and not names.is_subdomain(name):
            origin = (
                f"the environment variable {NODE_NAME_ENV}"
                if os.environ.get(NODE_NAME_ENV)
                else "this machine's hostname, lower-cased"
            )
            problems.append(
                f"{key}: not set, and its default ({origin}) is not a Node name, a DNS-1123 "
                f"subdomain ({names.SUBDOMAIN_RULE}), got {_show(name)}"
            )
            return None
        return name
    if not isinstance(value, str) or not names.is_subdomain(value):
        problems.append(
            f"{key}: must be a Node name, a DNS-1123 subdomain ({names.SUBDOMAIN_RULE}), "
            f"got {_show(value)}"
        )
        return None
    return value


def _socket(value: object, key: str, problems: list[str]) -> Path | None:
    path = _path(value, key, problems)
    if path is not None and len(os.fsencode(path)) > _SOCKET_PATH_MAX:
        problems.append(
            f"{key}: a Unix socket's path is at most {_SOCKET_PATH_MAX} bytes, got {_show(value)}"
        )
        return None
    return path


def _count(value: object, key: str, problems: list[str]) -> int | None:
    if value is None:
        return None
    # bool is an int to Python, but `true` delegates is a mistake; a float is refused, even 8.0.
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= MAX_CONCURRENT_DELEGATES
    ):
        problems.append(
            f"{key}: must be a whole number from 1 to {MAX_CONCURRENT_DELEGATES}, "
            f"got {_show(value)}"
        )
        return None
    return value


def _readiness(value: object, key: str, problems: list[str]) -> ReadinessSettings | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(
            f"{key}: must be a mapping such as {{mode: wait, indicatorFile: PATH, timeout: "
            f"SECONDS}}, got {_show(value)}"
        )
        return None
    start = len(problems)
    _check_keys(value, _READINESS_KEYS, f"{key}.", problems)
    mode = _readiness_mode(value.get("mode"), f"{key}.mode", problems)
    indicator_file = _path(value.get("indicatorFile"), f"{key}.indicatorFile", problems)
    timeout = _timeout(value.get("timeout"), f"{key}.timeout", problems, most=MAX_READINESS_TIMEOUT)
    if len(problems) > start:
        return None
    return ReadinessSettings(
        mode="wait" if mode is None else mode,
        indicator_file=indicator_file,
        timeout=DEFAULT_READINESS_TIMEOUT if timeout is None else timeout,
    )


def _readiness_mode(value: object, key: str, problems: list[str]) -> ReadinessMode | None:
    if value is None:
        return None
    for mode in READINESS_MODES:
        if value == mode:
            return mode
    problems.append(f"{key}: must be one of {', '.join(READINESS_MODES)}, got {_show(value)}")
    return None


def _metrics(value: object, key: str, problems: list[str]) -> MetricsSettings | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(
            f"{key}: must be a mapping such as {{address: '{DEFAULT_METRICS_ADDRESS}', enabled: "
            f"true}}, got {_show(value)}"
        )
        return None
    start = len(problems)
    _check_keys(value, _METRICS_KEYS, f"{key}.", problems)
    address = _address(value.get("address"), f"{key}.address", problems)
    enabled = _flag(value.get("enabled"), f"{key}.enabled", problems)
    if len(problems) > start:
        return None
    return MetricsSettings(
        address=DEFAULT_METRICS_ADDRESS if address is None else address,
        enabled=True if enabled is None else enabled,
    )


def _policy(value: object, key: str, problems: list[str]) -> PolicySettings | None:
    enabled = _switch(value, key, _POLICY_KEYS, problems)
    return None if enabled is None else PolicySettings(enabled=enabled)


def _hotplug(value: object, key: str, problems: list[str]) -> HotPlugSettings | None:
    enabled = _switch(value, key, _HOTPLUG_KEYS, problems)
    return None if enabled is None else HotPlugSettings(enabled=enabled)


def _switch(value: object, key: str, known: tuple[str, ...], problems: list[str]) -> bool | None:
    """A `{enabled: BOOL}` section: its flag (True when left out); None when absent or bad."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(f"{key}: must be a mapping such as {{enabled: true}}, got {_show(value)}")
        return None
    start = len(problems)
    _check_keys(value, known, f"{key}.", problems)
    enabled = _flag(value.get("enabled"), f"{key}.enabled", problems)
    if len(problems) > start:
        return None
    return True if enabled is None else enabled


def _address(value: object, key: str, problems: list[str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        problems.append(f"{key}: must be {_ADDRESS_FORM}, got {_show(value)}")
        return None
    try:
        _split_address(value)
    except ValueError:
        problems.append(f"{key}: must be {_ADDRESS_FORM}, got {_show(value)}")
        return None
    return value


def _split_address(address: str) -> tuple[str, int]:
    """`address` ("host:port", "[v6]:port") as (host, port); ValueError when it is neither."""
    host, colon, port = address.rpartition(":")
    if not colon or re.fullmatch(_PORT, port) is None or not 1 <= int(port) <= 65535:
        raise ValueError(f"not {_ADDRESS_FORM}: {address!r}")
    if host.startswith("[") and host.endswith("]"):
        ipaddress.IPv6Address(host[1:-1])  # raises ValueError
        return host[1:-1], int(port)
    if not _is_host(host):
        raise ValueError(f"not {_ADDRESS_FORM}: {address!r}")
    return host, int(port)


def _is_host(text: str) -> bool:
    # Digits and dots are an IPv4 address or nothing: '300.1.1.1' is no hostname either.
    if re.fullmatch(r"[0-9.]+", text):
        try:
            ipaddress.IPv4Address(text)
        except ValueError:
            return False
        return True
    return names.is_subdomain(text.lower())


def _show(value: object) -> str:
    shown = _REPR.repr(value)
    if len(shown) > _SHOW_CHARS:
        return shown[:_SHOW_CHARS] + "..."
    return shown
