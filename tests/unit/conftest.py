"""Fixtures of the unit tests that need more than the standard library."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests import go_decoder


@pytest.fixture(scope="session")
def cnidecode() -> go_decoder.Decoder:
    """The Go decoder of tests/go/cnidecode, built once per source (skips without Go)."""
    return go_decoder.build_decoder()


@pytest.fixture
def umask_zero() -> Iterator[None]:
    """Umask 0, so a file's mode is exactly what the code asked for."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)
