"""The operator commands' tier: `netattach status|graph|validate` and `kubectl netattach` run as a
user runs them (a subprocess of the installed console script, real files).

Fixtures from the other tiers are imported here so this tier's tests can use them: the one-node
`cluster` and the real `daemon` of tests/e2e (root), the fake API server and a kubeconfig for it
of tests/kube.
"""

from __future__ import annotations

from tests.cli.harness import DirectoryNode, directory_node
from tests.e2e.conftest import cluster
from tests.e2e.daemon_harness import daemon, native_shim
from tests.kube.conftest import fake_api, kubeconfig

__all__ = [
    "DirectoryNode",
    "cluster",
    "daemon",
    "directory_node",
    "fake_api",
    "kubeconfig",
    "native_shim",
]
