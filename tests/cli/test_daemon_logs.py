"""`netattach daemon --log-format text|json --log-level LEVEL`: the daemon's log lines, read from a
real daemon whose ADD fails in a real plugin, and the formatter on its own."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from netattach import logs
from tests.cli.harness import BIN
from tests.e2e import daemon_harness
from tests.e2e.daemon_harness import DaemonNode
from tests.e2e.harness import bridge_list, host_local

# The bridge plugin refuses it when the ADD runs: a failure inside a real plugin, about one
# network, in a config the delegate policy lets through (a subnet that is no CIDR it refuses).
BAD_VLAN = 5000
PREFIX = "[blue/web/uid-web:blue/bad]"


def with_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *flags: str) -> None:
    """Make the harness start `netattach daemon ... <flags>` (the real command, more flags)."""
    wrapper = tmp_path / "netattach-with-flags"
    wrapper.write_text(f'#!/bin/sh\nexec {BIN / "netattach"} "$@" {" ".join(flags)}\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(daemon_harness, "DAEMON", wrapper)


def failing_add(daemon: DaemonNode, settings_level: str) -> None:
    cluster = daemon.cluster
    ipam = host_local(cluster.ipam, "10.99.0.0/24")
    cluster.add_nad("blue", "bad", bridge_list(None, ipam, vlan=BAD_VLAN))
    pod = cluster.pod("blue", "web", "bad")
    daemon.settings["logLevel"] = settings_level
    daemon.start()
    reply = daemon.shim("ADD", pod)
    assert reply.rc == 1, reply
    daemon.stop()


@pytest.mark.netns
def test_json_lines_carry_the_pod_and_network_and_the_flag_beats_the_settings(
    daemon: DaemonNode, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with_flags(monkeypatch, tmp_path, "--log-format", "json", "--log-level", "info")

    failing_add(daemon, settings_level="error")

    lines = [json.loads(line) for line in daemon.log_text().splitlines() if line.strip()]
    assert lines, "the daemon logged nothing"
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line), line
        assert line["time"].endswith("Z")
    # info lines, though the settings say error: the flag wins
    assert any(line["message"].startswith("serving CNI calls on ") for line in lines)
    failures = [line for line in lines if line.get("network") == "blue/bad"]
    assert failures, lines
    for line in failures:
        assert line["pod"] == "blue/web"
        assert line["uid"] == "uid-web"
        assert line["message"].startswith(PREFIX)
    refused = f"VLAN ID {BAD_VLAN}"
    assert any(line["level"] == "error" and refused in line["message"] for line in failures)


@pytest.mark.netns
def test_text_lines_about_a_pod_start_with_its_prefix(daemon: DaemonNode) -> None:
    failing_add(daemon, settings_level="error")

    lines = daemon.log_text().splitlines()
    about = [line for line in lines if PREFIX in line]
    assert about, lines
    assert any(f" ERROR netattach.orchestrator: {PREFIX} " in line for line in about)
    # the settings' level when no flag is given: no INFO line
    assert not [line for line in lines if " INFO " in line]


def test_a_record_about_a_pod_gets_its_prefix_and_fields() -> None:
    stream = io.StringIO()
    logs.configure("debug", "text", stream)
    log = logging.getLogger("netattach.test")
    log.warning("policy applied", extra=logs.pod_fields("ns", "web", "u-1", "ns/net"))
    log.info("[ns/web/u-1] already prefixed")
    logs.configure("debug", "json", stream)
    log.warning("policy applied", extra=logs.pod_fields("ns", "web", "u-1", "ns/net"))
    log.error("no pod here\nsecond line")
    logging.getLogger().handlers.clear()

    text_1, text_2, json_1, json_2 = stream.getvalue().splitlines()
    assert text_1.endswith(" WARNING netattach.test: [ns/web/u-1:ns/net] policy applied")
    assert text_2.endswith(" INFO netattach.test: [ns/web/u-1] already prefixed")
    first = json.loads(json_1)
    assert first["pod"] == "ns/web"
    assert first["uid"] == "u-1"
    assert first["network"] == "ns/net"
    assert first["message"] == "policy applied"
    second = json.loads(json_2)
    assert "pod" not in second
    assert second["message"] == "no pod here\nsecond line"  # one line on the wire


def test_a_bad_level_or_format_is_refused_naming_it() -> None:
    with pytest.raises(
        ValueError, match="log level must be one of debug, info, warning, error, got 'loud'"
    ):
        logs.configure("loud")
    with pytest.raises(ValueError, match="got 'xml'"):
        logs.configure("info", "xml")  # type: ignore[arg-type]


@pytest.mark.netns
def test_an_add_refused_before_any_plugin_runs_is_logged_with_the_pod_prefix(
    daemon: DaemonNode,
) -> None:
    cluster = daemon.cluster
    pod = cluster.pod("blue", "web", "missing")  # no such NAD
    daemon.start()
    reply = daemon.shim("ADD", pod)
    assert reply.code == 101, reply
    daemon.stop()

    lines = daemon.log_text().splitlines()
    assert any("[blue/web/uid-web]" in line and "blue/missing" in line for line in lines), lines
