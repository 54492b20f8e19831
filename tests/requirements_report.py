"""pytest plugin: `@pytest.mark.req("ID")` markers and the `--req-report` summary.

The IDs come from docs/conformance.md (the first column of its tables). A marker naming an ID that
the document does not list fails the test, so a typo cannot prove anything.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CONFORMANCE = Path(__file__).resolve().parent.parent / "docs" / "conformance.md"
_ROW = re.compile(r"^\|\s*`?([A-Z]+-[A-Z0-9]+)`?\s*\|")

_proven: set[str] = set()
_attempted: set[str] = set()


def load_requirement_ids(path: Path = CONFORMANCE) -> list[str]:
    """The requirement IDs in the order the conformance document lists them."""
    ids: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match and match.group(1) not in ids:
            ids.append(match.group(1))
    return ids


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--req-report",
        action="store_true",
        help="after the run, print PROVEN/MISSING for every requirement ID in docs/conformance.md",
    )


def _marked_ids(item: pytest.Item) -> list[str]:
    ids: list[str] = []
    for mark in item.iter_markers("req"):
        ids.extend(str(arg) for arg in mark.args)
    return ids


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    known = set(load_requirement_ids())
    for item in items:
        unknown = [rid for rid in _marked_ids(item) if rid not in known]
        if unknown:
            item.add_marker(
                pytest.mark.xfail(
                    reason=f"unknown requirement ID(s) {unknown}", strict=True, run=False
                )
            )
            item.user_properties.append(("unknown_req", unknown))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    ids = _marked_ids(item)
    if not ids:
        return
    if report.when == "call":
        _attempted.update(ids)
        if report.passed and not hasattr(report, "wasxfail"):
            _proven.update(ids)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    if not config.getoption("--req-report"):
        return
    ids = load_requirement_ids()
    terminalreporter.section("requirements")
    proven = 0
    for rid in ids:
        if rid in _proven:
            proven += 1
            terminalreporter.write_line(f"PROVEN {rid}")
        else:
            terminalreporter.write_line(f"MISSING {rid}")
    terminalreporter.write_line(f"requirements: {proven} proven, {len(ids) - proven} missing")
