"""A `PluginExec` that plays plugins from Python functions and records every call.

The runtime's exec is a seam (docs/architecture.md, "The seams"): finding a plugin in `CNI_PATH`
and running it. This fake holds its plugins in a table, one directory of names that exists
nowhere, so unit tests assert exactly what a plugin would have received (environment and stdin)
without root and without writing a file. The tests that run the real reference plugins live in
tests/netns.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from netattach.cni import spec
from netattach.runtime import execute, find


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


def _none_dangles(plugin_type: str, directories: Sequence[str]) -> list[str]:
    """No plugin of the table is a symlink: none is missing for a reason worth telling."""
    return []


class FakePlugins:
    """The plugins `names` in `directory`, a path no file is written to: the runtime finds them
    through `find_in_path`, and `run` plays each by its `behaviour` (else `default_behaviour`)."""

    def __init__(self, directory: Path, names: Iterable[str]) -> None:
        self.directory = directory
        self.calls: list[Call] = []
        self.behaviour: dict[str, Behaviour] = {}
        # Awaited as each call starts, before its gate: where a test counts or holds calls.
        self.before_run: BeforeRun | None = None
        self._stamps: dict[str, execute.FileStamp] = {}
        self._installs = itertools.count(1)
        for name in names:
            self.install(name)

    def install(self, name: str) -> Path:
        """Put plugin `name` in the directory, as a new file: the runtime asks its VERSION anew."""
        self._stamps[name] = (0, 0, next(self._installs))
        return self.directory / name

    def remove(self, name: str) -> None:
        """Take plugin `name` out of the directory (its behaviour stays, for a later install)."""
        del self._stamps[name]

    def _holds(self, candidate: Path) -> bool:
        return candidate.parent == self.directory and candidate.name in self._stamps

    def find_in_path(self, plugin_type: str, directories: Sequence[str]) -> Path:
        return find.find_plugin(
            plugin_type, directories, is_plugin=self._holds, why_missing=_none_dangles
        )

    def file_stamp(self, path: Path) -> execute.FileStamp:
        return self._stamps[path.name]

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
