"""The heavy delegate stand-in (REL-BURST, `heavy_plugin.c`): `build(out)` compiles it static.

`make bench-burst` puts it in a bin directory as `bridge` around Debian's; the node tier installs
it in the node's /opt/cni/bin as `heavy-bridge` beside the real `bridge`, where the daemon's
container runs it.
"""

from __future__ import annotations

from pathlib import Path

from tests import static_c

SOURCE = Path(__file__).with_name("heavy_plugin.c")


def build(out: Path) -> Path:
    """heavy_plugin.c built static into `out`."""
    return static_c.build(SOURCE, out)
