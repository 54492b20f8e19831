"""The shim's import budget (STYLE.md habit 1): standard library only, and only its cheap parts.

The shim starts on every CNI call, on every pod's critical path, as `python -I -S`: whatever it
imports is paid for each time. It imports `netattach.wire`, `netattach.cni.spec` and
`netattach.cni.errors` and nothing else of netattach, and none of the heavy standard modules.
"""

import json
import subprocess
import sys

from tests.shim.conftest import SRC

ABSENT = (
    "argparse",
    "asyncio",
    "dataclasses",
    "email",
    "http",
    "http.client",
    "inspect",
    "logging",
    "ssl",
    "subprocess",
    "threading",
    "urllib",
)
NETATTACH = {
    "netattach",
    "netattach.cni",
    "netattach.cni.errors",
    "netattach.cni.spec",
    "netattach.shim",
    "netattach.shim.main",
    "netattach.wire",
}


def imported_by_the_shim() -> list[str]:
    code = (
        f"import sys; sys.path.insert(0, {str(SRC)!r}); import netattach.shim.main; "
        "import json; print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    modules = json.loads(done.stdout)
    assert isinstance(modules, list)
    return [str(name) for name in modules]


def test_the_shim_imports_none_of_the_heavy_standard_modules() -> None:
    modules = set(imported_by_the_shim())

    assert sorted(modules & set(ABSENT)) == []


def test_the_shim_imports_only_the_standard_library_and_its_own_three_modules() -> None:
    modules = imported_by_the_shim()

    assert {name for name in modules if name.split(".")[0] == "netattach"} == NETATTACH
    third_party = [
        name
        for name in modules
        if name.split(".")[0] not in sys.stdlib_module_names
        and name.split(".")[0] not in {"netattach", "__main__"}
    ]
    assert third_party == []
