"""The documentation stays true to the code it describes.

Each test reads docs/*.md (and README.md) and checks them against the code itself, never against
a list written here: every key the settings module accepts is documented with its real default,
every CNI error code netattach can emit has a row in the troubleshooting guide, every requirement
ID has a row in the conformance table, every relative link resolves, every `netattach` command
named in code exists with the options shown, and every YAML or JSON example passes
`netattach validate`.
"""

import argparse
import copy
import dataclasses
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from netattach.cli import main as cli_main
from netattach.cli import validate
from netattach.cni import errors
from netattach.pods import dispatch
from netattach.settings import daemon as daemon_settings
from netattach.settings import settings
from tests import requirements_report

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DOC_FILES = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]
CONFIGURATION = DOCS / "configuration.md"
TROUBLESHOOTING = DOCS / "troubleshooting.md"
CONFORMANCE = DOCS / "conformance.md"
# The project's requirements list lives beside the repository, not in it.
REQUIREMENTS = Path(os.environ.get("NETATTACH_REQUIREMENTS", "/work/shared/spec/REQUIREMENTS.md"))

_FENCE = re.compile(
    r"^```(?P<lang>[\w-]*)(?P<info>[^\n]*)\n(?P<body>.*?)^```", re.MULTILINE | re.DOTALL
)
_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (?P<title>.+)$", re.MULTILINE)
_TABLE_ROW = re.compile(r"^\|(?P<cells>.*)\|\s*$")
_REQUIREMENT_ROW = re.compile(r"^\|\s*(?P<id>[A-Z]+-[A-Z0-9]+)\s*\|", re.MULTILINE)
# A command at the start of a code span or of a shell command: `$ `, `VAR=value ` may come first.
_COMMAND = re.compile(
    r"^(?:\$ )?(?:[A-Z_]+=\S* )*(?P<prog>kubectl netattach|netattach) (?P<sub>[a-z][-a-z]*)"
    r"(?P<rest>.*)$"
)
_OPTION = re.compile(r"^(--?[A-Za-z][\w-]*)")
_SHELL_LANGS = ("sh", "bash", "console", "shell")
# What separates the commands of a shell line, and where a command's arguments end.
_SHELL_SEPARATOR = re.compile(r"\s(?:\||;|&&)\s")
_ARGUMENTS_END = re.compile(r"\s(?:#|>|<<|2>)")

# A key name no settings key resembles, to make the settings module list the keys it knows.
_PROBE_KEY = "zzdocsprobe"
_NODE = "docs-probe-node"
# Two valid settings mappings, one per feed, that each key is checked within.
_BASES: tuple[dict[str, Any], ...] = (
    {"clusterNetwork": "docs-probe", "feed": {"directory": "/docs-probe"}},
    {"clusterNetwork": "docs-probe", "feed": {"kubernetes": {}}},
)


# --- reading Markdown ------------------------------------------------------------------------


def prose(text: str) -> str:
    """`text` without its fenced code blocks."""
    return _FENCE.sub("", text)


def command_lines(text: str) -> Iterator[str]:
    """The text of every inline code span, and every command of every shell block."""
    for fence in _FENCE.finditer(text):
        if fence["lang"] in _SHELL_LANGS:
            for line in fence["body"].splitlines():
                yield from (part.strip() for part in _SHELL_SEPARATOR.split(line))
    for span in _SPAN.finditer(prose(text)):
        yield span.group(1)


def slug(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.finditer(prose(text)):
        base = slug(heading["title"])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of each row of the first table whose header row is `header`."""
    lines = prose(text).splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:
        row = _TABLE_ROW.match(line)
        if row is None:
            break
        rows.append([cell.strip() for cell in row["cells"].split("|")])
    return rows


# --- settings keys, as the settings module accepts them --------------------------------------


def nest(path: tuple[str, ...], value: object) -> dict[str, Any]:
    return {path[0]: value if len(path) == 1 else nest(path[1:], value)}


def with_key(base: Mapping[str, Any], path: tuple[str, ...], value: object) -> dict[str, Any]:
    """`base` with the top-level key of `path` replaced by a mapping holding only `path`."""
    return {**copy.deepcopy(dict(base)), **nest(path, value)}


def children(path: tuple[str, ...]) -> list[str]:
    """The keys the module accepts under `path` (or at the top), from its unknown-key problem."""
    raw = {_PROBE_KEY: 1} if not path else with_key(_BASES[0], path, {_PROBE_KEY: 1})
    where = ".".join((*path, _PROBE_KEY))
    for problem in settings.settings_problems(raw):
        known = re.match(rf"{re.escape(where)}: unknown key \(known: (?P<keys>[^)]*)\)", problem)
        if known is not None:
            return known["keys"].split(", ")
    return []


def accepted_keys() -> list[str]:
    """Every key the settings module accepts, nested ones dotted (`readiness.mode`)."""
    found: list[str] = []
    pending: list[tuple[str, ...]] = [(name,) for name in children(())]
    while pending:
        path = pending.pop(0)
        found.append(".".join(path))
        pending += [(*path, name) for name in children(path)]
    return found


def documented_keys() -> dict[str, list[str]]:
    """The rows of configuration.md's key table: key → [type, default, meaning]."""
    rows = table_rows(CONFIGURATION.read_text(), "| key | type | default | meaning |")
    return {row[0].strip("`"): row[1:] for row in rows}


def settings_of(raw: Mapping[str, Any]) -> settings.Settings | None:
    if settings.settings_problems(raw):
        return None
    return settings.parse_settings(raw, source="<settings>")


def variants(path: tuple[str, ...], value: object) -> Iterator[tuple[dict[str, Any], ...]]:
    """Per base: the key left out (its parents there), and the key given `value`."""
    for base in _BASES:
        without = copy.deepcopy(base)
        parent: dict[str, Any] = without
        for name in path[:-1]:
            parent = parent.setdefault(name, {})
        parent.pop(path[-1], None)
        given = copy.deepcopy(without)
        parent = given
        for name in path[:-1]:
            parent = parent[name]
        parent[path[-1]] = value
        yield without, given


def default_problem(key: str, cell: str, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Why the documented default `cell` of `key` is not the module's, or None when it is."""
    path = tuple(key.split("."))
    if cell == "required":
        raw = copy.deepcopy(_BASES[0])
        raw.pop(key, None)
        problems = settings.settings_problems(raw)
        if any(p.startswith(f"{key}: required") for p in problems):
            return None
        return f"documented as required, but leaving it out gives {problems}"
    if cell.startswith("none"):
        if any(settings_of(without) is not None for without, _ in variants(path, None)):
            return None
        return "documented as none, but no valid settings leave it out"
    env = re.search(r"environment variable `(?P<var>\w+)`", cell)
    literal = _SPAN.search(cell)
    if env is not None:
        monkeypatch.setenv(env["var"], _NODE)
        value: object = _NODE
    elif literal is not None:
        value = yaml.safe_load(literal.group(1))
    else:
        return f"the default {cell!r} is neither required, none, nor a `value`"
    for without, given in variants(path, value):
        left_out, written = settings_of(without), settings_of(given)
        if left_out is not None and left_out == written:
            return None
    return f"writing the documented default {value!r} does not give the settings leaving it out"


@pytest.fixture(autouse=True)
def node_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # The Kubernetes feed needs a Node name; this machine's hostname may not be one.
    monkeypatch.setenv(daemon_settings.NODE_NAME_ENV, _NODE)


def test_the_probe_finds_the_settings_modules_top_level_keys() -> None:
    assert children(()) == list(settings.KEYS)
    assert {"readiness.mode", "metrics.address", "feed.kubernetes.kubeconfig"} <= set(
        accepted_keys()
    )


def test_every_settings_key_is_documented_with_type_default_and_meaning() -> None:
    documented = documented_keys()

    missing = [key for key in accepted_keys() if key not in documented]
    empty = [key for key, cells in documented.items() if len(cells) < 3 or not all(cells[:3])]

    assert missing == [], f"docs/configuration.md's key table lacks {missing}"
    assert empty == [], f"docs/configuration.md's key table has rows with empty cells: {empty}"


def test_every_documented_settings_key_is_accepted() -> None:
    accepted = set(accepted_keys())

    unknown = [key for key in documented_keys() if key not in accepted]

    assert unknown == [], f"docs/configuration.md documents keys the settings refuse: {unknown}"


@pytest.mark.parametrize("key", accepted_keys())
def test_the_documented_default_is_the_modules(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cells = documented_keys().get(key)
    assert cells is not None, f"{key} is not in docs/configuration.md's key table"

    assert default_problem(key, cells[1], monkeypatch) is None, (
        f"{key}: {default_problem(key, cells[1], monkeypatch)}"
    )


# --- error codes -----------------------------------------------------------------------------


def emitted_codes() -> set[int]:
    """Every CNI code netattach's own errors carry: one class per code, and the daemon's table."""
    return {cls.code for cls in errors.BY_CODE.values()} | {
        cni.code for _, cni in dispatch.ERROR_TABLE
    }


def test_every_error_code_has_a_row_in_the_troubleshooting_guide() -> None:
    rows = table_rows(
        TROUBLESHOOTING.read_text(), "| code | meaning | what causes it in netattach | what to do |"
    )
    documented = {int(row[0]) for row in rows}

    assert sorted(emitted_codes() - documented) == []
    assert sorted(documented - emitted_codes()) == [], "rows for codes netattach does not have"
    assert all(all(cell for cell in row) for row in rows)


# --- requirement IDs -------------------------------------------------------------------------


@pytest.mark.skipif(not REQUIREMENTS.is_file(), reason=f"no requirements list at {REQUIREMENTS}")
def test_every_requirement_id_has_a_row_in_the_conformance_table() -> None:
    required = _REQUIREMENT_ROW.findall(REQUIREMENTS.read_text())
    listed = requirements_report.load_requirement_ids(CONFORMANCE)

    assert required, f"no requirement IDs read from {REQUIREMENTS}"
    assert [rid for rid in required if rid not in listed] == []


def test_every_conformance_row_has_a_status() -> None:
    rows = [line for line in CONFORMANCE.read_text().splitlines() if _REQUIREMENT_ROW.match(line)]

    assert len(rows) == len(requirements_report.load_requirement_ids(CONFORMANCE))
    assert [row for row in rows if not re.search(r"\| (PROVEN|MISSING)\b[^|]*\|$", row)] == []


# --- links -----------------------------------------------------------------------------------


def relative_links() -> Iterator[tuple[Path, str]]:
    for doc in DOC_FILES:
        for link in _LINK.finditer(prose(doc.read_text())):
            target = link["target"]
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # no scheme: relative
                yield doc, target


def test_the_docs_have_relative_links() -> None:
    assert {doc.name for doc, _ in relative_links()} >= {"README.md", "quickstart.md"}


@pytest.mark.parametrize(
    ("doc", "target"),
    list(relative_links()),
    ids=[f"{doc.name}:{target}" for doc, target in relative_links()],
)
def test_every_relative_link_resolves(doc: Path, target: str) -> None:
    path_text, _, fragment = target.partition("#")
    path = (doc.parent / path_text).resolve() if path_text else doc

    assert path.exists(), f"{doc.name} links to {target}, which does not exist"
    if fragment:
        assert path.suffix == ".md", f"{doc.name} links into a non-Markdown file: {target}"
        assert fragment in anchors(path.read_text()), f"{doc.name}: no heading for {target}"


# --- commands --------------------------------------------------------------------------------


def subcommands(parser: argparse.ArgumentParser) -> Mapping[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@dataclasses.dataclass(frozen=True)
class Mention:
    doc: str
    prog: str
    sub: str
    options: tuple[str, ...]


def command_mentions() -> list[Mention]:
    """Every `netattach SUB ...` and `kubectl netattach SUB ...` the docs show as a command."""
    found = []
    for doc in DOC_FILES:
        for line in command_lines(doc.read_text()):
            hit = _COMMAND.match(line)
            if hit is None:
                continue
            arguments = _ARGUMENTS_END.split(hit["rest"])[0].split()
            options = tuple(
                match.group(1) for token in arguments if (match := _OPTION.match(token.strip("[]")))
            )
            found.append(Mention(doc.name, hit["prog"], hit["sub"], options))
    return found


def parser_for(prog: str) -> argparse.ArgumentParser:
    if prog == "netattach":
        return cli_main.build_parser()
    build_kubectl = getattr(cli_main, "build_kubectl_parser", None)
    assert build_kubectl is not None, (
        "the docs show `kubectl netattach`; the CLI has no parser for it"
    )
    parser: argparse.ArgumentParser = build_kubectl()
    return parser


def test_the_docs_name_commands() -> None:
    assert {m.sub for m in command_mentions() if m.prog == "netattach"} >= {"demo", "validate"}


@pytest.mark.parametrize(
    "mention", command_mentions(), ids=lambda m: f"{m.doc}:{m.prog} {m.sub} {' '.join(m.options)}"
)
def test_every_command_in_the_docs_exists_with_its_options(mention: Mention) -> None:
    commands = subcommands(parser_for(mention.prog))

    assert mention.sub in commands, f"{mention.doc}: `{mention.prog} {mention.sub}` is no command"
    known = commands[mention.sub]._option_string_actions
    assert [opt for opt in mention.options if opt not in known] == [], (
        f"{mention.doc}: `{mention.prog} {mention.sub}` has no such option"
    )


# --- examples --------------------------------------------------------------------------------


def examples() -> list[tuple[str, int, str, str]]:
    """(doc, index, language, text) of every fenced YAML or JSON block of netattach's."""
    found = []
    for doc in DOC_FILES:
        for index, fence in enumerate(_FENCE.finditer(doc.read_text())):
            # A block whose info string names something else (```json multus) is not ours.
            if fence["lang"] in ("yaml", "json") and not fence["info"].strip():
                found.append((doc.name, index, fence["lang"], fence["body"]))
    return found


@pytest.mark.parametrize(
    ("doc", "index", "lang", "text"), examples(), ids=[f"{e[0]}#{e[1]}" for e in examples()]
)
def test_every_example_passes_netattach_validate(
    doc: str, index: int, lang: str, text: str, tmp_path: Path
) -> None:
    example = tmp_path / f"example.{lang}"
    example.write_text(text)
    out = io.StringIO()

    status = validate.run([str(example)], stdin=io.StringIO(), stdout=out)

    assert status == validate.EXIT_OK, f"{doc} block {index}:\n{out.getvalue()}"


# --- the conformance table's refresh script --------------------------------------------------


def test_the_conformance_script_marks_what_a_run_proves(tmp_path: Path) -> None:
    # A real run of the script over one small test file: its IDs come out PROVEN, naming the
    # file, the others MISSING, and with --stdout the document itself is left alone.
    before = CONFORMANCE.read_bytes()
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "conformance-table.py"),
            "--stdout",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/repo/test_crds.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "PROVEN NAD-CRD" in done.stdout  # the requirement report itself ran
    rows = {
        row.split("|")[1].strip(): row for row in done.stdout.splitlines() if row.startswith("| ")
    }
    assert "PROVEN by" in rows["NAD-CRD"]
    assert "`tests/repo/test_crds.py`" in rows["NAD-CRD"]
    assert rows["RT-DEL"].endswith("| MISSING |")
    assert set(requirements_report.load_requirement_ids(CONFORMANCE)) <= set(rows)
    assert CONFORMANCE.read_bytes() == before
