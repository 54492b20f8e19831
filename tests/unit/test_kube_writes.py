"""The Kubernetes feed's writes reach the API under the server URL's own path, as lightkube's
reads do: a cluster behind a proxy (Rancher's `/k8s/clusters/<id>`) serves the API there."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from netattach.cluster import kube, model, store


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str, dict[str, object]]]] = []

    def do_PATCH(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append(("PATCH", self.path, json.loads(body)))
        reply = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    Recorder.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.req("KUBE-STATUS")
@pytest.mark.parametrize("prefix", ["", "/k8s/clusters/c-1", "/k8s/clusters/c-1/"])
def test_a_status_patch_goes_under_the_servers_path(
    server: http.server.ThreadingHTTPServer, tmp_path: Path, prefix: str
) -> None:
    port = server.server_address[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}{prefix}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )

    async def publish() -> None:
        feed = kube.KubeFeed(store.ClusterStore(), node_name="n", kubeconfig=kubeconfig)
        try:
            await feed.publish_status("blue", "web", [{"name": "cluster-default"}], uid="u1")
        finally:
            await feed.aclose()

    asyncio.run(publish())
    ((method, path, body),) = Recorder.seen
    assert method == "PATCH"
    assert path == f"{prefix.rstrip('/')}/api/v1/namespaces/blue/pods/web?fieldManager=netattach"
    assert body == {
        "metadata": {
            "annotations": {
                model.STATUS_ANNOTATION: '[\n    {\n        "name": "cluster-default"\n    }\n]'
            },
            "uid": "u1",
        }
    }
