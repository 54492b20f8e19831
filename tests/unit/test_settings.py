"""Tests of netattach.settings: the node's settings file, every key checked at once.

Files are real files in tmp_path; the thin plugin's CNI config is the dict the runtime would send.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.cni import errors
from netattach.guard import delegate_policy
from netattach.settings import cni_config, log_levels, settings
from netattach.settings import daemon as daemon_settings
from netattach.settings import feed as feed_settings
from netattach.settings import metrics as metrics_settings
from netattach.settings import network as network_settings
from netattach.settings import policy as policy_settings
from netattach.settings import runtime as runtime_settings

SOURCE = "/etc/netattach/config.yaml"
NODE = "node-a"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


@pytest.fixture(autouse=True, scope="module")
def _node_name_from_the_environment() -> Iterator[None]:
    # nodeName's default is read from the machine; pin it, so that no test depends on the
    # hostname of whatever runs it. Module-scoped, so Hypothesis tests may use it too.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NODE_NAME", NODE)
        yield


def _minimal(**extra: Any) -> dict[str, Any]:
    """The shortest valid settings: what has no default, plus `extra`."""
    return {"clusterNetwork": "flannel", "feed": {"directory": "/etc/netattach/cluster"}, **extra}


def _problems_of(raw: object) -> list[str]:
    """The problems `parse_settings` raises, checking the error's shape on the way."""
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        settings.parse_settings(raw, source=SOURCE)
    assert info.value.code == 7
    assert info.value.msg.startswith(f"{SOURCE}: invalid netattach settings")
    problems = info.value.details.split("; ")
    assert problems == list(settings.settings_problems(raw))
    return problems


# ---------------------------------------------------------------------------------------------
# Defaults


def test_only_the_required_keys_give_every_default() -> None:
    parsed = settings.parse_settings(_minimal(), source=SOURCE)
    assert parsed.source == SOURCE
    assert parsed.networks.cluster_network == network_settings.ClusterNetworkRef(
        kind="name", name="flannel"
    )
    assert parsed.networks.networks_dir == Path("/etc/cni/netattach.d")
    assert parsed.networks.namespace_isolation is True
    assert parsed.networks.global_namespaces == ("default",)
    assert parsed.runtime.bin_dirs == (Path("/opt/cni/bin"),)
    assert parsed.runtime.state_dir == Path("/var/lib/netattach")
    assert parsed.runtime.delegate_timeout == 60.0
    assert parsed.feed == feed_settings.DirectoryFeed(path=Path("/etc/netattach/cluster"))
    assert parsed.logging.level == "info"
    assert parsed.daemon.node_name == NODE
    assert parsed.daemon.socket == Path("/run/netattach/netattach.sock")
    assert parsed.daemon.cni_conf_dir == Path("/etc/cni/net.d")
    assert parsed.daemon.cni_bin_dir == Path("/opt/cni/bin")
    assert parsed.daemon.max_concurrent_delegates == 8
    assert parsed.daemon.readiness == daemon_settings.ReadinessSettings(
        mode="wait", indicator_file=None, timeout=300.0
    )
    assert parsed.daemon.metrics == metrics_settings.MetricsSettings(
        address="127.0.0.1:9108", enabled=True
    )
    assert parsed.daemon.cleanup_on_exit is False


def test_null_keys_take_their_defaults() -> None:
    # Templating tools write an unset value as null; that is "not given", not a bad value.
    raw = _minimal(
        networksDir=None,
        binDirs=None,
        stateDir=None,
        namespaceIsolation=None,
        globalNamespaces=None,
        delegateTimeout=None,
        logLevel=None,
        nodeName=None,
        daemonSocket=None,
        cniConfDir=None,
        cniBinDir=None,
        maxConcurrentDelegates=None,
        readiness=None,
        metrics=None,
        cleanupOnExit=None,
    )
    assert settings.parse_settings(raw, source=SOURCE) == settings.parse_settings(
        _minimal(), source=SOURCE
    )


def test_every_key_given_is_read_into_its_group() -> None:
    raw = {
        "clusterNetwork": "kube-system/cluster-net",
        "networksDir": "/etc/cni/multi.d",
        "binDirs": ["/opt/cni/bin", "/usr/lib/cni"],
        "stateDir": "/run/netattach",
        "namespaceIsolation": False,
        "globalNamespaces": ["default", "shared-nets"],
        "delegateTimeout": 2.5,
        "feed": {"kubernetes": {"kubeconfig": "/etc/kubernetes/kubelet.conf"}},
        "logLevel": "debug",
        "nodeName": "worker-7.example.com",
        "daemonSocket": "/var/run/netattach/daemon.sock",
        "cniConfDir": "/etc/cni/multus.d",
        "cniBinDir": "/usr/libexec/cni",
        "maxConcurrentDelegates": 32,
        "readiness": {"mode": "block", "indicatorFile": "/run/flannel/subnet.env", "timeout": 90},
        "metrics": {"address": "[::]:9200", "enabled": False},
        "cleanupOnExit": True,
    }
    parsed = settings.parse_settings(raw, source=SOURCE)
    assert parsed == settings.Settings(
        networks=network_settings.NetworkSettings(
            cluster_network=network_settings.ClusterNetworkRef(
                kind="nad", namespace="kube-system", name="cluster-net"
            ),
            networks_dir=Path("/etc/cni/multi.d"),
            namespace_isolation=False,
            global_namespaces=("default", "shared-nets"),
            # SEC-NODE: netattach's own directories, wherever the settings put them.
            delegate_policy=delegate_policy.DEFAULT_POLICY.with_protected(
                ("/usr/libexec/cni", "/var/run/netattach")
            ),
        ),
        runtime=runtime_settings.RuntimeSettings(
            bin_dirs=(Path("/opt/cni/bin"), Path("/usr/lib/cni")),
            state_dir=Path("/run/netattach"),
            delegate_timeout=2.5,
        ),
        feed=feed_settings.KubernetesFeed(kubeconfig=Path("/etc/kubernetes/kubelet.conf")),
        logging=log_levels.LoggingSettings(level="debug"),
        daemon=daemon_settings.DaemonSettings(
            node_name="worker-7.example.com",
            socket=Path("/var/run/netattach/daemon.sock"),
            cni_conf_dir=Path("/etc/cni/multus.d"),
            cni_bin_dir=Path("/usr/libexec/cni"),
            max_concurrent_delegates=32,
            readiness=daemon_settings.ReadinessSettings(
                mode="block", indicator_file=Path("/run/flannel/subnet.env"), timeout=90.0
            ),
            metrics=metrics_settings.MetricsSettings(address="[::]:9200", enabled=False),
            cleanup_on_exit=True,
        ),
        source=SOURCE,
    )


def test_settings_are_frozen() -> None:
    parsed = settings.parse_settings(_minimal(), source=SOURCE)
    with pytest.raises(AttributeError):
        parsed.runtime.delegate_timeout = 1.0  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# clusterNetwork: three forms


@pytest.mark.parametrize(
    ("written", "expected", "shown"),
    [
        (
            "kube-system/cluster-net",
            network_settings.ClusterNetworkRef(
                kind="nad", namespace="kube-system", name="cluster-net"
            ),
            "kube-system/cluster-net",
        ),
        ("flannel", network_settings.ClusterNetworkRef(kind="name", name="flannel"), "flannel"),
        (
            "cni0_v2.net",
            network_settings.ClusterNetworkRef(kind="name", name="cni0_v2.net"),
            "cni0_v2.net",
        ),
        (
            "/etc/cni/net.d/10-flannel.conflist",
            network_settings.ClusterNetworkRef(
                kind="file", path=Path("/etc/cni/net.d/10-flannel.conflist")
            ),
            "/etc/cni/net.d/10-flannel.conflist",
        ),
        (
            "/etc/cni/net.d/10-bridge.conf",
            network_settings.ClusterNetworkRef(
                kind="file", path=Path("/etc/cni/net.d/10-bridge.conf")
            ),
            "/etc/cni/net.d/10-bridge.conf",
        ),
        (
            "/etc/cni/net.d/10-bridge.json",
            network_settings.ClusterNetworkRef(
                kind="file", path=Path("/etc/cni/net.d/10-bridge.json")
            ),
            "/etc/cni/net.d/10-bridge.json",
        ),
    ],
    ids=["nad", "name", "name-with-dots", "conflist", "conf", "json"],
)
def test_cluster_network_forms(
    written: str, expected: network_settings.ClusterNetworkRef, shown: str
) -> None:
    parsed = settings.parse_settings(_minimal(clusterNetwork=written), source=SOURCE)
    assert parsed.networks.cluster_network == expected
    assert str(parsed.networks.cluster_network) == shown


@pytest.mark.parametrize(
    ("written", "reason"),
    [
        (None, "required"),
        ("", "must be 'namespace/name'"),
        (42, "must be 'namespace/name'"),
        (["kube-system/net"], "must be 'namespace/name'"),
        ("Kube-System/net", "the namespace 'Kube-System' must be a DNS-1123 label"),
        ("kube-system/Net_1", "the name 'Net_1' must be a DNS-1123 label"),
        ("ns/", "the name '' must be a DNS-1123 label"),
        ("/net", "a file must be named *.conf, *.json, *.conflist"),
        ("a/b/c", "the name 'b/c' must be a DNS-1123 label"),
        ("net.d/10-flannel.conf", "a file path must start with '/'"),
        ("/etc/cni/net.d/10-flannel.yaml", "a file must be named *.conf, *.json, *.conflist"),
        ("-flannel", "not a CNI network name"),
        ("flannel net", "not a CNI network name"),
    ],
    ids=[
        "missing",
        "empty",
        "number",
        "list",
        "namespace-case",
        "name-underscore",
        "no-name",
        "path-without-extension",
        "two-slashes",
        "relative-path",
        "wrong-extension",
        "leading-dash",
        "space",
    ],
)
def test_a_bad_cluster_network_is_reported_quoting_it(written: object, reason: str) -> None:
    raw = _minimal(clusterNetwork=written)
    (problem,) = _problems_of(raw)
    assert problem.startswith("clusterNetwork: ")
    assert reason in problem
    assert problem.endswith("got nothing" if written is None else f"got {written!r}")


# ---------------------------------------------------------------------------------------------
# The other keys, one bad value each


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("networksDir", "etc/cni", "networksDir: must be an absolute path, got 'etc/cni'"),
        ("networksDir", 7, "networksDir: must be an absolute path, got 7"),
        ("stateDir", "./state", "stateDir: must be an absolute path, got './state'"),
        ("stateDir", "/var/\0lib", "stateDir: must be an absolute path, got '/var/\\x00lib'"),
        ("binDirs", [], "binDirs: must be a non-empty list of absolute paths, got []"),
        (
            "binDirs",
            "/opt/cni/bin",
            "binDirs: must be a non-empty list of absolute paths, got '/opt/cni/bin'",
        ),
        ("binDirs", ["/opt/cni/bin", "bin"], "binDirs[1]: must be an absolute path, got 'bin'"),
        ("binDirs", [None], "binDirs[0]: must be an absolute path, got None"),
        (
            "binDirs",
            ["/opt/cni/bin:/usr/lib/cni"],
            "binDirs[0]: must not contain ':' (CNI_PATH separator), "
            "got '/opt/cni/bin:/usr/lib/cni'",
        ),
        ("namespaceIsolation", "yes", "namespaceIsolation: must be true or false, got 'yes'"),
        ("namespaceIsolation", 1, "namespaceIsolation: must be true or false, got 1"),
        (
            "globalNamespaces",
            "default",
            "globalNamespaces: must be a list of namespace names, got 'default'",
        ),
        (
            "globalNamespaces",
            ["default", "Shared"],
            "globalNamespaces[1]: must be a namespace name, a DNS-1123 label (at most 63 "
            "lower-case letters, digits and '-', starting and ending with a letter or digit), "
            "got 'Shared'",
        ),
        (
            "globalNamespaces",
            ["x" * 64],
            "globalNamespaces[0]: must be a namespace name, a DNS-1123 label (at most 63 "
            "lower-case letters, digits and '-', starting and ending with a letter or digit), "
            f"got {'x' * 64!r}",
        ),
        (
            "delegateTimeout",
            0,
            "delegateTimeout: must be a number of seconds, more than 0 and at most 3600, got 0",
        ),
        (
            "delegateTimeout",
            -1.5,
            "delegateTimeout: must be a number of seconds, more than 0 and at most 3600, got -1.5",
        ),
        (
            "delegateTimeout",
            3600.5,
            "delegateTimeout: must be a number of seconds, more than 0 and at most 3600, "
            "got 3600.5",
        ),
        (
            "delegateTimeout",
            float("inf"),
            "delegateTimeout: must be a number of seconds, more than 0 and at most 3600, got inf",
        ),
        (
            "delegateTimeout",
            "60s",
            "delegateTimeout: must be a number of seconds, more than 0 and at most 3600, got '60s'",
        ),
        (
            "delegateTimeout",
            True,
            "delegateTimeout: must be a number of seconds, more than 0 and at most 3600, got True",
        ),
        ("logLevel", "INFO", "logLevel: must be one of debug, info, warning, error, got 'INFO'"),
        ("logLevel", "trace", "logLevel: must be one of debug, info, warning, error, got 'trace'"),
        ("logLevel", False, "logLevel: must be one of debug, info, warning, error, got False"),
        ("loggers", "debug", "loggers: must be a mapping of logger names to levels, got 'debug'"),
        (
            "loggers",
            {"httpx2": "verbose"},
            "loggers.httpx2: must be one of debug, info, warning, error, got 'verbose'",
        ),
        ("loggers", {"a b": "debug"}, "loggers: 'a b' is not a logger name (like httpx2 or a.b)"),
    ],
)
def test_a_bad_value_is_one_problem_naming_the_key_and_quoting_the_value(
    key: str, value: object, problem: str
) -> None:
    assert _problems_of(_minimal(**{key: value})) == [problem]


@pytest.mark.parametrize(
    ("key", "value", "read"),
    [
        ("delegateTimeout", 3600, 3600.0),
        ("delegateTimeout", 0.001, 0.001),
        ("delegateTimeout", 1, 1.0),
        ("globalNamespaces", [], ()),
        ("namespaceIsolation", False, False),
        ("logLevel", "warning", "warning"),
        ("logLevel", "error", "error"),
    ],
)
def test_edge_values_are_accepted(key: str, value: object, read: object) -> None:
    parsed = settings.parse_settings(_minimal(**{key: value}), source=SOURCE)
    attribute = {
        "delegateTimeout": parsed.runtime.delegate_timeout,
        "globalNamespaces": parsed.networks.global_namespaces,
        "namespaceIsolation": parsed.networks.namespace_isolation,
        "logLevel": parsed.logging.level,
    }[key]
    assert attribute == read


# ---------------------------------------------------------------------------------------------
# All problems at once; unknown keys


def test_every_problem_is_reported_in_one_error_naming_the_file() -> None:
    raw = {
        "clusterNetwork": "Bad/Ref",
        "binDirs": ["relative"],
        "delegateTimeout": 0,
        "logLevel": "loud",
        "feed": {"directory": "cluster"},
    }
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        settings.parse_settings(raw, source=SOURCE)
    assert info.value.msg == f"{SOURCE}: invalid netattach settings (5 problems)"
    problems = info.value.details.split("; ")
    assert [p.split(":")[0] for p in problems] == [
        "clusterNetwork",
        "binDirs[0]",
        "delegateTimeout",
        "feed.directory",
        "logLevel",
    ]
    assert "got 'Bad/Ref'" in problems[0]
    assert problems[3] == "feed.directory: must be an absolute path, got 'cluster'"


def test_a_mistyped_key_is_refused_with_the_key_it_resembles() -> None:
    (problem,) = _problems_of(_minimal(delegateTimout=30))
    assert problem == "delegateTimout: unknown key (did you mean 'delegateTimeout'?), got 30"


def test_an_unknown_key_unlike_any_lists_the_known_ones() -> None:
    (problem,) = _problems_of(_minimal(color="blue"))
    assert problem.startswith("color: unknown key (known: clusterNetwork, networksDir, binDirs")
    assert problem.endswith("got 'blue'")


def test_a_non_string_key_is_unknown_too() -> None:
    raw: dict[Any, Any] = {**_minimal(), 3: "x"}
    (problem,) = _problems_of(raw)
    assert problem.startswith("3: unknown key")


@given(
    st.sets(
        st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1).filter(
            lambda key: key not in settings.KEYS
        ),
        min_size=1,
        max_size=5,
    )
)
def test_each_unknown_key_is_named_once(keys: set[str]) -> None:
    raw = {**_minimal(), **{key: 1 for key in keys}}
    problems = settings.settings_problems(raw)
    assert sorted(p.split(": unknown key")[0] for p in problems) == sorted(keys)


@pytest.mark.parametrize("raw", [None, [], "clusterNetwork: x", 5], ids=repr)
def test_a_document_that_is_not_a_mapping_is_one_problem(raw: object) -> None:
    (problem,) = _problems_of(raw)
    assert problem.startswith("settings: must be a mapping of settings keys (clusterNetwork, ")
    assert problem.endswith(f"got {raw!r}")


def test_loggers_name_other_libraries_levels() -> None:
    parsed = settings.parse_settings(
        _minimal(loggers={"httpx2": "debug", "netattach.cluster.kube": "info"}), source=SOURCE
    )
    assert parsed.logging.loggers == (("httpx2", "debug"), ("netattach.cluster.kube", "info"))
    assert settings.parse_settings(_minimal(), source=SOURCE).logging.loggers == ()


def test_valid_settings_have_no_problems() -> None:
    assert settings.settings_problems(_minimal()) == ()


# ---------------------------------------------------------------------------------------------
# feed


@pytest.mark.parametrize(
    ("feed", "expected"),
    [
        ({"directory": "/srv/cluster"}, feed_settings.DirectoryFeed(path=Path("/srv/cluster"))),
        (
            {"kubernetes": {"kubeconfig": "/etc/netattach/kubeconfig"}},
            feed_settings.KubernetesFeed(kubeconfig=Path("/etc/netattach/kubeconfig")),
        ),
        ({"kubernetes": {}}, feed_settings.KubernetesFeed(kubeconfig=None)),
        ({"kubernetes": None}, feed_settings.KubernetesFeed(kubeconfig=None)),
    ],
    ids=["directory", "kubeconfig", "in-cluster", "in-cluster-bare"],
)
def test_feed_forms(feed: dict[str, Any], expected: object) -> None:
    assert settings.parse_settings(_minimal(feed=feed), source=SOURCE).feed == expected


@pytest.mark.parametrize(
    ("feed", "problems"),
    [
        (
            None,
            [
                "feed: required, one of {directory: PATH} or {kubernetes: {kubeconfig: PATH}}, "
                "got nothing"
            ],
        ),
        (
            "/srv/cluster",
            [
                "feed: must be one of {directory: PATH} or {kubernetes: {kubeconfig: PATH}}, "
                "got '/srv/cluster'"
            ],
        ),
        ({}, ["feed: must have exactly one of 'directory' and 'kubernetes', got {}"]),
        (
            {"directory": "/srv/cluster", "kubernetes": {}},
            [
                "feed: must have exactly one of 'directory' and 'kubernetes', "
                "got {'directory': '/srv/cluster', 'kubernetes': {}}"
            ],
        ),
        ({"directory": None}, ["feed.directory: must be an absolute path, got None"]),
        ({"directory": "cluster/"}, ["feed.directory: must be an absolute path, got 'cluster/'"]),
        (
            {"kubernetes": {"kubeconfig": "kubeconfig"}},
            ["feed.kubernetes.kubeconfig: must be an absolute path, got 'kubeconfig'"],
        ),
        (
            {"kubernetes": "/etc/kubeconfig"},
            [
                "feed.kubernetes: must be a mapping such as {kubeconfig: PATH}, "
                "got '/etc/kubeconfig'"
            ],
        ),
        (
            {"kubernetes": {"kubeConfig": "/etc/kubeconfig"}},
            [
                "feed.kubernetes.kubeConfig: unknown key (did you mean 'kubeconfig'?), "
                "got '/etc/kubeconfig'"
            ],
        ),
        (
            {"directroy": "/srv/cluster"},
            [
                "feed.directroy: unknown key (did you mean 'directory'?), got '/srv/cluster'",
                "feed: must have exactly one of 'directory' and 'kubernetes', "
                "got {'directroy': '/srv/cluster'}",
            ],
        ),
    ],
    ids=[
        "missing",
        "a-string",
        "empty",
        "both",
        "null-directory",
        "relative-directory",
        "relative-kubeconfig",
        "kubernetes-string",
        "kubeconfig-typo",
        "directory-typo",
    ],
)
def test_bad_feeds(feed: object, problems: list[str]) -> None:
    raw = _minimal()
    if feed is None:
        del raw["feed"]
    else:
        raw["feed"] = feed
    assert _problems_of(raw) == problems


# ---------------------------------------------------------------------------------------------
# The node daemon's keys


def _uname(nodename: str) -> os.uname_result:
    """os.uname() on a machine called `nodename` (the hostname)."""
    return os.uname_result(("Linux", nodename, "6.1.0", "#1 SMP", "x86_64"))


def test_the_node_name_defaults_to_the_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NODE_NAME", "worker-3")
    monkeypatch.setattr(os, "uname", lambda: _uname("not-this-one"))
    assert settings.parse_settings(_minimal(), source=SOURCE).daemon.node_name == "worker-3"


@pytest.mark.parametrize("env", [None, ""], ids=["unset", "empty"])
def test_without_node_name_the_hostname_is_used_lower_cased_as_the_kubelet_does(
    monkeypatch: pytest.MonkeyPatch, env: str | None
) -> None:
    if env is None:
        monkeypatch.delenv("NODE_NAME")
    else:
        monkeypatch.setenv("NODE_NAME", env)
    monkeypatch.setattr(os, "uname", lambda: _uname("Worker-1.Example.COM"))
    parsed = settings.parse_settings(_minimal(), source=SOURCE)
    assert parsed.daemon.node_name == "worker-1.example.com"
    assert daemon_settings.default_node_name() == "worker-1.example.com"


def test_node_name_in_the_file_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "worker-3")
    parsed = settings.parse_settings(_minimal(nodeName="worker-9"), source=SOURCE)
    assert parsed.daemon.node_name == "worker-9"


def test_an_invalid_node_name_from_the_environment_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NODE_NAME", "Worker_3")
    assert settings.settings_problems(_minimal()) == ()  # the directory feed does not need it
    assert _problems_of(_minimal(feed={"kubernetes": {}})) == [
        "nodeName: not set, and its default (the environment variable NODE_NAME) is not a Node "
        "name, a DNS-1123 subdomain (at most 253 lower-case letters, digits, '-' and '.', "
        "starting and ending with a letter or digit), got 'Worker_3'"
    ]
    # Set in the file, it is not looked at.
    assert settings.settings_problems(_minimal(nodeName="worker-3")) == ()


def test_an_invalid_hostname_is_reported_when_no_node_name_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NODE_NAME")
    monkeypatch.setattr(os, "uname", lambda: _uname("build_host"))
    assert settings.settings_problems(_minimal()) == ()  # the directory feed does not need it
    (problem,) = _problems_of(_minimal(feed={"kubernetes": {}}))
    assert problem.startswith(
        "nodeName: not set, and its default (this machine's hostname, lower-cased) is not a Node "
        "name"
    )
    assert problem.endswith("got 'build_host'")


def test_settings_built_by_hand_get_the_daemon_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "worker-5")
    built = settings.Settings(
        networks=network_settings.NetworkSettings(
            cluster_network=network_settings.ClusterNetworkRef(kind="name", name="flannel")
        ),
        feed=feed_settings.DirectoryFeed(path=Path("/srv/cluster")),
    )
    assert built.daemon == daemon_settings.DaemonSettings(node_name="worker-5")


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        (
            "nodeName",
            "Worker-1",
            "nodeName: must be a Node name, a DNS-1123 subdomain (at most 253 lower-case letters, "
            "digits, '-' and '.', starting and ending with a letter or digit), got 'Worker-1'",
        ),
        ("nodeName", "worker_1", "got 'worker_1'"),
        ("nodeName", "worker-", "got 'worker-'"),
        ("nodeName", "worker..1", "got 'worker..1'"),
        ("nodeName", "", "got ''"),
        ("nodeName", 7, "got 7"),
        ("nodeName", "a" * 254, "got '" + "a" * 20),
        ("daemonSocket", "run/netattach.sock", "daemonSocket: must be an absolute path, got "),
        ("daemonSocket", 5, "daemonSocket: must be an absolute path, got 5"),
        (
            "daemonSocket",
            "/run/" + "s" * 103,
            "daemonSocket: a Unix socket's path is at most 107 bytes, got '/run/sss",
        ),
        ("cniConfDir", "net.d", "cniConfDir: must be an absolute path, got 'net.d'"),
        ("cniConfDir", ["/etc/cni/net.d"], "cniConfDir: must be an absolute path, got ['/etc/"),
        ("cniBinDir", "bin", "cniBinDir: must be an absolute path, got 'bin'"),
        (
            "maxConcurrentDelegates",
            0,
            "maxConcurrentDelegates: must be a whole number from 1 to 1024, got 0",
        ),
        ("maxConcurrentDelegates", 1025, "got 1025"),
        ("maxConcurrentDelegates", -3, "got -3"),
        ("maxConcurrentDelegates", 8.0, "got 8.0"),
        ("maxConcurrentDelegates", True, "got True"),
        ("maxConcurrentDelegates", "8", "got '8'"),
        (
            "readiness",
            "wait",
            "readiness: must be a mapping such as {mode: wait, indicatorFile: PATH, timeout: "
            "SECONDS}, got 'wait'",
        ),
        (
            "readiness",
            {"mode": "Wait"},
            "readiness.mode: must be one of wait, block, got 'Wait'",
        ),
        ("readiness", {"mode": True}, "readiness.mode: must be one of wait, block, got True"),
        (
            "readiness",
            {"indicatorFile": "ready"},
            "readiness.indicatorFile: must be an absolute path, got 'ready'",
        ),
        (
            "readiness",
            {"timeout": 0},
            "readiness.timeout: must be a number of seconds, more than 0 and at most 86400, got 0",
        ),
        ("readiness", {"timeout": 86400.5}, "got 86400.5"),
        ("readiness", {"timeout": float("nan")}, "got nan"),
        ("readiness", {"timeout": True}, "got True"),
        ("readiness", {"timeout": "5m"}, "got '5m'"),
        (
            "metrics",
            "127.0.0.1:9108",
            "metrics: must be a mapping such as {address: '127.0.0.1:9108', enabled: true}, "
            "got '127.0.0.1:9108'",
        ),
        (
            "metrics",
            {"address": "::1:9108"},
            "metrics.address: must be host:port, an IPv6 address in brackets ('[::1]:9108'), the "
            "port from 1 to 65535, got '::1:9108'",
        ),
        ("metrics", {"address": "127.0.0.1"}, "got '127.0.0.1'"),
        ("metrics", {"address": "127.0.0.1:0"}, "got '127.0.0.1:0'"),
        ("metrics", {"address": "127.0.0.1:65536"}, "got '127.0.0.1:65536'"),
        ("metrics", {"address": "127.0.0.1:http"}, "got '127.0.0.1:http'"),
        ("metrics", {"address": ":9108"}, "got ':9108'"),
        ("metrics", {"address": "300.1.1.1:9108"}, "got '300.1.1.1:9108'"),
        ("metrics", {"address": "[127.0.0.1]:9108"}, "got '[127.0.0.1]:9108'"),
        ("metrics", {"address": "[::1:9108"}, "got '[::1:9108'"),
        ("metrics", {"address": "metrics_host:9108"}, "got 'metrics_host:9108'"),
        ("metrics", {"address": 9108}, "got 9108"),
        ("metrics", {"enabled": "yes"}, "metrics.enabled: must be true or false, got 'yes'"),
        ("cleanupOnExit", "true", "cleanupOnExit: must be true or false, got 'true'"),
        ("cleanupOnExit", 1, "cleanupOnExit: must be true or false, got 1"),
        (
            "policy",
            {"peers": "controler"},
            "policy.peers: must be 'allPods' or 'controller', got 'controler'",
        ),
        ("policy", {"peers": True}, "policy.peers: must be 'allPods' or 'controller', got True"),
        (
            "policy",
            {"unpublishedGroups": "open"},
            "policy.unpublishedGroups: must be 'failClosed' or 'failOpen', got 'open'",
        ),
    ],
)
def test_a_bad_daemon_value_is_one_problem_naming_the_key(
    key: str, value: object, problem: str
) -> None:
    (found,) = _problems_of(_minimal(**{key: value}))
    assert found.split(":")[0].startswith(key)
    assert problem in found
    # A value is quoted whole or cut short, never so long that it drowns the message.
    assert len(found) < 400


@pytest.mark.parametrize(
    ("key", "value", "read"),
    [
        ("nodeName", "a", "a"),
        ("nodeName", "ip-10-0-0-1.eu-west-1.compute.internal", None),
        ("nodeName", ".".join(["a" * 63] * 3) + "." + "b" * 61, None),
        ("daemonSocket", "/" + "s" * 106, None),
        ("maxConcurrentDelegates", 1, 1),
        ("maxConcurrentDelegates", 1024, 1024),
        ("readiness", {}, daemon_settings.ReadinessSettings()),
        ("readiness", {"mode": "block"}, daemon_settings.ReadinessSettings(mode="block")),
        ("readiness", {"timeout": 86400}, daemon_settings.ReadinessSettings(timeout=86400.0)),
        ("readiness", {"timeout": 0.5}, daemon_settings.ReadinessSettings(timeout=0.5)),
        (
            "readiness",
            {"mode": None, "indicatorFile": None, "timeout": None},
            daemon_settings.ReadinessSettings(),
        ),
        ("metrics", {}, metrics_settings.MetricsSettings()),
        *(
            ("metrics", {"address": address}, metrics_settings.MetricsSettings(address=address))
            for address in ("[::1]:9108", "0.0.0.0:1", "localhost:65535", "[fe80::1%eth0]:9108")
        ),
        ("metrics", {"enabled": False}, metrics_settings.MetricsSettings(enabled=False)),
        ("cleanupOnExit", True, True),
        ("policy", {"peers": "controller"}, policy_settings.PolicySettings(peers="controller")),
        ("policy", {"enabled": False}, policy_settings.PolicySettings(enabled=False)),
        (
            "policy",
            {"peers": "controller", "unpublishedGroups": "failOpen"},
            policy_settings.PolicySettings(peers="controller", unpublished_groups="failOpen"),
        ),
    ],
)
def test_daemon_edge_values_are_accepted(key: str, value: object, read: object) -> None:
    daemon = settings.parse_settings(_minimal(**{key: value}), source=SOURCE).daemon
    attribute = {
        "nodeName": daemon.node_name,
        "daemonSocket": daemon.socket,
        "maxConcurrentDelegates": daemon.max_concurrent_delegates,
        "readiness": daemon.readiness,
        "metrics": daemon.metrics,
        "cleanupOnExit": daemon.cleanup_on_exit,
        "policy": daemon.policy,
    }[key]
    expected = read
    if read is None:
        expected = Path(str(value)) if key == "daemonSocket" else value
    assert attribute == expected


@pytest.mark.parametrize(
    ("address", "host", "port"),
    [
        ("127.0.0.1:9108", "127.0.0.1", 9108),
        ("[::1]:9108", "::1", 9108),
        ("[::]:1", "::", 1),
        ("metrics.example.com:65535", "metrics.example.com", 65535),
    ],
)
def test_the_metrics_address_splits_into_a_host_and_port_to_bind(
    address: str, host: str, port: int
) -> None:
    metrics = settings.parse_settings(
        _minimal(metrics={"address": address}), source=SOURCE
    ).daemon.metrics
    assert (metrics.host, metrics.port) == (host, port)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (
            _minimal(nodename="worker-1"),
            "nodename: unknown key (did you mean 'nodeName'?), got 'worker-1'",
        ),
        (
            _minimal(cleanupOnExits=True),
            "cleanupOnExits: unknown key (did you mean 'cleanupOnExit'?), got True",
        ),
        (
            _minimal(readiness={"indicatorfile": "/run/ready"}),
            "readiness.indicatorfile: unknown key (did you mean 'indicatorFile'?), "
            "got '/run/ready'",
        ),
        (
            _minimal(readiness={"colour": "blue"}),
            "readiness.colour: unknown key (known: mode, indicatorFile, timeout), got 'blue'",
        ),
        (
            _minimal(metrics={"adress": "127.0.0.1:9108"}),
            "metrics.adress: unknown key (did you mean 'address'?), got '127.0.0.1:9108'",
        ),
        (
            _minimal(metrics={"port": 9108}),
            "metrics.port: unknown key (known: address, enabled), got 9108",
        ),
    ],
    ids=["nodeName", "cleanupOnExit", "indicatorFile", "readiness-unlike", "address", "port"],
)
def test_a_mistyped_daemon_key_is_refused_with_the_key_it_resembles(
    raw: dict[str, Any], problem: str
) -> None:
    assert _problems_of(raw) == [problem]


def test_every_daemon_problem_is_reported_at_once() -> None:
    raw = _minimal(
        nodeName="Node_A",
        daemonSocket="netattach.sock",
        cniConfDir="net.d",
        cniBinDir="bin",
        maxConcurrentDelegates=0,
        readiness={"mode": "later", "indicatorFile": "ready", "timeout": -1, "tiemout": 5},
        metrics={"address": "localhost", "enabled": "no", "path": "/metrics"},
        cleanupOnExit="yes",
        logLevel="loud",
    )
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        settings.parse_settings(raw, source=SOURCE)
    assert info.value.msg == f"{SOURCE}: invalid netattach settings (14 problems)"
    assert [p.split(":")[0] for p in info.value.details.split("; ")] == [
        "logLevel",
        "nodeName",
        "daemonSocket",
        "cniConfDir",
        "cniBinDir",
        "maxConcurrentDelegates",
        "readiness.tiemout",
        "readiness.mode",
        "readiness.indicatorFile",
        "readiness.timeout",
        "metrics.path",
        "metrics.address",
        "metrics.enabled",
        "cleanupOnExit",
    ]


def test_inline_daemon_problems_are_named_under_settings() -> None:
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        cni_config.settings_from_cni_config(
            {"type": "netattach-thin", "settings": _minimal(readiness={"mode": "now"})}
        )
    assert info.value.details == "settings.readiness.mode: must be one of wait, block, got 'now'"


def test_the_kubernetes_feed_with_nothing_is_in_cluster_for_the_daemon() -> None:
    parsed = settings.parse_settings(
        _minimal(feed={"kubernetes": {}}, readiness={"mode": "block"}), source=SOURCE
    )
    assert parsed.feed == feed_settings.KubernetesFeed(kubeconfig=None)
    assert parsed.daemon.readiness.mode == "block"


def _documented_yaml_examples() -> list[str]:
    text = DOCS.read_text(encoding="utf-8")
    return [
        block
        for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)
        if "clusterNetwork:" in block
    ]


def test_the_documented_examples_are_valid_settings(tmp_path: Path) -> None:
    examples = _documented_yaml_examples()
    assert len(examples) >= 4
    for index, example in enumerate(examples):
        path = tmp_path / f"example-{index}.yaml"
        path.write_text(example, encoding="utf-8")
        settings.load_settings(path)


def test_the_documented_daemon_examples_read_as_described(tmp_path: Path) -> None:
    kubernetes, directory = (
        example for example in _documented_yaml_examples() if "daemonSocket:" in example
    )
    path = tmp_path / "config.yaml"
    path.write_text(kubernetes, encoding="utf-8")
    loaded = settings.load_settings(path)
    assert loaded.feed == feed_settings.KubernetesFeed()
    assert loaded.daemon.node_name == NODE
    assert loaded.daemon.readiness.mode == "block"
    assert (loaded.daemon.metrics.host, loaded.daemon.metrics.port) == ("0.0.0.0", 9108)
    path.write_text(directory, encoding="utf-8")
    loaded = settings.load_settings(path)
    assert isinstance(loaded.feed, feed_settings.DirectoryFeed)
    assert loaded.daemon.node_name == "lab-node-1"
    assert loaded.daemon.readiness == daemon_settings.ReadinessSettings(
        mode="wait", indicator_file=Path("/run/netattach/default-network-ready"), timeout=120.0
    )
    assert loaded.daemon.metrics.enabled is False
    assert loaded.daemon.cleanup_on_exit is True


# ---------------------------------------------------------------------------------------------
# load_settings: the file


def test_a_yaml_file_is_loaded_and_named_as_the_source(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "# the node's settings\n"
        "clusterNetwork: kube-system/cluster-net\n"
        "binDirs:\n  - /usr/lib/cni\n"
        "delegateTimeout: 30\n"
        "feed:\n  kubernetes:\n",
        encoding="utf-8",
    )
    loaded = settings.load_settings(path)
    assert loaded.source == str(path)
    assert loaded.runtime.bin_dirs == (Path("/usr/lib/cni"),)
    assert loaded.runtime.delegate_timeout == 30.0
    assert loaded.feed == feed_settings.KubernetesFeed()


def test_a_json_file_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_minimal(logLevel="warning")), encoding="utf-8")
    assert settings.load_settings(path).logging.level == "warning"


def test_problems_in_a_file_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("clusterNetwork: flannel\nfeed: {directory: here}\nlogLevel: loud\n")
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        settings.load_settings(path)
    assert info.value.msg == f"{path}: invalid netattach settings (2 problems)"
    assert info.value.details == (
        "feed.directory: must be an absolute path, got 'here'; "
        "logLevel: must be one of debug, info, warning, error, got 'loud'"
    )


def test_a_missing_file_is_an_io_failure_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(errors.IOFailureError) as info:
        settings.load_settings(path)
    assert info.value.code == 5
    assert str(path) in info.value.msg


@pytest.mark.parametrize(
    "text",
    ["clusterNetwork: [unclosed\n", "a: 1\n---\nb: 2\n"],
    ids=["syntax", "two-documents"],
)
def test_text_that_is_not_one_yaml_document_is_a_decoding_failure(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(errors.DecodingFailureError) as info:
        settings.load_settings(path)
    assert info.value.code == 6
    assert str(path) in info.value.msg
    assert "\n" not in info.value.details


def test_an_empty_file_is_reported_as_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("", encoding="utf-8")
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        settings.load_settings(path)
    assert info.value.details.endswith("got None")


# ---------------------------------------------------------------------------------------------
# settings_from_cni_config: the thin plugin


def _thin(**extra: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "netattach", "type": "netattach-thin", **extra}


def test_the_cni_config_names_the_settings_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("clusterNetwork: flannel\nfeed: {directory: /srv/cluster}\n")
    loaded = cni_config.settings_from_cni_config(_thin(configFile=str(path)))
    assert loaded.source == str(path)
    assert loaded.networks.cluster_network.name == "flannel"


def test_the_cni_config_carries_the_settings_inline() -> None:
    loaded = cni_config.settings_from_cni_config(_thin(settings=_minimal(logLevel="error")))
    assert loaded.logging.level == "error"
    assert loaded.source == "netattach CNI config"


def test_inline_problems_are_named_under_settings() -> None:
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        cni_config.settings_from_cni_config(
            _thin(settings=_minimal(logLevel="verbose", stateDir="state")),
            source="/etc/cni/net.d/00-netattach.conf",
        )
    assert (
        info.value.msg
        == "/etc/cni/net.d/00-netattach.conf: invalid netattach settings (2 problems)"
    )
    assert info.value.details == (
        "settings.stateDir: must be an absolute path, got 'state'; "
        "settings.logLevel: must be one of debug, info, warning, error, got 'verbose'"
    )


def test_inline_settings_that_are_not_a_mapping_are_named_settings() -> None:
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        cni_config.settings_from_cni_config(_thin(settings="clusterNetwork: flannel"))
    assert info.value.details.startswith("settings: must be a mapping of settings keys")


@pytest.mark.parametrize(
    ("extra", "detail"),
    [
        ({}, "got neither"),
        ({"configFile": None}, "got {'configFile': None}"),
        (
            {"configFile": "/etc/netattach/config.yaml", "settings": {}},
            "got {'configFile': '/etc/netattach/config.yaml', 'settings': {}}",
        ),
    ],
    ids=["neither", "null", "both"],
)
def test_the_cni_config_needs_exactly_one_source_of_settings(
    extra: dict[str, Any], detail: str
) -> None:
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        cni_config.settings_from_cni_config(_thin(**extra))
    assert "exactly one of 'configFile'" in info.value.details
    assert info.value.details.endswith(detail)


@pytest.mark.parametrize("value", ["config.yaml", "", 5], ids=repr)
def test_the_config_file_must_be_an_absolute_path(value: object) -> None:
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        cni_config.settings_from_cni_config(_thin(configFile=value))
    assert info.value.details == (
        f"configFile: must be an absolute path to the settings file, got {value!r}"
    )


def test_a_missing_config_file_is_an_io_failure(tmp_path: Path) -> None:
    with pytest.raises(errors.IOFailureError):
        cni_config.settings_from_cni_config(_thin(configFile=str(tmp_path / "absent.yaml")))


def test_a_date_like_value_stays_a_string_as_kubernetes_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("when: 2024-13-01\n")
    with pytest.raises(errors.InvalidNetworkConfigError) as caught:
        settings.load_settings(path)
    assert "when: unknown key" in caught.value.details
    assert "got '2024-13-01'" in caught.value.details
