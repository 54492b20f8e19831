"""`netattach daemon` with its admission of delegates by memory off (the count bound alone), for
`bench.burst`'s comparison: what the same burst does to the cgroup without it. An experiment,
never a configuration (no setting turns the admission off).

    python -m bench.ungated_daemon daemon --config SETTINGS
"""

from __future__ import annotations

import sys

from netattach.cli import main as cli_main
from netattach.runtime import memory


def _no_limit() -> None:
    return None


if __name__ == "__main__":
    memory.cgroup_limit = _no_limit  # type: ignore[assignment]
    sys.exit(cli_main.main(sys.argv[1:]))
