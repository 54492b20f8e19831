"""Fixtures for tests that run the real reference CNI plugins in real network namespaces.

Every namespace and link carries a unique `na-` prefix. Plugins run inside a per-test "node"
namespace (`SubprocessExec(host_netns=...)`), so their host side (bridges, host veth ends,
sysctls, portmap and bandwidth rules) never touches the real host. Deleting the node and pod
namespaces at teardown deletes everything the plugins made, even when the test failed.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from netattach.runtime import chain, execute

PLUGIN_DIR = Path(os.environ.get("NETATTACH_TEST_CNI_PATH", "/usr/lib/cni"))


def plugin_versions() -> tuple[str, ...]:
    """The CNI versions the plugins in PLUGIN_DIR speak, as `bridge` answers VERSION (Debian's
    1.1.1: up to 1.0.0; v1.10.0 from scripts/build-cni-plugins.sh: 1.1.0 too); () without it."""
    try:
        done = subprocess.run(
            [str(PLUGIN_DIR / "bridge")],
            env={"CNI_COMMAND": "VERSION"},
            input=b"{}",
            capture_output=True,
            timeout=10,
            check=False,
        )
        versions = json.loads(done.stdout)["supportedVersions"]
    except (OSError, ValueError, KeyError, TypeError, subprocess.TimeoutExpired):
        return ()
    return tuple(str(v) for v in versions)


def netns_unavailable_reason() -> str | None:
    """Why netns tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "netns tests need root"
    if not (PLUGIN_DIR / "bridge").exists():
        return f"the reference CNI plugins are not in {PLUGIN_DIR} (containernetworking-plugins)"
    if shutil.which("nsenter") is None:
        return "nsenter (util-linux) is not installed"
    return None


def require_link_kind(kind: str) -> None:
    """Skip, with the reason CI accepts, when the kernel cannot make links of `kind`."""
    from netattach.netns import links

    if not links.link_kind_supported(kind):
        pytest.skip(f"kernel lacks link type {kind!r}")


def unique(prefix: str) -> str:
    """`na-<prefix>-<hex>`, at most 15 bytes so it also fits an interface name."""
    name = f"na-{prefix}-{secrets.token_hex(3)}"
    assert len(name) <= 15, name
    return name


@dataclass
class Node:
    """A namespace standing in for the node's host network: plugins run in it."""

    name: str
    path: str


def ip_in(netns: str, *args: str) -> None:
    """`ip ARGS` in the network namespace at the path `netns`."""
    subprocess.run(
        ["nsenter", f"--net={netns}", "--", "ip", *args],
        check=True,
        capture_output=True,
        timeout=10,
    )


@pytest.fixture
def netns_ready() -> None:
    reason = netns_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def node(netns_ready: None) -> Iterator[Node]:
    from netattach.netns import links, namespace

    name = unique("node")
    path = namespace.create(name)
    try:
        links.set_up(path, "lo")
        links.set_node_forwarding(path)
        yield Node(name=name, path=path)
    finally:
        namespace.remove(name)


@pytest.fixture
def make_pod(netns_ready: None) -> Iterator[Callable[[], str]]:
    """Make pod namespaces on demand; all of them are removed at teardown."""
    from netattach.netns import namespace

    made: list[str] = []

    def make() -> str:
        name = unique("pod")
        made.append(name)
        return namespace.create(name)

    try:
        yield make
    finally:
        for name in made:
            namespace.remove(name)


@pytest.fixture
def ipam_dir(tmp_path: Path) -> Path:
    """host-local's `dataDir` for this test, so allocations can be inspected and never shared."""
    path = tmp_path / "ipam"
    path.mkdir()
    return path


@pytest.fixture
def runtime(node: Node, tmp_path: Path) -> chain.Runtime:
    """The real runtime, running the reference plugins inside the test's node namespace."""
    return chain.Runtime(
        path=[str(PLUGIN_DIR)],
        cache_dir=tmp_path / "cache",
        executor=execute.SubprocessExec(host_netns=node.path),
        timeout=30.0,
    )


def container_id() -> str:
    return f"na-ctr-{secrets.token_hex(8)}"


def allocations(ipam_dir: Path) -> list[str]:
    """host-local's allocation files (IP-named files; `last_reserved_ip.*` and locks excluded)."""
    found: list[str] = []
    for path in ipam_dir.rglob("*"):
        if path.is_file() and not path.name.startswith(("last_reserved_ip", "lock")):
            found.append(path.name)
    return sorted(found)
