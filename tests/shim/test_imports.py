"""The shim's import budget (the habit "the shim is a pipe"): standard library only, and only its
cheap parts.

The shim starts on every CNI call, on every pod's critical path, as `python -I -S`: whatever it
imports is paid for each time. It imports `netattach.wire`, `netattach.quickjson`,
`netattach.cni.spec` and `netattach.cni.errors` and nothing else of netattach, and none of the
heavy standard modules — not even `json`, `socket` or `typing`, whose Python layers cost ~10 ms
of its start-up (the C parts underneath, `_json` and `_socket`, are what it uses).
"""

import json
import sys

from tests.shim.conftest import run_isolated

ABSENT = (
    "argparse",
    "asyncio",
    "collections",
    "dataclasses",
    "email",
    "enum",
    "http",
    "http.client",
    "inspect",
    "json",
    "logging",
    "re",
    "selectors",
    "socket",
    "ssl",
    "subprocess",
    "threading",
    "typing",
    "urllib",
)
NETATTACH = {
    "netattach",
    "netattach.cni",
    "netattach.cni.errors",
    "netattach.cni.spec",
    "netattach.quickjson",
    "netattach.shim",
    "netattach.shim.main",
    "netattach.wire",
}


def imported_by_the_shim() -> list[str]:
    """The modules loaded once the shim has answered a VERSION call (its whole run, in-process)."""
    done = run_isolated(
        "import io, os; import netattach.shim.main; "
        "os.environ['CNI_COMMAND'] = 'VERSION'; "
        'sys.stdin = io.TextIOWrapper(io.BytesIO(b\'{"cniVersion": "1.0.0"}\')); '
        "netattach.shim.main.main(); loaded = sorted(sys.modules); "
        "import json; print(json.dumps(loaded), file=sys.stderr)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('{"cniVersion": "1.0.0", "supportedVersions": [')
    modules = json.loads(done.stderr)
    assert isinstance(modules, list)
    return [str(name) for name in modules]


def test_the_shim_imports_none_of_the_heavy_standard_modules() -> None:
    modules = set(imported_by_the_shim())

    assert sorted(modules & set(ABSENT)) == []


def test_the_shim_imports_only_the_standard_library_and_its_own_four_modules() -> None:
    modules = imported_by_the_shim()

    assert {name for name in modules if name.split(".")[0] == "netattach"} == NETATTACH
    third_party = [
        name
        for name in modules
        if name.split(".")[0] not in sys.stdlib_module_names
        and name.split(".")[0] not in {"netattach", "__main__"}
    ]
    assert third_party == []
