"""scripts/install-deps.sh: `make demo` installs what the demo needs and nothing the tests alone
use (containerd, runc, mmdebstrap, umoci, openssl); `make venv`/`make test` install it all.

Run on a PATH that lacks only the test-only tools, as a user who is not root: the script then
names what it would install instead of installing it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-deps.sh"
TEST_ONLY = ("containerd", "runc", "mmdebstrap", "umoci", "openssl")
DEMO_TOOLS = ("ip", "nft", "nsenter", "ping", "dot", "python3", "cc")


@pytest.fixture
def path_without_test_tools(tmp_path: Path) -> str:
    """A PATH with every program of /usr/sbin, /usr/bin, /sbin and /bin but the test-only ones,
    and an `id` that says the user is not root."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    missing = [tool for tool in DEMO_TOOLS if shutil.which(tool) is None]
    if missing or not Path("/usr/lib/cni/bridge").exists():
        pytest.skip(f"the demo's own tools are not all here: {missing or '/usr/lib/cni'}")
    for directory in (Path("/usr/sbin"), Path("/usr/bin"), Path("/sbin"), Path("/bin")):
        for program in directory.iterdir():
            name = program.name
            if name not in TEST_ONLY and name != "id" and not (bin_dir / name).exists():
                (bin_dir / name).symlink_to(program)
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_dir / "id").chmod(0o755)
    return str(bin_dir)


def install_deps(path: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_demo_needs_none_of_the_tests_packages(path_without_test_tools: str) -> None:
    done = install_deps(path_without_test_tools, "demo")

    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_tests_need_them_all(path_without_test_tools: str) -> None:
    done = install_deps(path_without_test_tools)

    assert done.returncode == 1
    assert done.stderr == (
        f"netattach's test needs these Debian packages: {' '.join(TEST_ONLY)} "
        "(run as root to install them)\n"
    )


def test_an_unknown_set_is_refused_by_name() -> None:
    done = install_deps(os.environ["PATH"], "everything")

    assert done.returncode == 2
    assert done.stderr == "usage: scripts/install-deps.sh [demo|test] (got 'everything')\n"


def test_make_demo_asks_for_the_demos_packages_only() -> None:
    done = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "scripts/install-deps.sh demo" in done.stdout
    assert "install-deps.sh test" not in done.stdout
