"""setuptools hook: a built netattach carries the static C shim (scripts/build-shim.sh native).

Everything else is in pyproject.toml. The daemon installs that shim onto the node when `--shim`
names none, and falls back to a zipapp of the Python shim when no C compiler was at hand here.
An editable install (`make venv`) builds it in place instead, with make.
"""

import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithNativeShim(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        script = Path(__file__).resolve().parent / "scripts" / "build-shim.sh"
        out = Path(self.build_lib) / "netattach" / "shim" / "netattach-shim"
        done = subprocess.run(["bash", str(script), "native", str(out)], check=False)
        if done.returncode != 0:
            print(
                "netattach: the native shim was not built (no C compiler or static libc?);"
                " the daemon will install the Python zipapp instead",
                file=sys.stderr,
            )


setup(cmdclass={"build_py": BuildPyWithNativeShim})
