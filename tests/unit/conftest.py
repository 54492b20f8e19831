"""Fixtures of the unit tests that need more than the standard library."""

from __future__ import annotations

import pytest

from tests import go_decoder


@pytest.fixture(scope="session")
def cnidecode() -> go_decoder.Decoder:
    """The Go decoder of tests/go/cnidecode, built once per source (skips without Go)."""
    return go_decoder.build_decoder()
