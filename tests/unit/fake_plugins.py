"""A `PluginExec` that plays plugins from Python functions and records every call.

The runtime's exec is a seam (STYLE.md habit 5); this fake lets unit tests assert exactly what a
plugin would have received (environment and stdin) without root. The tests that run the real
reference plugins live in tests/netns.
"""

from __future__ import annotations

import dataclasses
import json
import stat
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from netattach.cni import spec
from netattach.runtime import execute


@dataclasses.dataclass
class Call:
    plugin: str
    command: str
    env: dict[str, str]
    config: dict[str, Any]


Behaviour = Callable[[Call], execute.ExecOutcome]
BeforeRun = Callable[[Path, Mapping[str, str]], Awaitable[object]]


def ok(payload: Mapping[str, Any] | None = None) -> execute.ExecOutcome:
    out = b"" if payload is None else json.dumps(payload).encode()
    return execute.ExecOutcome(returncode=0, stdout=out, stderr=b"")


def fail(code: int, msg: str, details: str = "") -> execute.ExecOutcome:
    err = {"cniVersion": "1.0.0", "code": code, "msg": msg, "details": details}
    return execute.ExecOutcome(returncode=1, stdout=json.dumps(err).encode(), stderr=b"")


def interface_result(call: Call, address: str = "10.9.0.5/24") -> dict[str, Any]:
    """What a main plugin returns: its sandbox interface and one IP on it."""
    return {
        "cniVersion": call.config["cniVersion"],
        "interfaces": [
            {
                "name": call.env[spec.ENV_IFNAME],
                "mac": "0a:58:0a:09:00:05",
                "sandbox": call.env[spec.ENV_NETNS],
            }
        ],
        "ips": [{"address": address, "gateway": "10.9.0.1", "interface": 0}],
    }


def default_behaviour(call: Call) -> execute.ExecOutcome:
    if call.command == spec.VERSION:
        return ok({"cniVersion": "1.1.0", "supportedVersions": list(spec.VERSIONS)})
    if call.command != spec.ADD:
        return ok()
    prev = call.config.get("prevResult")
    return ok(prev if prev is not None else interface_result(call))


class FakePlugins:
    def __init__(self, directory: Path, names: Iterable[str]) -> None:
        self.directory = directory
        self.calls: list[Call] = []
        self.behaviour: dict[str, Behaviour] = {}
        # Awaited as each call starts, before its gate: where a test counts or holds calls.
        self.before_run: BeforeRun | None = None
        directory.mkdir(parents=True, exist_ok=True)
        for name in names:
            self.install(name)

    def install(self, name: str) -> Path:
        """An executable file the runtime can find; it is never executed by this fake."""
        path = self.directory / name
        path.write_text("#!/bin/sh\nexit 99\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return path

    async def run(
        self,
        path: Path,
        *,
        env: Mapping[str, str],
        stdin: bytes,
        timeout: float,
        gate: Awaitable[object] | None = None,
    ) -> execute.ExecOutcome:
        if self.before_run is not None:
            await self.before_run(path, env)
        if gate is not None:
            await gate  # as the real one: the plugin reads its config only after the gate
        call = Call(
            plugin=path.name,
            command=env[spec.ENV_COMMAND],
            env=dict(env),
            config=json.loads(stdin) if stdin else {},
        )
        self.calls.append(call)
        return self.behaviour.get(path.name, default_behaviour)(call)

    def commands(self) -> list[tuple[str, str]]:
        return [(c.plugin, c.command) for c in self.calls]
