"""The heavy delegate stand-in (REL-BURST, `heavy_plugin.c`): `build(out)` compiles it static.

`make bench-burst` puts it in a bin directory as `bridge` around Debian's; the node tier installs
it in the node's /opt/cni/bin as `heavy-bridge` beside the real `bridge`, where the daemon's
container runs it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("heavy_plugin.c")
CFLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-static")


def build(out: Path) -> Path:
    """`gcc -static` heavy_plugin.c into `out`; a failure names the compiler's complaint."""
    done = subprocess.run(
        ["gcc", *CFLAGS, "-o", str(out), str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"gcc could not build {SOURCE.name}:\n{done.stderr}")
    return out
