"""How delegates run: where plugins are found, where records go, how long a plugin may take.

binDirs           the plugin directories (CNI_PATH), searched in order
stateDir          the pod records, the runtime's cache, the locks
delegateTimeout   seconds one plugin may run
"""

from __future__ import annotations

from pathlib import Path

from netattach.settings import fields
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

DEFAULT_BIN_DIRS: Final = (Path("/opt/cni/bin"),)
DEFAULT_STATE_DIR: Final = Path("/var/lib/netattach")
DEFAULT_DELEGATE_TIMEOUT: Final = 60.0
# A delegate that needs more than an hour is hung; the bound also catches milliseconds written
# where seconds are meant.
MAX_DELEGATE_TIMEOUT: Final = 3600.0


class RuntimeSettings(NamedTuple):
    """How delegates run: where plugins are found, where records go, how long a plugin may take."""

    bin_dirs: tuple[Path, ...] = DEFAULT_BIN_DIRS
    state_dir: Path = DEFAULT_STATE_DIR
    delegate_timeout: float = DEFAULT_DELEGATE_TIMEOUT


def bin_dirs(value: object, key: str, problems: list[str]) -> tuple[Path, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        problems.append(
            f"{key}: must be a non-empty list of absolute paths, got {fields.show(value)}"
        )
        return None
    start = len(problems)
    paths: list[Path] = []
    for index, item in enumerate(value):
        item_key = f"{key}[{index}]"
        path = fields.path(item, item_key, problems)
        if path is None:
            if item is None:
                problems.append(f"{item_key}: must be an absolute path, got None")
            continue
        # CNI spec: CNI_PATH is a ':'-separated list, so a ':' would split one directory in two.
        if ":" in str(path):
            problems.append(
                f"{item_key}: must not contain ':' (CNI_PATH separator), got {fields.show(item)}"
            )
            continue
        paths.append(path)
    return None if len(problems) > start else tuple(paths)


def delegate_timeout(value: object, key: str, problems: list[str]) -> float | None:
    return fields.seconds(value, key, problems, most=MAX_DELEGATE_TIMEOUT)
