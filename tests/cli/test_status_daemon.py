"""`netattach status|graph --socket`: the node daemon's own account of the pods it attached
(`GET /v1/pods` on its socket), after real ADDs through the shim with the reference plugins."""

from __future__ import annotations

import json
import socket
import threading
import xml.etree.ElementTree as ET

import pytest

from tests.cli.harness import Done, netattach
from tests.e2e.daemon_harness import DaemonNode, wait_for
from tests.e2e.harness import DEFAULT_NETWORK, Reply, bridge_list, host_local, probe

pytestmark = pytest.mark.netns


def status(daemon: DaemonNode, *args: str) -> Done:
    return netattach("status", "--socket", str(daemon.socket), *args)


def test_status_shows_what_the_daemon_attached(daemon: DaemonNode) -> None:
    cluster = daemon.cluster
    cluster.add_nad("blue", "net-a", bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24")))
    web = cluster.pod("blue", "web", "net-a")
    daemon.start()
    assert daemon.shim("ADD", web).rc == 0, daemon.log_text()

    done = status(daemon)

    assert done.rc == 0, (done.stdout, done.stderr)
    published = cluster.status("blue", "web")
    assert published is not None
    kernel = cluster.interfaces(web.netns)
    assert done.lines[0] == f"blue/web  uid={web.uid}  container={web.container_id}"
    rows = [line.split() for line in done.lines[2:4]]
    assert rows == [
        [e["name"], e["interface"], *e["ips"], e["mac"], "yes" if e["default"] else "no", "-"]
        for e in published
    ]
    assert [row[3] for row in rows] == [kernel["eth0"].mac, kernel["net1"].mac]
    assert done.lines[-1] == f"1 pod, 0 problems (from the daemon at {daemon.socket})"

    as_json = json.loads(status(daemon, "blue/web", "-o", "json").stdout)
    (pod,) = as_json["pods"]
    assert [(a["network"], a["interface"], a["ips"], a["mac"]) for a in pod["attachments"]] == [
        (e["name"], e["interface"], e["ips"], e["mac"]) for e in published
    ]
    assert [a["expectsIPs"] for a in pod["attachments"]] == [True, True]

    not_here = status(daemon, "blue/db")
    assert not_here.rc == 1
    assert not_here.lines[-2] == (
        f"problem: pod blue/db: not found in the daemon at {daemon.socket}"
    )

    out = cluster.root / "node.svg"
    drawn = netattach("graph", "--socket", str(daemon.socket), "-o", str(out))
    assert drawn.rc == 0, drawn.stderr
    texts = [t.text for t in ET.parse(out).getroot().iter("{http://www.w3.org/2000/svg}text")]
    for shown in ("blue/web", "blue/net-a", DEFAULT_NETWORK, "net1", *published[1]["ips"]):
        assert shown in texts

    assert daemon.shim("DEL", web).rc == 0


def test_a_plugin_that_gives_no_address_on_an_ipam_network_is_a_problem(
    daemon: DaemonNode,
) -> None:
    # A chained plugin that ignores its `ipam` and answers an empty result: the ADD succeeds
    # (nothing was asked of the result), but the pod has no address on that network.
    cluster = daemon.cluster
    log = cluster.root / "probe.log"
    silent = {**probe(log), "ipam": {"type": "host-local", "subnet": "10.85.0.0/24"}}
    cluster.add_nad("blue", "silent", {"cniVersion": "1.0.0", "plugins": [silent]})
    pod = cluster.pod("blue", "odd", "silent")
    daemon.start()
    assert daemon.shim("ADD", pod).rc == 0, daemon.log_text()

    done = status(daemon, "blue/odd")

    assert done.rc == 1
    assert done.lines[3].split()[:3] == ["blue/silent", "net1", "-"]
    assert done.lines[4] == (
        "  problem: interface 'net1' of network 'blue/silent' has no IP address, but its "
        "network assigns addresses (IPAM or requested ips)"
    )
    assert daemon.shim("DEL", pod).rc == 0


def test_an_add_in_flight_is_not_complete_and_then_is(daemon: DaemonNode) -> None:
    cluster = daemon.cluster
    log = cluster.root / "probe.log"
    slow = bridge_list(None, host_local(cluster.ipam, "10.86.0.0/24"), probe(log, sleep=3.0))
    cluster.add_nad("blue", "slow", slow)
    pod = cluster.pod("blue", "slow", "slow")
    daemon.start()
    replies: list[Reply] = []
    adding = threading.Thread(target=lambda: replies.append(daemon.shim("ADD", pod)))
    adding.start()
    try:
        seen = wait_for(
            "status to show the ADD in flight",
            lambda: (done := status(daemon, "blue/slow")).rc == 1 and done,
            30.0,
        )
    finally:
        adding.join(60)
    assert f"  problem: ADD of container {pod.container_id} has not completed" in seen.stdout
    assert replies[0].rc == 0, daemon.log_text()

    assert status(daemon, "blue/slow").rc == 0
    assert daemon.shim("DEL", pod).rc == 0


def test_a_corrupt_record_is_a_problem_naming_its_file(daemon: DaemonNode) -> None:
    daemon.start()
    record = daemon.cluster.state / "pods" / "na-ctr-torn.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text('{"kind": "netattachPodV1", "containerId": ')  # a torn write

    done = status(daemon, "-o", "json")

    assert done.rc == 1
    (pod,) = json.loads(done.stdout)["pods"]
    assert (pod["namespace"], pod["name"], pod["containerId"]) == ("?", "?", "na-ctr-torn")
    (problem,) = pod["problems"]
    assert problem.startswith(f"corrupt pod record {str(record)!r}: not JSON")


def get(daemon: DaemonNode, target: str) -> tuple[int, object]:
    """One GET on the daemon's socket, as any HTTP client over a UNIX socket makes it."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(daemon.socket))
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_the_pods_endpoint_refuses_a_query_it_does_not_know(daemon: DaemonNode) -> None:
    daemon.start()

    assert get(daemon, "/v1/pods?namespace=blue") == (
        200,
        {"kind": "netattachPodReport", "pods": []},
    )
    assert get(daemon, "/v1/pods?pod=web") == (
        400,
        {"error": "unknown query parameter 'pod' (known: namespace, name)"},
    )
    assert get(daemon, "/v1/pods?name=web") == (
        400,
        {"error": "query parameter name='web' needs a namespace"},
    )
    code, body = get(daemon, "/v1/pods?namespace=a&namespace=b")
    assert code == 400
    assert "given twice" in json.dumps(body)
