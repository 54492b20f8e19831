"""Shared test configuration: requirement markers, the netns-skip policy, netns fixtures, and
Hypothesis's settings for every property of the suite."""

import os
import signal
from types import FrameType

from hypothesis import HealthCheck, settings

# A property's verdict must not depend on how busy the machine is: no deadline per example and
# no health check on how fast inputs are generated (a 2-core machine under the e2e tiers'
# load generated too slowly for Hypothesis's default). Performance is bench/'s, never a test's.
settings.register_profile("netattach", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("netattach")

pytest_plugins = [
    "pytester",
    "tests.requirements_report",
    "tests.netns_policy",
    "tests.netns_fixtures",
]


_RUN_PID = os.getpid()


def _interrupted(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _RUN_PID:  # a fork that kept the handler: die as SIGTERM says
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise KeyboardInterrupt(f"signal {signum}")


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pytest_configure() -> None:
    """A run stopped with SIGTERM (CI's timeout, `kill`) tears down like Ctrl-C: the fixtures'
    finalizers run, so the namespaces, links and processes a test made do not outlive it (a
    killed run left `na-pod-*` namespaces behind).

    Only this process does so. pyroute2 forks helpers from the test process and stops them with
    SIGTERM; a helper that inherited the handler unwound a copy of pytest and ran every session
    finalizer in the child, deleting the live run's namespaces and directories (CI: 185 failed)."""
    os.register_at_fork(after_in_child=_default_sigterm)
    signal.signal(signal.SIGTERM, _interrupted)
