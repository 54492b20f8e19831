"""Driving an orchestrator built by `tests.builders.orchestrated` through the calls a test
makes of it, and what those calls end with."""

from __future__ import annotations

import asyncio

import pytest

from netattach.pods import delegate_guard, orchestrator
from tests.builders import call


def refused_add(orch: orchestrator.Orchestrator) -> delegate_guard.DelegateRefusedError:
    """The refusal the ADD of the pod blue/web ends with: the delegate policy's, code 7."""
    with pytest.raises(delegate_guard.DelegateRefusedError) as caught:
        asyncio.run(orch.add(call(), {"cniVersion": "1.0.0"}))
    assert caught.value.code == 7
    return caught.value
