"""`netattach graph -o FILE.svg|png|dot`: pods, their networks and the attachments between them,
drawn by Graphviz from the same sources as `netattach status`."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.cli.harness import DEFAULT_NETWORK, DirectoryNode, Done, bridge_config, entry, netattach

SVG = "{http://www.w3.org/2000/svg}"
GOVERNED_RED = "#c62828"


def picture_fixture(node: DirectoryNode) -> None:
    """blue/web on net-a (governed by blue/deny) and raw; red/db on red/net-b."""
    node.add_namespace("blue")
    node.add_namespace("red")
    node.add_nad("blue", "net-a", bridge_config("10.81.0.0/24"))
    node.add_nad("blue", "raw", bridge_config(None))
    node.add_nad("red", "net-b", bridge_config("10.82.0.0/24"))
    node.add_pod("blue", "web", "net-a,raw", labels={"app": "web"})
    node.add_pod("red", "db", "net-b")
    node.add_policy("blue", "deny", "net-a", {"podSelector": {"matchLabels": {"app": "web"}}})
    node.write_status(
        "blue",
        "web",
        [
            entry(DEFAULT_NETWORK, "eth0", ["10.80.0.5/24"], default=True),
            entry("blue/net-a", "net1", ["10.81.0.5/24", "fd00:81::5/64"]),
            entry("blue/raw", "net2"),
        ],
    )
    node.write_status(
        "red",
        "db",
        [
            entry(DEFAULT_NETWORK, "eth0", ["10.80.0.6/24"], default=True),
            entry("red/net-b", "net1", ["10.82.0.6/24"]),
        ],
    )


def drawn(node: DirectoryNode, name: str, *options: str) -> tuple[Done, Path]:
    """`netattach graph` of the picture fixture, with `options`, into `name`: it succeeded."""
    picture_fixture(node)
    out = node.root / name
    done = netattach("graph", *options, "--config", str(node.settings), "-o", str(out))
    assert done.rc == 0, done.stderr
    return done, out


def svg_texts(path: Path) -> list[str]:
    root = ET.parse(path).getroot()  # also proves the file is well-formed XML
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def node_shapes(path: Path, title: str) -> list[ET.Element]:
    """The shapes (ellipse, polygon, path) of the graph node whose label's first line is `title`."""
    root = ET.parse(path).getroot()
    for group in root.iter(f"{SVG}g"):
        if group.get("class") != "node":
            continue
        texts = [t.text for t in group.iter(f"{SVG}text")]
        if texts and texts[0] == title:
            return [e for e in group if e.tag in (f"{SVG}ellipse", f"{SVG}polygon", f"{SVG}path")]
    raise AssertionError(f"no node {title!r} in {path}")


def test_svg_shows_pods_networks_interfaces_addresses_and_governed_networks(
    directory_node: DirectoryNode,
) -> None:
    done, out = drawn(directory_node, "networks.svg")
    assert done.stdout == f"wrote {out}: 2 pods, 4 networks\n"
    texts = svg_texts(out)
    for shown in (
        "blue/web",
        "red/db",
        DEFAULT_NETWORK,
        "blue/net-a",
        "policy: blue/deny",
        "blue/raw",
        "red/net-b",
        "net1",
        "net2",
        "eth0",
        "10.81.0.5/24",
        "fd00:81::5/64",
        "10.82.0.6/24",
        "10.80.0.6/24",
    ):
        assert shown in texts, shown
    # the governed network: dashed and red; the others not
    (governed,) = node_shapes(out, "blue/net-a")
    assert governed.get("stroke") == GOVERNED_RED
    assert governed.get("stroke-dasharray")
    (plain,) = node_shapes(out, "red/net-b")
    assert plain.get("stroke") != GOVERNED_RED
    assert not plain.get("stroke-dasharray")
    # and a legend says what the marking means
    assert "legend" in texts
    assert "MultiNetworkPolicy" in texts


def test_png_is_a_real_picture(directory_node: DirectoryNode) -> None:
    _, out = drawn(directory_node, "networks.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 300, width
    assert height > 200, height
    assert len(data) > 10_000
    assert [p.name for p in out.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_namespace_keeps_only_its_pods(directory_node: DirectoryNode) -> None:
    _, out = drawn(directory_node, "red.svg", "--namespace", "red")
    texts = svg_texts(out)
    assert "red/db" in texts
    assert "red/net-b" in texts
    assert "blue/web" not in texts
    assert "blue/net-a" not in texts


def test_labels_are_escaped_whatever_a_status_holds(directory_node: DirectoryNode) -> None:
    # A network-status is text anyone who may edit the pod (or the status file) can write: a
    # quote, a backslash, a Graphviz escape or a newline in it must show as written.
    directory_node.add_namespace("blue")
    directory_node.add_pod("blue", "web")
    hostile = 'we"ird\\N net\\l}'
    directory_node.write_status(
        "blue",
        "web",
        [
            entry(DEFAULT_NETWORK, "eth0", ["10.80.0.5/24"], default=True),
            entry(hostile, 'if"0\nx', ["10.9.9.9/32"]),
        ],
    )
    svg = directory_node.root / "hostile.svg"
    dot = directory_node.root / "hostile.dot"

    for out in (svg, dot):
        done = netattach("graph", "--config", str(directory_node.settings), "-o", str(out))
        assert done.rc == 0, done.stderr

    texts = svg_texts(svg)
    assert hostile in texts
    assert 'if"0\\nx' in texts  # the newline shown as \n, on one line
    assert "10.9.9.9/32" in texts
    assert '"we\\"ird\\\\N net\\\\l}"' in dot.read_text()


def test_an_unknown_suffix_or_source_is_status_2(directory_node: DirectoryNode) -> None:
    picture_fixture(directory_node)
    out = directory_node.root / "networks.jpg"
    done = netattach("graph", "--config", str(directory_node.settings), "-o", str(out))
    assert done.rc == 2
    assert done.stderr == (
        f"netattach graph: -o {str(out)!r}: the file name must end in .svg, .png, .dot, .gv\n"
    )
    assert not out.exists()

    sock = directory_node.root / "none.sock"
    done = netattach("graph", "--socket", str(sock), "-o", str(directory_node.root / "x.svg"))
    assert done.rc == 2
    assert f"cannot reach the netattach daemon at {str(sock)!r}" in done.stderr


@pytest.mark.parametrize("lines", [["blue/web"], ["a\\b", 'c"d', "e\nf"]])
def test_label_escaping_round_trips_through_dot(lines: list[str]) -> None:
    from netattach.cli import graph

    text = graph.label(*lines)
    assert text.startswith('"')
    assert text.endswith('"')
    assert "\n" not in text
    # inside the quotes, every quote is escaped and every backslash pairs up
    body = text[1:-1]
    unescaped = body.replace("\\\\", "").replace('\\"', "").replace("\\n", "")
    assert '"' not in unescaped
    assert "\\" not in unescaped


def test_a_feed_directory_that_is_not_there_is_status_2_not_an_empty_picture(
    directory_node: DirectoryNode, tmp_path: Path
) -> None:
    missing = tmp_path / "no-manifests"
    config = tmp_path / "settings.yaml"
    config.write_text(f"clusterNetwork: {DEFAULT_NETWORK}\nfeed: {{directory: {str(missing)!r}}}\n")
    out = tmp_path / "graph.dot"

    done = netattach("graph", "--config", str(config), "-o", str(out))

    assert done.rc == 2
    assert done.stderr == (
        f"netattach graph: settings {str(config)!r}: feed.directory {str(missing)!r} "
        "does not exist\n"
    )
    assert not out.exists()
    listed = netattach("status", "--config", str(config))
    assert listed.rc == 2
    assert "does not exist" in listed.stderr


def groups(path: Path, kind: str) -> list[tuple[str, ET.Element]]:
    """The SVG groups of graph `kind` ("node", "edge"), each with its title."""
    root = ET.parse(path).getroot()
    found = []
    for group in root.iter(f"{SVG}g"):
        title = group.find(f"{SVG}title")
        if group.get("class") == kind and title is not None:
            found.append((title.text or "", group))
    return found


def test_each_interface_is_labelled_at_its_edge_and_a_selected_one_in_red(
    directory_node: DirectoryNode,
) -> None:
    _, out = drawn(directory_node, "networks.svg")
    # Each attachment is a row of its pod's box, where its edge leaves: no label floats between
    # the ranks, and the policy that selects blue/web on net-a is named in its row.
    boxes = {
        texts[0]: texts[1:]
        for _, group in groups(out, "node")
        if (texts := [t.text or "" for t in group.iter(f"{SVG}text")])
    }
    assert boxes["blue/web"] == [
        "eth0",
        "10.80.0.5/24",
        "net1",
        "10.81.0.5/24",
        "fd00:81::5/64",
        "policy: blue/deny",
        "net2",
    ]
    assert boxes["red/db"] == ["eth0", "10.80.0.6/24", "net1", "10.82.0.6/24"]
    edges = [group for _, group in groups(out, "edge")]
    assert len(edges) == 5
    assert all(list(edge.iter(f"{SVG}text")) == [] for edge in edges)
    strokes = [path.get("stroke") for edge in edges for path in edge.iter(f"{SVG}path")]
    assert strokes.count(GOVERNED_RED) == 1  # blue/web's net1, the one the policy selects
    assert "MultiNetworkPolicy selects" in svg_texts(out)  # the legend says what red means
