"""Named network namespaces under /run/netns, as `ip netns` makes them."""

import contextlib
from pathlib import Path

from pyroute2 import netns as _netns

NETNS_RUN_DIR = Path("/run/netns")


def path_of(name: str) -> str:
    return str(NETNS_RUN_DIR / name)


def create(name: str) -> str:
    """Create the namespace `name` and return its path."""
    _netns.create(name)
    return path_of(name)


def remove(name: str) -> None:
    """Remove the namespace `name`; already gone is fine."""
    with contextlib.suppress(FileNotFoundError, OSError):
        _netns.remove(name)


def exists(name: str) -> bool:
    return Path(path_of(name)).exists()


def names() -> list[str]:
    return sorted(_netns.listnetns())
