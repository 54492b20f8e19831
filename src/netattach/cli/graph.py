"""`netattach graph [--namespace NS] [source flags] -o FILE.svg|FILE.png|FILE.dot`

A picture of pods (boxes) and the networks they are attached to (ellipses): one edge per
attachment, leaving the pod's box from a row of its own that names the interface and its
addresses, so each label sits at its edge's end (edge labels between the ranks stacked in one
column, out of reach of their edges). A network that a MultiNetworkPolicy governs has a dashed
red border and the policies' names; an attachment a policy selects (its pod matches the
policy's podSelector) has a red row naming the policy and a dashed red edge; a legend says so.
The pods come from the same sources as `netattach status` (`netattach.cli.sources`).

The picture is drawn by Graphviz's `dot` (Debian package `graphviz`) from DOT text built here;
`.dot` (or `.gv`) writes that text instead. Every label is escaped for DOT: names come from
manifests and CNI configs, and a quote, a backslash or a newline in one must not change the
graph (or turn into a Graphviz escape such as `\\N`); a pod's box is an HTML-like label, whose
text is escaped as HTML (`html_text`).

Exit status: 0 when the file is written, 2 when the source cannot be read, the file name has
no known suffix, or `dot` is missing or fails.
"""

import html
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from netattach import atomic
from netattach.cli import cluster_pods, sources
from netattach.daemon import introspect

EXIT_OK = 0
EXIT_FAILED = 2
RENDERED = {".svg": "svg", ".png": "png"}
TEXT = (".dot", ".gv")
DOT_TIMEOUT = 120.0

_FONT = "Helvetica"
_POD_FILL = "#e8f0fe"
_NETWORK_FILL = "#f1f8e9"
_GOVERNED_COLOR = "#c62828"


def label(*lines: str) -> str:
    """A quoted DOT escString of `lines`, one per line: every character shown as itself."""
    escaped = []
    for line in lines:
        text = line.replace("\\", "\\\\").replace('"', '\\"')
        # A control character would end the line or vanish: show it as its Python escape.
        text = "".join(c if c.isprintable() else repr(c)[1:-1].replace("\\", "\\\\") for c in text)
        escaped.append(text)
    return '"' + "\\n".join(escaped) + '"'


def html_text(line: str) -> str:
    """`line` for an HTML-like label: every character shown as itself, a control character as
    its Python escape (as `label` shows it)."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
    return html.escape(shown, quote=True)


def _pod_box(pod: introspect.PodReport) -> str:
    """The pod's box: its name, then a row per attachment (port `a<N>`, where its edge leaves):
    the interface, its addresses, and the policies that select it, in red."""
    rows = [f'<TR><TD ALIGN="CENTER"><B>{html_text(pod.key)}</B></TD></TR>']
    for index, att in enumerate(pod.attachments):
        lines = [html_text(att.interface), *(html_text(ip) for ip in att.ips)]
        if att.policies:
            lines += [
                f'<FONT COLOR="{_GOVERNED_COLOR}">{html_text("policy: " + name)}</FONT>'
                for name in att.policies
            ]
        text = '<BR ALIGN="LEFT"/>'.join(lines) + '<BR ALIGN="LEFT"/>'
        side = f' COLOR="{_GOVERNED_COLOR}"' if att.policies else ""
        rows.append(f'<TR><TD PORT="a{index}" ALIGN="LEFT" SIDES="T"{side}>{text}</TD></TR>')
    return (
        f'<<TABLE BORDER="1" CELLBORDER="1" CELLSPACING="0" CELLPADDING="4" STYLE="ROUNDED" '
        f'BGCOLOR="{_POD_FILL}">' + "".join(rows) + "</TABLE>>"
    )


def _attrs(**values: str) -> str:
    # Values given already quoted (labels) or as DOT identifiers/numbers written here.
    return "[" + ", ".join(f"{key}={value}" for key, value in values.items()) + "]"


def _governed(listing: cluster_pods.Listing) -> dict[str, set[str]]:
    """Network status name -> the policies governing it (on any pod shown, or named by one)."""
    found: dict[str, set[str]] = {}
    for policy in listing.policies:
        for network in policy.networks:
            found.setdefault(network, set()).add(policy.key)
    for pod in listing.pods:
        for att in pod.attachments:
            if att.policies:
                found.setdefault(att.network, set()).update(att.policies)
    return found


def _legend() -> Iterable[str]:
    yield "  subgraph cluster_legend {"
    frame = _attrs(label=label("legend"), fontname=_FONT, style="dashed", color="gray")
    yield f"    graph {frame};"
    yield (
        "    legend_pod "
        + _attrs(
            label=label("pod"), shape="box", style='"rounded,filled"', fillcolor=f'"{_POD_FILL}"'
        )
        + ";"
    )
    yield (
        "    legend_network "
        + _attrs(
            label=label("network"), shape="ellipse", style="filled", fillcolor=f'"{_NETWORK_FILL}"'
        )
        + ";"
    )
    yield (
        "    legend_governed "
        + _attrs(
            label=label("network governed by a", "MultiNetworkPolicy"),
            shape="ellipse",
            style='"dashed,bold,filled"',
            color=f'"{_GOVERNED_COLOR}"',
            fillcolor=f'"{_NETWORK_FILL}"',
        )
        + ";"
    )
    selected = _attrs(
        label=label("a pod's interface that a", "MultiNetworkPolicy selects"),
        shape="box",
        style='"rounded,dashed"',
        color=f'"{_GOVERNED_COLOR}"',
        fontcolor=f'"{_GOVERNED_COLOR}"',
    )
    yield f"    legend_selected {selected};"
    yield "    legend_pod -- legend_network -- legend_governed -- legend_selected [style=invis];"
    yield "  }"


def build_dot(listing: cluster_pods.Listing, title: str) -> str:
    """The DOT text of the listing's pods, their networks and attachments."""
    governed = _governed(listing)
    lines = [
        "graph netattach {",
        f"  graph {_attrs(rankdir='LR', label=label(title), labelloc='t', fontname=_FONT)};",
        f"  node {_attrs(fontname=_FONT)};",
        f"  edge {_attrs(fontname=_FONT, fontsize='10')};",
    ]
    networks: dict[str, str] = {}  # status name -> node id
    for pod in listing.pods:
        for att in pod.attachments:
            networks.setdefault(att.network, f"network{len(networks)}")
    for network, node in networks.items():
        if network in governed:
            policies = ", ".join(sorted(governed[network]))
            attrs = _attrs(
                label=label(network, f"policy: {policies}"),
                shape="ellipse",
                style='"dashed,bold,filled"',
                color=f'"{_GOVERNED_COLOR}"',
                fillcolor=f'"{_NETWORK_FILL}"',
            )
        else:
            attrs = _attrs(
                label=label(network),
                shape="ellipse",
                style="filled",
                fillcolor=f'"{_NETWORK_FILL}"',
            )
        lines.append(f"  {node} {attrs};")
    for index, pod in enumerate(listing.pods):
        node = f"pod{index}"
        lines.append(f"  {node} {_attrs(label=_pod_box(pod), shape='plain')};")
        for port, att in enumerate(pod.attachments):
            style = "bold" if att.default else "solid"
            if att.policies:
                edge = _attrs(style='"dashed,bold"', color=f'"{_GOVERNED_COLOR}"')
            else:
                edge = _attrs(style=style)
            lines.append(f"  {node}:a{port}:e -- {networks[att.network]} {edge};")
    lines.extend(_legend())
    lines.append("}")
    return "\n".join(lines) + "\n"


def _render(dot_text: str, output: Path) -> str | None:
    """Write `output` from `dot_text`; the reason when it could not be."""
    suffix = output.suffix.lower()
    if suffix in TEXT:
        try:
            atomic.write_atomic(output, dot_text.encode(), mode=0o644)
        except OSError as exc:
            return f"cannot write {str(output)!r}: {exc.strerror or exc}"
        return None
    dot = shutil.which("dot")
    if dot is None:
        return "Graphviz's `dot` is not installed (Debian package graphviz)"
    # Beside the target, then renamed: a reader never sees half a picture.
    partial = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run(
            [dot, f"-T{RENDERED[suffix]}", "-o", str(partial)],
            input=dot_text.encode(),
            capture_output=True,
            timeout=DOT_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            return f"dot failed ({done.returncode}): {done.stderr.decode(errors='replace')[-400:]}"
        os.replace(partial, output)
    except subprocess.TimeoutExpired:
        return f"dot did not finish within {DOT_TIMEOUT:g}s"
    except OSError as exc:
        return f"cannot write {str(output)!r}: {exc.strerror or exc}"
    finally:
        partial.unlink(missing_ok=True)
    return None


def run(
    *,
    output: str,
    namespace: str | None,
    source: sources.Source,
    stdout: TextIO,
    stderr: TextIO,
    prog: str = "netattach graph",
) -> int:
    path = Path(output)
    if path.suffix.lower() not in (*RENDERED, *TEXT):
        known = ", ".join((*RENDERED, *TEXT))
        print(f"{prog}: -o {output!r}: the file name must end in {known}", file=stderr)
        return EXIT_FAILED
    try:
        listing = sources.read(source, namespace=namespace or "")
    except sources.SourceError as exc:
        print(f"{prog}: {exc}", file=stderr)
        return EXIT_FAILED
    scope = f"namespace {namespace}" if namespace else "all namespaces"
    title = f"netattach: pods and their networks ({scope}, from {source.describe()})"
    failure = _render(build_dot(listing, title), path)
    if failure is not None:
        print(f"{prog}: {failure}", file=stderr)
        return EXIT_FAILED
    networks = {att.network for pod in listing.pods for att in pod.attachments}
    print(f"wrote {path}: {len(listing.pods)} pods, {len(networks)} networks", file=stdout)
    return EXIT_OK
