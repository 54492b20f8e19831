"""Shared test configuration: requirement markers and the netns-skip policy."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["tests.requirements_report", "tests.netns_fixtures"]

# Skips of a netns test that CI accepts under NETATTACH_REQUIRE_NETNS=1: the kernel lacks a link type.
ALLOWED_SKIP_PREFIX = "kernel lacks link type"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if os.environ.get("NETATTACH_REQUIRE_NETNS") != "1" or not report.skipped:
        return
    if item.get_closest_marker("netns") is None:
        return
    reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if ALLOWED_SKIP_PREFIX in reason:
        return
    report.outcome = "failed"
    report.longrepr = f"NETATTACH_REQUIRE_NETNS=1 but this netns test was skipped: {reason}"
