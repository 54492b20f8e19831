"""pytest plugin: under NETATTACH_REQUIRE_NETNS=1 a skipped netns test is a failure.

The one skip allowed is a kernel that lacks a link type (`require_link_kind`), which no
installation step can fix on this machine.
"""

from __future__ import annotations

import os

import pytest

ALLOWED_SKIP_PREFIX = "kernel lacks link type"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if os.environ.get("NETATTACH_REQUIRE_NETNS") != "1" or not report.skipped:
        return
    if hasattr(report, "wasxfail"):
        return  # an expected failure, reported as skipped by pytest: not a skipped test
    if item.get_closest_marker("netns") is None:
        return
    reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if ALLOWED_SKIP_PREFIX in reason:
        return
    report.outcome = "failed"
    report.longrepr = f"NETATTACH_REQUIRE_NETNS=1 but this netns test was skipped: {reason}"
