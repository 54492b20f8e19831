"""`netattach demo` and `netattach install-cni`, run as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

pytestmark = pytest.mark.netns

NETATTACH = str(Path(sys.executable).parent / "netattach")


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    """`netattach demo ARGS`, its output captured."""
    return subprocess.run(
        [NETATTACH, "demo", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.usefixtures("netns_ready")
def test_the_demo_tells_its_story_and_leaves_nothing(tmp_path: Path) -> None:
    picture = tmp_path / "demo.svg"
    done = demo("--picture", str(picture))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == f"==> demo passed; the picture: {picture}"
    texts = {el.text for el in ElementTree.parse(picture).iter() if el.tag.endswith("text")}
    for text in ("demo/pod-a", "demo/dataplane", "policy: demo/server-dataplane", "10.92.0.11/24"):
        assert text in texts
    assert any("eth0  cluster-default        10.90.0." in line for line in lines)
    assert any("dp0   demo/dataplane         10.92.0.10/24" in line for line in lines)
    assert lines.count("    reply received") == 2
    # the policy story: blocked, then open to the labelled client only, then gone
    story = [line for line in lines if line.startswith("    ping ")]
    assert story == [
        "    ping pod-a -> pod-b over demo/dataplane (10.92.0.11) is blocked",
        "    ping pod-c -> pod-b over demo/dataplane (10.92.0.11) is blocked",
        "    ping pod-a -> pod-b over demo/storage (10.91.0.3) answers",
        "    ping pod-a -> pod-b over demo/dataplane (10.92.0.11) answers",
        "    ping pod-c -> pod-b over demo/dataplane (10.92.0.11) is blocked",
        "    ping pod-c -> pod-b over demo/dataplane (10.92.0.11) answers",
    ]
    assert "    pod-b has no policy table any more" in lines
    assert "    no interface, IP allocation, policy table or record left" in lines
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert "na-demo" not in netns.stdout
    assert not Path("/run/netattach-demo").exists()


def test_install_cni_puts_an_executable_netattach_thin_in_the_bin_dir(tmp_path: Path) -> None:
    done = subprocess.run(
        [NETATTACH, "install-cni", "--bin-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    installed = tmp_path / "netattach-thin"
    assert installed.stat().st_mode & 0o755 == 0o755
    # This interpreter, isolated (-IS): no site processing and no PYTHON* variable on any call.
    assert installed.read_bytes().startswith(f"#!{sys.executable} -IS\n".encode())
    assert [p.name for p in tmp_path.iterdir()] == ["netattach-thin"]  # no temp file left
    hostile = {"PYTHONPATH": "/nonexistent", "PYTHONSTARTUP": "/nonexistent", "PATH": "/usr/bin"}
    version = subprocess.run(
        [str(installed)],
        input=b'{"cniVersion": "0.4.0"}',
        env={**hostile, "CNI_COMMAND": "VERSION"},
        capture_output=True,
        check=False,
    )
    assert version.returncode == 0, version.stderr
    assert json.loads(version.stdout) == {
        "cniVersion": "0.4.0",
        "supportedVersions": ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
    }
    # ADD takes the full path (the orchestrator and its dependencies), found without site.
    add = subprocess.run(
        [str(installed)],
        input=b"{not json",
        env={
            **hostile,
            "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": "c1",
            "CNI_NETNS": "/x",
            "CNI_IFNAME": "eth0",
            "CNI_PATH": "/usr/lib/cni",
        },
        capture_output=True,
        check=False,
    )
    assert add.returncode == 1, add.stderr
    assert json.loads(add.stdout)["code"] == 6


@pytest.mark.usefixtures("netns_ready")
def test_a_kept_demo_leaves_attached_pods_to_inspect_until_clean(tmp_path: Path) -> None:
    picture = tmp_path / "demo.svg"
    try:
        done = demo("--keep", "--picture", str(picture))
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[-1] == f"==> demo passed; the picture: {picture}"
        assert not any(line.startswith("==> DEL ") for line in lines)
        hint = lines.index(
            "==> kept for inspection (the pods attached, the policy in force), "
            "in /run/netattach-demo:"
        )
        assert "netattach demo --clean" in lines[-2]
        assert hint < len(lines) - 2
        pod_a = subprocess.run(
            ["ip", "-n", "na-demo-pod-a", "-j", "addr"], capture_output=True, check=True
        )
        assert "10.92.0.10" in pod_a.stdout.decode()
        status = subprocess.run(
            [NETATTACH, "status", "--config", "/run/netattach-demo/settings.yaml"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert "demo/pod-b" in status.stdout, status
        table = subprocess.run(
            ["ip", "netns", "exec", "na-demo-pod-b", "nft", "list", "tables"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert table.stdout.strip()  # the policy that admits pod-a is in force
    finally:
        cleaned = demo("--clean")
    assert cleaned.returncode == 0, cleaned.stderr
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert "na-demo" not in netns.stdout
    assert not Path("/run/netattach-demo").exists()
