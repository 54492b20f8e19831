#!/usr/bin/env python3
"""Refresh the requirement table of docs/conformance.md from a run of the test suite.

    .venv/bin/python scripts/conformance-table.py [--stdout] [--requirements FILE] [PYTEST_ARG...]

Runs pytest in this process with `--req-report`, so the report of tests/requirements_report.py
prints its PROVEN/MISSING lines as in `make test`, and with a small plugin of its own that notes
which tests carry which requirement ID and whether they passed. The same rule as the report
decides: an ID is PROVEN when at least one test carrying it passed (an xfail does not count).
Then the part of docs/conformance.md between the BEGIN and END markers is rewritten: each row
keeps its ID, level and "in short" text and gets a status cell naming the test files that prove
it. Everything outside the markers (the introduction, the deviations) is left as it is.

`--requirements FILE` names the project's requirements list (a Markdown file with `| ID | level |
requirement |` rows); IDs it has and the table lacks get a row in the section of their prefix,
with the first sentence of the requirement as its text, to be shortened by hand. `--stdout`
prints the new table instead of writing the file. PYTEST_ARGs choose what to run (by default the
whole suite, as `make test` runs it; the netns and e2e tiers need root). Run from anywhere.

Exit status: pytest's when it could not run the tests (interrupted, usage error, nothing
collected), else 0; failing tests do not stop the refresh, they only leave their IDs unproven.
"""

import argparse
import collections
import dataclasses
import datetime
import os
import re
import sys
from collections.abc import Generator, Iterable, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = ROOT / "docs" / "conformance.md"
BEGIN = "<!-- BEGIN conformance-table (scripts/conformance-table.py rewrites this part) -->"
END = "<!-- END conformance-table -->"
HEADER = "| ID | level | in short | status |"
RULE = "| --- | --- | --- | --- |"
# Test files named in a status cell; the rest are counted.
SHOWN_FILES = 3

_ROW = re.compile(r"^\|\s*`?(?P<id>[A-Z]+-[A-Z0-9]+)`?\s*\|(?P<rest>.*)\|\s*$")
_REQUIREMENT = re.compile(
    r"^\|\s*(?P<id>[A-Z]+-[A-Z0-9]+)\s*\|\s*(?P<level>[^|]+?)\s*\|\s*(?P<text>.+?)\s*\|\s*$"
)
# pytest.main's exit codes that mean the tests did not run as asked.
_NOT_RUN = (
    pytest.ExitCode.INTERRUPTED,
    pytest.ExitCode.INTERNAL_ERROR,
    pytest.ExitCode.USAGE_ERROR,
    pytest.ExitCode.NO_TESTS_COLLECTED,
)


class TableError(Exception):
    """docs/conformance.md or the requirements list is not shaped as this script expects."""


@dataclasses.dataclass
class Row:
    id: str
    level: str
    summary: str


@dataclasses.dataclass
class Section:
    heading: str
    rows: list[Row]


class Collector:
    """A pytest plugin: for each requirement ID, the tests that carry it and those that passed."""

    def __init__(self) -> None:
        self.carried: dict[str, set[str]] = collections.defaultdict(set)
        self.passed: dict[str, set[str]] = collections.defaultdict(set)

    @staticmethod
    def _ids(item: pytest.Item) -> list[str]:
        return [str(arg) for mark in item.iter_markers("req") for arg in mark.args]

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            for rid in self._ids(item):
                self.carried[rid].add(item.nodeid)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        # The rule of tests/requirements_report.py: the call phase passed, and not as an xfail.
        if report.when == "call" and report.passed and not hasattr(report, "wasxfail"):
            for rid in self._ids(item):
                self.passed[rid].add(item.nodeid)
        return report


def split_document(text: str) -> tuple[str, str, str]:
    """(before, table, after) around the markers."""
    try:
        start = text.index(BEGIN) + len(BEGIN)
        end = text.index(END, start)
    except ValueError as exc:
        raise TableError(f"{CONFORMANCE} lacks the markers {BEGIN!r} and {END!r}") from exc
    return text[:start], text[start:end], text[end:]


def parse_table(table: str) -> list[Section]:
    """The sections (`## ` headings) and their rows, as the generated part holds them."""
    sections: list[Section] = []
    for line in table.splitlines():
        if line.startswith("## "):
            sections.append(Section(heading=line, rows=[]))
            continue
        found = _ROW.match(line)
        if found is None:
            continue
        if not sections:
            raise TableError(f"row {found['id']} comes before any '## ' heading")
        cells = [cell.strip() for cell in found["rest"].split("|")]
        if len(cells) < 2:
            raise TableError(f"row {found['id']} needs a level and an 'in short' cell: {line!r}")
        sections[-1].rows.append(Row(id=found["id"], level=cells[0], summary=cells[1]))
    return sections


def read_requirements(path: Path) -> list[Row]:
    """The `| ID | level | requirement |` rows of the requirements list."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        found = _REQUIREMENT.match(line)
        if found is not None:
            rows.append(Row(id=found["id"], level=found["level"], summary=found["text"]))
    if not rows:
        raise TableError(f"{path} has no '| ID | level | requirement |' rows")
    return rows


def first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + "." if dot else text


def add_missing(sections: list[Section], requirements: Iterable[Row]) -> list[str]:
    """Give every requirement the table lacks a row, in the section of its prefix."""
    present = {row.id for section in sections for row in section.rows}
    added = []
    for requirement in requirements:
        if requirement.id in present:
            continue
        prefix = requirement.id.split("-")[0] + "-"
        home = next((s for s in sections if any(r.id.startswith(prefix) for r in s.rows)), None)
        if home is None:
            home = Section(heading="## Other requirements", rows=[])
            sections.append(home)
        summary = first_sentence(requirement.summary)
        home.rows.append(Row(id=requirement.id, level=requirement.level, summary=summary))
        present.add(requirement.id)
        added.append(requirement.id)
    return added


def status_cell(rid: str, collector: Collector) -> str:
    passed = collector.passed.get(rid, set())
    if not passed:
        carried = len(collector.carried.get(rid, ()))
        if carried:
            return f"MISSING ({carried} tests carry it, none passed)"
        return "MISSING"
    by_file = collections.Counter(nodeid.split("::")[0] for nodeid in passed)
    files = sorted(by_file, key=lambda name: (-by_file[name], name))
    shown = ", ".join(f"`{name}` ({by_file[name]})" for name in files[:SHOWN_FILES])
    more = len(files) - SHOWN_FILES
    tail = f" and {more} more files" if more > 0 else ""
    count = len(passed)
    return f"PROVEN by {count} test{'s' if count != 1 else ''}: {shown}{tail}"


def render_table(sections: Sequence[Section], collector: Collector, exit_code: int) -> str:
    rows = [row for section in sections for row in section.rows]
    proven = sum(1 for row in rows if collector.passed.get(row.id))
    today = datetime.date.today().isoformat()
    lines = [
        "",
        "",
        f"Refreshed {today}: {proven} of {len(rows)} requirements proven "
        f"(pytest exit status {exit_code}).",
    ]
    for section in sections:
        lines += ["", section.heading, HEADER, RULE]
        for row in section.rows:
            cell = status_cell(row.id, collector)
            lines.append(f"| {row.id} | {row.level} | {row.summary} | {cell} |")
    return "\n".join(lines) + "\n\n"


def run_suite(pytest_args: Sequence[str]) -> tuple[Collector, int]:
    collector = Collector()
    os.chdir(ROOT)
    exit_code = pytest.main(["--req-report", *pytest_args], plugins=[collector])
    return collector, int(exit_code)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Refresh docs/conformance.md's requirement table from a test run."
    )
    parser.add_argument("--stdout", action="store_true", help="print the table, write nothing")
    parser.add_argument(
        "--requirements", type=Path, help="the requirements list, to add rows for new IDs"
    )
    args, pytest_args = parser.parse_known_args(argv)
    try:
        before, table, after = split_document(CONFORMANCE.read_text(encoding="utf-8"))
        sections = parse_table(table)
        added = []
        if args.requirements is not None:
            added = add_missing(sections, read_requirements(args.requirements))
    except (OSError, TableError) as exc:
        print(f"conformance-table: {exc}", file=sys.stderr)
        return 2
    collector, exit_code = run_suite(pytest_args)
    if exit_code in _NOT_RUN:
        print(f"conformance-table: pytest did not run (exit {exit_code}): nothing written")
        return exit_code
    new_table = render_table(sections, collector, exit_code)
    if args.stdout:
        sys.stdout.write(new_table)
    else:
        CONFORMANCE.write_text(before + new_table + after, encoding="utf-8")
        print(f"conformance-table: rewrote {CONFORMANCE.relative_to(ROOT)}")
    for rid in added:
        print(f"conformance-table: added a row for {rid}; shorten its 'in short' text by hand")
    return 0


if __name__ == "__main__":
    sys.exit(main())
