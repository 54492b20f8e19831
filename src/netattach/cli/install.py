"""`netattach install-cni --bin-dir DIR`: put `netattach-thin` where the runtime looks.

What is installed is a launcher of a few lines, not pip's console script: it runs this Python as
`python -IS` (no site processing, no PYTHON* variables: ~10 ms less on every call, and nothing in
the runtime's environment changes what runs) with the package's own directories put on the path
by hand, and the interpreter's teardown skipped once the reply is out (`thin.exit_now`). Written
beside and renamed over, so a runtime executing the old plugin at that moment never sees a
half-written file.

The launcher blocks no module. It once set `sys.modules['ssl'] = None` to keep TLS (~5 ms) off
every call, and so broke every ADD with `default-route` (999): the route work used pyroute2, and
pyroute2 0.9 imports `ssl` (`pyroute2/netlink/rtnl/probe_msg.py`). A dependency's imports are its
own; the route work is now a plain rtnetlink socket (`netns.routes`), and that no call imports
`ssl` or pyroute2 is checked on the installed launcher instead (tests/e2e/test_installed_thin.py).
"""

import sys
import sysconfig
from pathlib import Path

import netattach
from netattach import atomic

THIN_NAME = "netattach-thin"


def build_launcher() -> bytes:
    """The executable's text: this interpreter, isolated, and where netattach and its
    dependencies are (an editable install's source tree included)."""
    paths = [str(Path(netattach.__file__).resolve().parents[1])]
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths()[key]
        if path not in paths:
            paths.append(path)
    return (
        f"#!{sys.executable} -IS\n"
        "# netattach-thin, installed by `netattach install-cni`: the CNI plugin of thin mode.\n"
        "import sys\n"
        f"sys.path[:0] = {paths!r}\n"
        "from netattach.cli.thin import exit_now, main\n"
        "exit_now(main())\n"
    ).encode()


def run(*, bin_dir: str) -> int:
    target = Path(bin_dir) / THIN_NAME
    atomic.write_atomic(target, build_launcher(), mode=0o755)
    print(f"installed {target}")
    return 0
