"""Logs a person can use: one INFO line per finished ADD, DEL and CHECK, and a `debug` level
that shows netattach's decisions, not the libraries' chatter."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from netattach import logs
from netattach.cluster import store
from netattach.pods import dispatch, orchestrator
from tests import builders, logging_state
from tests.builders import nad, orchestrated, pod

CONTAINER = "3f2a9c1b7d4e" + "0" * 52
PREFIX = "[blue/web/u1]"


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    with logging_state.configured("info") as stream:
        yield stream


def environ(command: str) -> dict[str, str]:
    return {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": CONTAINER,
        "CNI_NETNS": "/run/netns/na-log",
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": "K8S_POD_NAMESPACE=blue;K8S_POD_NAME=web;K8S_POD_UID=u1",
        "CNI_PATH": "/opt/cni/bin",
    }


def run(orch: orchestrator.Orchestrator, command: str) -> dispatch.Reply:
    async def orchestrator_for(_: object) -> orchestrator.Orchestrator:
        return orch

    stdin = json.dumps({"cniVersion": "1.0.0", "name": "netattach", "type": "netattach"})
    return asyncio.run(dispatch.handle(environ(command), stdin.encode(), orchestrator_for))


def call_lines(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if "netattach.calls:" in line]


def view_of(networks: str) -> store.ClusterStore:
    """The cache holding the pod `blue/web` selecting `networks`, and the NAD `blue/net-a`."""
    return builders.view_of(pod(networks), nad("net-a", {"cniVersion": "1.0.0", "type": "macvlan"}))


def test_every_finished_add_check_and_del_leaves_one_info_line(
    tmp_path: Path, log_stream: io.StringIO
) -> None:
    orch, _, _ = orchestrated(tmp_path, view_of("net-a"))
    for command in ("ADD", "CHECK", "DEL", "DEL"):
        assert run(orch, command).exit_code == 0
    lines = call_lines(log_stream)
    assert len(lines) == 4, log_stream.getvalue()
    both = "eth0 cluster-default, net1 blue/net-a"
    for line, command, interfaces in zip(
        lines,
        ("ADD", "CHECK", "DEL", "DEL"),
        (both, both, both, "no interfaces"),  # the second DEL finds nothing left: still a line
        strict=True,
    ):
        assert " INFO netattach.calls: " in line
        message = line.split("netattach.calls: ", 1)[1]
        head, took, code = message.split("; ")
        assert head == f"{PREFIX} {command} container 3f2a9c1b7d4e: {interfaces}"
        assert took.endswith(" ms")
        assert float(took.removesuffix(" ms")) >= 0
        assert code == "code 0"
    assert "DEBUG" not in log_stream.getvalue()


def test_a_failed_add_says_its_code_and_why(tmp_path: Path, log_stream: io.StringIO) -> None:
    orch, _, _ = orchestrated(tmp_path, view_of("missing"))
    reply = run(orch, "ADD")
    assert reply.exit_code == 1
    (line,) = call_lines(log_stream)
    assert f"{PREFIX} ADD container 3f2a9c1b7d4e: no interfaces; " in line
    assert "; code 101 (" in line
    assert "blue/missing" in line


def test_version_gets_no_line(tmp_path: Path, log_stream: io.StringIO) -> None:
    orch, _, _ = orchestrated(tmp_path, view_of(""))
    assert run(orch, "VERSION").exit_code == 0
    assert call_lines(log_stream) == []


def test_debug_is_netattachs_own_and_other_libraries_stay_at_warning() -> None:
    with logging_state.configured("debug") as stream:
        logging.getLogger("netattach.orchestrator").debug("own decision")
        for library in ("httpx2", "httpcore2.connection", "lightkube", "asyncio", "pyroute2"):
            logging.getLogger(library).debug("%s chatter", library)
            logging.getLogger(library).info("%s chatter", library)
        logging.getLogger("httpcore2").warning("httpcore2 trouble")
    text = stream.getvalue()
    assert "own decision" in text
    assert "chatter" not in text
    assert "httpcore2 trouble" in text


def test_a_library_named_in_loggers_logs_at_its_level() -> None:
    named = {"httpx2": "debug", "netattach.x": "debug"}
    with logging_state.configured("info", loggers=named) as stream:
        logging.getLogger("httpx2.client").debug("request line")
        logging.getLogger("lightkube").info("lightkube chatter")
        logging.getLogger("netattach.x").debug("x decides")
        logging.getLogger("netattach.y").debug("y decides")
        logs.configure("info", "text", stream)  # named again without them: back to the default
        logging.getLogger("httpx2.client").debug("later request line")
    text = stream.getvalue()
    assert "request line" in text
    assert "later request line" not in text
    assert "lightkube chatter" not in text
    assert "x decides" in text
    assert "y decides" not in text


def test_a_bad_level_for_a_logger_is_named() -> None:
    with pytest.raises(ValueError, match=r"the level of logger 'httpx2' must be one of .*'loud'"):
        logs.configure("info", loggers={"httpx2": "loud"})


def test_debug_shows_the_plan_and_a_del_with_nothing_recorded(tmp_path: Path) -> None:
    with logging_state.configured("debug") as stream:
        orch, _, _ = orchestrated(tmp_path, view_of("net-a"))
        assert run(orch, "ADD").exit_code == 0
        assert run(orch, "DEL").exit_code == 0
        assert run(orch, "DEL").exit_code == 0
    debug = [line for line in stream.getvalue().splitlines() if " DEBUG " in line]
    assert any(f"{PREFIX} plan: eth0 cluster-default, net1 blue/net-a" in line for line in debug)
    assert any(f"DEL of {CONTAINER}: no pod record" in line for line in debug), debug
