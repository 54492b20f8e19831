"""The suite's own rules: requirement reporting and the netns-skip policy behave as documented."""

from __future__ import annotations

import pytest

from tests import requirements_report

PLUGINS = """
pytest_plugins = ["tests.requirements_report", "tests.netns_policy"]
"""

TESTS = """
import pytest

@pytest.mark.req("CNI-FIND")
def test_proves_find():
    assert True

@pytest.mark.req("CNI-ENV")
def test_fails_env():
    assert False

@pytest.mark.req("NO-SUCH")
def test_unknown_id():
    assert True

@pytest.mark.netns
def test_skips_without_root():
    pytest.skip("netns tests need root")

@pytest.mark.netns
def test_skips_for_the_kernel():
    pytest.skip("kernel lacks link type 'ipvlan'")

@pytest.mark.netns
@pytest.mark.xfail(strict=True, reason="a known bug")
def test_known_bug():
    assert False
"""


def run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *, require_netns: bool
) -> pytest.RunResult:
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    pytester.makeconftest(PLUGINS)
    pytester.makepyfile(test_sample=TESTS)
    pytester.makeini("[pytest]\nmarkers =\n    req(id): x\n    netns: y\n")
    if require_netns:
        monkeypatch.setenv("NETATTACH_REQUIRE_NETNS", "1")
    else:
        monkeypatch.delenv("NETATTACH_REQUIRE_NETNS", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(root))
    return pytester.runpytest_subprocess("--req-report", "-p", "no:cacheprovider")


def test_req_report_lists_proven_and_missing_ids_and_refuses_unknown_ones(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(pytester, monkeypatch, require_netns=False)
    lines = result.outlines
    assert "PROVEN CNI-FIND" in lines
    assert "MISSING CNI-ENV" in lines  # its only test failed
    assert "MISSING NAD-CRD" in lines
    assert not any("NO-SUCH" in line and line.startswith("PROVEN") for line in lines)
    summary = [line for line in lines if line.startswith("requirements: ")]
    # every ID of docs/conformance.md but the one proven
    missing = len(requirements_report.load_requirement_ids()) - 1
    assert summary == [f"requirements: 1 proven, {missing} missing"]
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1
    assert outcomes["xfailed"] == 2  # the unknown ID and the known bug


def test_a_skipped_netns_test_fails_when_netns_is_required(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    relaxed = run(pytester, monkeypatch, require_netns=False).parseoutcomes()
    assert relaxed["skipped"] == 2
    strict = run(pytester, monkeypatch, require_netns=True)
    outcomes = strict.parseoutcomes()
    assert outcomes["skipped"] == 1  # only the missing link type
    assert outcomes["failed"] == 2  # test_fails_env and the root skip
    assert outcomes["xfailed"] == 2  # an expected failure is not a skipped netns test
    strict.stdout.fnmatch_lines(["*NETATTACH_REQUIRE_NETNS=1 but this netns test was skipped*"])
