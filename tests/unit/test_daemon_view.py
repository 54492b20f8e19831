"""The daemon's directory view re-reads the manifests once before a pod counts as missing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from netattach.daemon import service
from netattach.settings import settings
from tests import builders

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "blue"}}


def started_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[service.Daemon, Path]:
    """The daemon on node-1 with its directory feed started, and the directory it reads."""
    monkeypatch.setenv("NODE_NAME", "node-1")
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    daemon = service.Daemon(settings.parse_settings(builders.raw_settings(tmp_path), source="test"))
    asyncio.run(daemon.feed.start())
    return daemon, manifests


@pytest.mark.req("KUBE-CACHE")
def test_a_pod_written_after_the_last_poll_is_found_on_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, manifests = started_daemon(tmp_path, monkeypatch)
    assert daemon.view.lookup_pod("blue", "web") is None
    (manifests / "web.json").write_text(json.dumps(POD))  # after the feed's last read

    assert daemon.view is daemon.feed.store
    found = asyncio.run(daemon.view.fetch_pod("blue", "web"))

    assert found is not None
    assert found["metadata"]["name"] == "web"
    assert daemon.view.lookup_pod("blue", "web") is not None
    assert asyncio.run(daemon.view.fetch_pod("blue", "gone")) is None


@pytest.mark.req("KUBE-NADREAD")
def test_a_nad_written_after_the_last_poll_is_found_on_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, manifests = started_daemon(tmp_path, monkeypatch)
    nad = builders.nad("net-a", {"type": "macvlan"})
    (manifests / "net-a.json").write_text(json.dumps(nad))  # after the feed's last read

    assert daemon.view is daemon.feed.store
    found = asyncio.run(daemon.view.fetch_nad("blue", "net-a"))

    assert found is not None
    assert daemon.view.lookup_nad("blue", "net-a") is not None
    assert asyncio.run(daemon.view.fetch_nad("blue", "gone")) is None
