"""`netns.host.read_addresses`, the plain-socket rtnetlink reader SEC-NODE reads the node with,
against pyroute2's view of the same namespace (SEC-NODE): every address with its interface, and
the default routes' gateways, a multipath one's included, in a namespace of the test's own."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from netattach.netns import links
from tests.netns_fixtures import Node, ip_in

pytestmark = [pytest.mark.netns, pytest.mark.req("SEC-NODE")]

SRC = Path(__file__).resolve().parents[2] / "src"


def ip(node: Node, *args: str) -> None:
    ip_in(node.path, *args)


def read_in(node: Node) -> tuple[list[tuple[str, str]], list[str]]:
    """`read_addresses()` run by a process inside the node namespace, as the daemon runs there."""
    code = (
        f"import sys; sys.path.insert(0, {str(SRC)!r}); "
        "from netattach.netns import host; print(repr(host.read_addresses()))"
    )
    done = subprocess.run(
        ["nsenter", f"--net={node.path}", "--", sys.executable, "-I", "-c", code],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    found: tuple[list[tuple[str, str]], list[str]] = ast.literal_eval(done.stdout)
    return found


def test_the_reader_sees_what_pyroute2_sees(node: Node) -> None:
    links.add_veth_pair(node.path, "na-up", "na-up-peer")
    links.add_veth_pair(node.path, "na-two", "na-two-peer")
    ip(node, "link", "set", "lo", "up")
    ip(node, "address", "add", "10.77.0.2/24", "dev", "na-up")
    ip(node, "address", "add", "10.77.0.3/24", "dev", "na-up")
    ip(node, "address", "add", "10.78.0.2/24", "dev", "na-two")
    ip(node, "-6", "address", "add", "fd00:77::2/64", "dev", "na-up", "nodad")
    ip(node, "route", "add", "default", "nexthop", "via", "10.77.0.1", "dev", "na-up",
       "nexthop", "via", "10.78.0.1", "dev", "na-two")  # fmt: skip
    ip(node, "-6", "route", "add", "default", "via", "fd00:77::1", "dev", "na-up")
    ip(node, "route", "add", "10.200.0.0/16", "via", "10.77.0.9")  # not a default route
    ip(node, "route", "add", "default", "via", "10.78.0.7", "table", "100")  # not the main table

    addresses, gateways = read_in(node)

    kernel = links.read_interfaces(node.path)
    expected = {
        (name, text.partition("/")[0]) for name, state in kernel.items() for text in state.addresses
    }
    assert set(addresses) == expected
    assert {("na-up", "10.77.0.2"), ("na-up", "10.77.0.3"), ("na-two", "10.78.0.2")} <= expected
    assert ("na-up", "fd00:77::2") in expected
    assert sorted(gateways) == ["10.77.0.1", "10.78.0.1", "fd00:77::1"]


def test_a_namespace_without_routes_has_no_gateway(node: Node) -> None:
    addresses, gateways = read_in(node)
    assert gateways == []
    assert {name for name, _ in addresses} <= {"lo"}
