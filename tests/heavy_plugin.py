"""A heavy delegate stand-in (REL-BURST): holds HEAVY_MIB (NETATTACH_HEAVY_MIB, default 60) of
resident memory for the length of a real plugin's run, as a cilium-cni-sized plugin does, then
gives the real plugin's answer.

    python tests/heavy_plugin.py /usr/lib/cni/bridge      (CNI_* and the config as for bridge)

A bin directory holds a script of the plugin's name that execs this (bench/burst.py writes one).
"""

from __future__ import annotations

import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    (real,) = argv
    held = bytearray(int(os.environ.get("NETATTACH_HEAVY_MIB", "60")) * 1024 * 1024)
    for at in range(0, len(held), 4096):  # resident, page by page
        held[at] = 1
    done = subprocess.run([real], check=False)  # stdin, stdout and stderr passed through
    del held
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
