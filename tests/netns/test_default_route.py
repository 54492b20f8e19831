"""`netns.routes.apply_default_route` on a plain rtnetlink socket opened in the pod's namespace
(SEL-DEFROUTE): each family's default routes replaced by one via the selected interface, the
other family untouched, the kernel's refusal raised with its errno, and the calling thread's own
namespace never changed."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from netattach.netns import routes

pytestmark = [pytest.mark.netns, pytest.mark.req("SEL-DEFROUTE")]


def ip(netns: str, *args: str) -> str:
    done = subprocess.run(
        ["nsenter", f"--net={netns}", "--", "ip", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=10,
    )
    return done.stdout


def defaults(netns: str, family: str) -> list[tuple[str, str]]:
    """(gateway, device) of each default route of `family` ("-4", "-6") in the main table."""
    raw: list[dict[str, Any]] = json.loads(ip(netns, "-j", family, "route", "show", "default"))
    return [(r.get("gateway", ""), r.get("dev", "")) for r in raw]


@pytest.fixture
def pod(make_pod: Callable[[], str]) -> str:
    """A pod with eth0 (10.80.0.5/24, fd00:80::5/64, default routes via .1 and ::1) and net1
    (10.81.0.5/24, fd00:81::5/64): each a veth whose peer stays in the pod, up, for a carrier."""
    netns = make_pod()
    ip(netns, "link", "set", "lo", "up")
    for name, v4, v6 in (
        ("eth0", "10.80.0.5/24", "fd00:80::5/64"),
        ("net1", "10.81.0.5/24", "fd00:81::5/64"),
    ):
        ip(netns, "link", "add", name, "type", "veth", "peer", "name", f"{name}-peer")
        ip(netns, "link", "set", f"{name}-peer", "up")
        ip(netns, "addr", "add", v4, "dev", name)
        ip(netns, "addr", "add", v6, "dev", name, "nodad")
        ip(netns, "link", "set", name, "up")
    ip(netns, "route", "add", "default", "via", "10.80.0.1", "dev", "eth0")
    ip(netns, "-6", "route", "add", "default", "via", "fd00:80::1", "dev", "eth0")
    return netns


def test_an_ipv4_gateway_replaces_the_ipv4_default_only(pod: str) -> None:
    before = os.readlink("/proc/thread-self/ns/net")

    routes.apply_default_route(pod, "net1", ["10.81.0.1"])

    assert defaults(pod, "-4") == [("10.81.0.1", "net1")]
    assert defaults(pod, "-6") == [("fd00:80::1", "eth0")]
    assert os.readlink("/proc/thread-self/ns/net") == before


def test_both_families_at_once(pod: str) -> None:
    routes.apply_default_route(pod, "net1", ["10.81.0.1", "fd00:81::1"])

    assert defaults(pod, "-4") == [("10.81.0.1", "net1")]
    assert defaults(pod, "-6") == [("fd00:81::1", "net1")]


def test_every_default_route_goes_not_only_the_first(pod: str) -> None:
    ip(pod, "route", "add", "default", "via", "10.80.0.2", "dev", "eth0", "metric", "50")

    routes.apply_default_route(pod, "net1", ["10.81.0.1"])

    assert defaults(pod, "-4") == [("10.81.0.1", "net1")]


def test_a_gateway_on_no_subnet_of_the_interface_is_the_kernels_refusal(pod: str) -> None:
    with pytest.raises(OSError, match="Network is unreachable") as raised:
        routes.apply_default_route(pod, "net1", ["10.99.0.1"])

    assert raised.value.errno == errno.ENETUNREACH


def test_an_interface_not_in_the_pod_is_named(pod: str) -> None:
    with pytest.raises(LookupError, match=f"no interface 'net9' in {pod}"):
        routes.apply_default_route(pod, "net9", ["10.81.0.1"])

    assert defaults(pod, "-4") == [("10.80.0.1", "eth0")]  # nothing was removed
