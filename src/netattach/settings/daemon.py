"""The node daemon's own settings: who it is, where it listens, what it installs, its loops.

    nodeName                 this node's name (the Kubernetes feed watches its pods)
    daemonSocket             where the shim finds the daemon
    cniConfDir, cniBinDir    where the config and the shim are installed (standard §6.1)
    maxConcurrentDelegates   delegates run at once
    memoryWaitEvent          seconds a pod's delegates wait for memory before it gets an Event
    readiness                when the cluster default network counts as ready (DEF-READY)
    cleanupOnExit            remove the installed config at exit
    hotplug                  RT-HOTPLUG on or off
(`metrics` is read in `settings.metrics`, `policy` in `settings.policy`.)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from netattach import names
from netattach.settings import fields
from netattach.settings import metrics as metrics_mod
from netattach.settings import policy as policy_mod
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, Literal

    ReadinessMode = Literal["wait", "block"]

DEFAULT_SOCKET: Final = Path("/run/netattach/netattach.sock")
DEFAULT_CNI_CONF_DIR: Final = Path("/etc/cni/net.d")
DEFAULT_CNI_BIN_DIR: Final = Path("/opt/cni/bin")
DEFAULT_MAX_CONCURRENT_DELEGATES: Final = 8
MAX_CONCURRENT_DELEGATES: Final = 1024
DEFAULT_READINESS_TIMEOUT: Final = 300.0
# A day: a default network that has not come up by then will not; the bound also catches
# milliseconds written where seconds are meant.
MAX_READINESS_TIMEOUT: Final = 86400.0
# The environment variable the DaemonSet sets from the downward API (spec.nodeName).
NODE_NAME_ENV: Final = "NODE_NAME"
READINESS_MODES: Final[tuple[ReadinessMode, ...]] = ("wait", "block")

_READINESS_KEYS: Final = ("mode", "indicatorFile", "timeout")
_HOTPLUG_KEYS: Final = ("enabled",)
# Linux: sockaddr_un.sun_path is 108 bytes, the last a NUL.
_SOCKET_PATH_MAX: Final = 107


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


class HotPlugSettings(NamedTuple):
    """Dynamic networks (RT-HOTPLUG): an edit of a running pod's selection annotation adds and
    removes its attachments to match."""

    enabled: bool = True


DEFAULT_MEMORY_WAIT_EVENT = 10.0
MAX_MEMORY_WAIT_EVENT = 3600.0


class DaemonSettings(NamedTuple):
    """The node daemon's own settings: who it is, where it listens, what it installs."""

    node_name: str
    socket: Path = DEFAULT_SOCKET
    # The runtime's CNI config directory, where our config is installed (standard §6.1).
    cni_conf_dir: Path = DEFAULT_CNI_CONF_DIR
    # Where the shim is installed, for the runtime to run.
    cni_bin_dir: Path = DEFAULT_CNI_BIN_DIR
    max_concurrent_delegates: int = DEFAULT_MAX_CONCURRENT_DELEGATES
    # REL-BURST: a pod whose ADD's delegates waited this long for memory gets an Event
    memory_wait_event: float = DEFAULT_MEMORY_WAIT_EVENT
    readiness: ReadinessSettings = ReadinessSettings()
    metrics: metrics_mod.MetricsSettings = metrics_mod.MetricsSettings()
    cleanup_on_exit: bool = False
    policy: policy_mod.PolicySettings = policy_mod.PolicySettings()
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


def node_name(value: object, key: str, problems: list[str], needed: bool) -> str | None:
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
                f"subdomain ({names.SUBDOMAIN_RULE}), got {fields.show(name)}"
            )
            return None
        return name
    if not isinstance(value, str) or not names.is_subdomain(value):
        problems.append(
            f"{key}: must be a Node name, a DNS-1123 subdomain ({names.SUBDOMAIN_RULE}), "
            f"got {fields.show(value)}"
        )
        return None
    return value


def socket(value: object, key: str, problems: list[str]) -> Path | None:
    path = fields.path(value, key, problems)
    if path is not None and len(os.fsencode(path)) > _SOCKET_PATH_MAX:
        problems.append(
            f"{key}: a Unix socket's path is at most {_SOCKET_PATH_MAX} bytes, "
            f"got {fields.show(value)}"
        )
        return None
    return path


def delegate_count(value: object, key: str, problems: list[str]) -> int | None:
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
            f"got {fields.show(value)}"
        )
        return None
    return value


def readiness(value: object, key: str, problems: list[str]) -> ReadinessSettings | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(
            f"{key}: must be a mapping such as {{mode: wait, indicatorFile: PATH, timeout: "
            f"SECONDS}}, got {fields.show(value)}"
        )
        return None
    start = len(problems)
    fields.check_keys(value, _READINESS_KEYS, f"{key}.", problems)
    mode = _readiness_mode(value.get("mode"), f"{key}.mode", problems)
    indicator_file = fields.path(value.get("indicatorFile"), f"{key}.indicatorFile", problems)
    timeout = fields.seconds(
        value.get("timeout"), f"{key}.timeout", problems, most=MAX_READINESS_TIMEOUT
    )
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
    problems.append(f"{key}: must be one of {', '.join(READINESS_MODES)}, got {fields.show(value)}")
    return None


def hotplug(value: object, key: str, problems: list[str]) -> HotPlugSettings | None:
    enabled = fields.switch(value, key, _HOTPLUG_KEYS, problems)
    return None if enabled is None else HotPlugSettings(enabled=enabled)
