"""`netattach.loggers`: `logging` imported only when a line is due, the records as `logging`'s."""

from __future__ import annotations

import logging

import pytest

from netattach import loggers


def test_each_level_names_its_caller_and_exception_carries_the_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = loggers.get("netattach.test-loggers")
    with caplog.at_level(logging.DEBUG, logger="netattach.test-loggers"):
        log.debug("d %s", 1)
        log.info("i")
        log.warning("w")
        log.error("e")
        log.log(logging.INFO, "l")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("x")
    records = [r for r in caplog.records if r.name == "netattach.test-loggers"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.DEBUG, "d 1"),
        (logging.INFO, "i"),
        (logging.WARNING, "w"),
        (logging.ERROR, "e"),
        (logging.INFO, "l"),
        (logging.ERROR, "x"),
    ]
    assert {r.funcName for r in records} == {
        "test_each_level_names_its_caller_and_exception_carries_the_traceback"
    }
    assert records[-1].exc_info is not None
    assert records[-1].exc_info[0] is ValueError


def test_a_line_below_the_level_is_not_made(caplog: pytest.LogCaptureFixture) -> None:
    log = loggers.get("netattach.test-loggers-quiet")
    with caplog.at_level(logging.WARNING, logger="netattach.test-loggers-quiet"):
        log.info("not shown")
        log.warning("shown")
    assert [r.getMessage() for r in caplog.records if r.name.endswith("quiet")] == ["shown"]
