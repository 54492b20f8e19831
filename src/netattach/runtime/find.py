"""Finding a plugin executable by its `type` in the `CNI_PATH` directories."""

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from netattach.cni import conf, errors


def _is_executable_file(candidate: Path) -> bool:
    return candidate.is_file() and os.access(candidate, os.X_OK)


def _dangling(plugin_type: str, directories: Sequence[str]) -> list[str]:
    """Why a plugin that is named in a directory is not there: a symlink that does not resolve.
    In the daemon's container, a node's `/opt/cni/bin/bridge -> /usr/lib/cni/bridge` (Debian's
    package) points at a path the container does not have."""
    found: list[str] = []
    for directory in directories:
        candidate = Path(directory) / plugin_type if directory else None
        if candidate is None or not candidate.is_symlink() or candidate.exists():
            continue
        found.append(
            f"{str(candidate)!r} is a symlink to {os.readlink(candidate)!r}, which does not "
            "exist here (the daemon runs delegates in its own container: the plugins must be "
            "files in a directory mounted from the node, docs/deploy.md)"
        )
    return found


def find_plugin(
    plugin_type: str,
    directories: Sequence[str],
    *,
    is_plugin: Callable[[Path], bool] = _is_executable_file,
    why_missing: Callable[[str, Sequence[str]], list[str]] = _dangling,
) -> Path:
    """The first executable file called `plugin_type` in `directories` (CNI-FIND).

    A `type` that is not a plain file name is refused before any directory is looked at, so a
    config cannot make us run `/bin/sh` or `../../anything`. `is_plugin` and `why_missing` say
    what a directory holds (the files on disk unless an exec seam plays the plugins itself):
    whether a candidate is a plugin, and why one named in a directory is not there.
    """
    problem = conf.plugin_type_problem(plugin_type)
    if problem is not None:
        raise errors.InvalidNetworkConfigError(f"refusing plugin type {plugin_type!r}", problem)
    for directory in directories:
        if not directory:
            continue
        candidate = Path(directory) / plugin_type
        if is_plugin(candidate):
            return candidate
    raise errors.InvalidNetworkConfigError(
        f"failed to find plugin {plugin_type!r} in path {list(directories)!r}",
        "; ".join(why_missing(plugin_type, directories)),
    )
