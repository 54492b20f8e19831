"""`netattach install-cni --bin-dir DIR`: put `netattach-thin` where the runtime looks.

Written beside and renamed over, so a runtime executing the old plugin at that moment never
sees a half-written file.
"""

import sys
from pathlib import Path

from netattach import atomic
from netattach.cli import demo


def run(*, bin_dir: str) -> int:
    source = Path(demo.executable("netattach-thin"))
    if not source.is_file():
        print(f"cannot find netattach-thin (looked for {source})", file=sys.stderr)
        return 1
    target = Path(bin_dir) / "netattach-thin"
    atomic.write_atomic(target, source.read_bytes(), mode=0o755)
    print(f"installed {target}")
    return 0
