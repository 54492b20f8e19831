"""The `cluster` fixture: a one-node cluster for the thin plugin (see `tests/e2e/harness.py`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import Cluster
from tests.netns_fixtures import Node


@pytest.fixture
def cluster(node: Node, make_pod: Callable[[], str], ipam_dir: Path, tmp_path: Path) -> Cluster:
    return Cluster(tmp_path / "cluster", node, ipam_dir, make_pod)
