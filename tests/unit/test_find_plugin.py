"""Finding a delegate (CNI-FIND): a plugin that is a symlink the daemon's container cannot
resolve (Debian's `/opt/cni/bin/bridge -> /usr/lib/cni/bridge` on the node) is named as such,
not only "not found"."""

from __future__ import annotations

from pathlib import Path

import pytest

from netattach.cni import errors
from netattach.runtime import find


def test_a_dangling_symlink_is_named_with_where_it_points(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bridge").symlink_to("/usr/lib/cni-not-in-this-container/bridge")

    with pytest.raises(errors.InvalidNetworkConfigError) as raised:
        find.find_plugin("bridge", [str(bin_dir)])

    assert raised.value.msg == f"failed to find plugin 'bridge' in path {[str(bin_dir)]!r}"
    assert raised.value.details == (
        f"{str(bin_dir / 'bridge')!r} is a symlink to "
        "'/usr/lib/cni-not-in-this-container/bridge', which does not exist here (the daemon runs "
        "delegates in its own container: the plugins must be files in a directory mounted from "
        "the node, docs/deploy.md)"
    )


def test_a_symlink_that_resolves_is_found(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "bridge").write_text("#!/bin/sh\n")
    (real / "bridge").chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bridge").symlink_to(real / "bridge")

    assert find.find_plugin("bridge", [str(bin_dir)]) == bin_dir / "bridge"


def test_a_plugin_not_there_at_all_has_no_details(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidNetworkConfigError) as raised:
        find.find_plugin("bridge", [str(tmp_path), ""])

    assert raised.value.details == ""
