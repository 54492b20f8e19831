"""How the daemon installs the shim into the CNI bin directory: written beside and renamed, an
older version's copies pruned, the native shim chosen when built, a zipapp built when not
(KUBE-INSTALL)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from netattach.daemon import shim_install


@pytest.mark.req("KUBE-INSTALL")
def test_the_shim_is_written_beside_and_renamed(tmp_path: Path) -> None:
    source = tmp_path / "shim.pyz"
    source.write_bytes(b"#!/usr/bin/env python3\n" + b"x" * 1000)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim_install.install_shim(source, bin_dir)
    installed = bin_dir / "netattach"
    assert installed.read_bytes() == source.read_bytes()
    assert stat.S_IMODE(installed.stat().st_mode) == 0o755
    assert sorted(p.name for p in bin_dir.iterdir()) == ["netattach"]


@pytest.mark.req("KUBE-INSTALL")
def test_copies_an_older_version_installed_are_pruned(tmp_path: Path) -> None:
    # netattach up to 0.1 installed a one-directory build as netattach.d-<hash> + a symlink.
    bin_dir = tmp_path / "bin"
    old = bin_dir / "netattach.d-0123456789ab"
    (old / "lib").mkdir(parents=True)
    (old / "netattach-shim").write_bytes(b"old exe")
    (bin_dir / "netattach").symlink_to("netattach.d-0123456789ab/netattach-shim")
    (bin_dir / "bridge").write_bytes(b"someone else's plugin")
    source = tmp_path / "netattach-shim"
    source.write_bytes(b"\x7fELF new")

    shim_install.install_shim(source, bin_dir)

    assert not (bin_dir / "netattach").is_symlink()
    assert (bin_dir / "netattach").read_bytes() == b"\x7fELF new"
    assert sorted(p.name for p in bin_dir.iterdir()) == ["bridge", "netattach"]


@pytest.mark.req("KUBE-INSTALL")
def test_without_shim_the_daemon_installs_the_native_one(tmp_path: Path) -> None:
    assert shim_install.NATIVE_SHIM.is_file(), (
        "the native shim is built with the package: `make venv` (or pip install) builds"
        f" {shim_install.NATIVE_SHIM}"
    )
    chosen = shim_install.choose_shim(None, tmp_path)
    assert chosen == shim_install.NATIVE_SHIM
    assert not list(tmp_path.iterdir())  # no zipapp built when there is no need


@pytest.mark.req("KUBE-INSTALL")
def test_without_a_native_shim_the_daemon_builds_a_working_zipapp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim_install, "NATIVE_SHIM", tmp_path / "not-built")
    chosen = shim_install.choose_shim(None, tmp_path / "state")

    done = subprocess.run(
        [sys.executable, str(chosen)],
        input=b'{"cniVersion": "0.4.0"}',
        env={"CNI_COMMAND": "VERSION"},
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b'{"cniVersion": "0.4.0", "supportedVersions": ["0.1.0"')
    assert os.access(chosen, os.X_OK)
    assert chosen.read_bytes().startswith(b"#!/usr/bin/env python3\n")


def test_a_shim_named_that_is_not_there_stops_the_daemon(tmp_path: Path) -> None:
    with pytest.raises(shim_install.ShimNotFoundError, match="is not an executable file"):
        shim_install.check_explicit(tmp_path / "missing")
