"""`netattach install-cni --bin-dir DIR`: put `netattach-thin` where the runtime looks.

What is installed is a launcher of a few lines, not pip's console script: it runs this Python as
`python -IS` (no site processing, no PYTHON* variables: ~10 ms less on every call, and nothing in
the runtime's environment changes what runs) with the package's own directories put on the path
by hand, `ssl` blocked (see the launcher's text), and the interpreter's teardown skipped once the
reply is out (`thin.exit_now`). Written beside and renamed over, so a runtime executing the old
plugin at that moment never sees a half-written file.
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
        "# No TLS in thin mode (a directory of manifests, no API): nothing may import `ssl`,\n"
        "# which would cost every call ~5 ms.\n"
        "sys.modules['ssl'] = None\n"
        "from netattach.cli.thin import exit_now, main\n"
        "exit_now(main())\n"
    ).encode()


def run(*, bin_dir: str) -> int:
    target = Path(bin_dir) / THIN_NAME
    atomic.write_atomic(target, build_launcher(), mode=0o755)
    print(f"installed {target}")
    return 0
