"""One plugin call: environment, stdin, exit status and stdout turned into a result or an error."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

from netattach.cni import env, errors, result, spec, version
from netattach.runtime import execute

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    from typing import Any

    from netattach.runtime.memory import MemoryGate

# How much of a failed plugin's stderr an error keeps (the end is where the reason usually is).
STDERR_TAIL_BYTES = 2048


# One call's `CNI_*` values: the same shape a plugin reads its environment into.
Invocation = env.Environment


def build_env(call: Invocation, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The process environment: ours, minus any inherited `CNI_*`, plus this call's (CNI-ENV)."""
    inherited = os.environ if base is None else base
    environ = {k: v for k, v in inherited.items() if k not in spec.ENV_NAMES}
    environ.update(
        {
            spec.ENV_COMMAND: call.command,
            spec.ENV_CONTAINERID: call.container_id,
            spec.ENV_NETNS: call.netns,
            spec.ENV_IFNAME: call.ifname,
            spec.ENV_ARGS: env.format_cni_args(call.args),
            spec.ENV_PATH: ":".join(call.path),
        }
    )
    return environ


def stderr_tail(stderr: bytes) -> str:
    tail = stderr[-STDERR_TAIL_BYTES:].decode("utf-8", errors="replace").strip()
    return tail or "(no output on stderr)"


def _ending(returncode: int) -> str:
    """How a plugin process ended: its exit status, or the signal that killed it (a crash)."""
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def _describe(plugin: str, command: str) -> str:
    return f"plugin {plugin} failed ({command.lower()})"


def _semaphore(limit: int) -> asyncio.Semaphore:
    from asyncio import Semaphore  # only with a limit: the thin plugin runs without asyncio

    return Semaphore(limit)


class Invoker:
    """Runs plugin executables through a `PluginExec` and reads what they print."""

    def __init__(
        self,
        executor: execute.PluginExec,
        *,
        timeout: float = 60.0,
        max_concurrent: int | None = None,
        memory: MemoryGate | None = None,
        observer: Callable[[str, str, float], None] | None = None,
    ) -> None:
        """`observer`: told (plugin, command, seconds) after every plugin execution (the
        daemon's metrics); `memory`: the daemon's admission of delegates by memory."""
        self.executor = executor
        self.memory = memory
        self.timeout = timeout
        # RT-LIMIT: at most this many plugin processes at once; the rest wait their turn, so a
        # burst of pods after a node reboot cannot fork hundreds of plugins together.
        self._slots = _semaphore(max_concurrent) if max_concurrent else None
        self.waiting = 0  # calls queued for a slot (a metric)
        self.running = 0
        self.observer = observer

    async def _run(
        self,
        plugin: str,
        path: Path,
        stdin: bytes,
        call: Invocation,
        gate: Awaitable[object] | None = None,
    ) -> execute.ExecOutcome:
        try:
            async with self._slot(), self._admission(str(path)):
                started = time.perf_counter()
                try:
                    return await self.executor.run(
                        path, env=build_env(call), stdin=stdin, timeout=self.timeout, gate=gate
                    )
                finally:
                    if self.observer is not None:
                        self.observer(plugin, call.command, time.perf_counter() - started)
        except execute.ExecTimeoutError as exc:
            # CNI-TIMEOUT: say which plugin hung, for which command and container.
            raise errors.DelegateFailedError(
                f"{_describe(plugin, call.command)}: hung, killed after {exc.timeout:g}s",
                f"container {call.container_id or '-'} ifname {call.ifname or '-'}; {path}",
            ) from exc
        except execute.ExecStartError as exc:
            raise errors.DelegateFailedError(_describe(plugin, call.command), str(exc)) from exc

    def _admission(self, program: str) -> contextlib.AbstractAsyncContextManager[None]:
        """REL-BURST: held while `program` runs, once its expected memory fits the cgroup."""
        if self.memory is None:
            return contextlib.nullcontext()
        return self.memory.admission(program)

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        if self._slots is None:
            self.running += 1
            try:
                yield
            finally:
                self.running -= 1
            return
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self._slots.release()

    def _error(self, plugin: str, command: str, outcome: execute.ExecOutcome) -> errors.CNIError:
        """The error the plugin reported, or code 103 with its stderr tail when it said none."""
        try:
            raw = json.loads(outcome.stdout)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raw = None
        if errors.is_error_raw(raw):
            assert isinstance(raw, dict)
            reported = errors.from_plugin_raw(raw)
            return errors.PluginError(
                reported.code, f"{_describe(plugin, command)}: {reported.msg}", reported.details
            )
        return errors.DelegateFailedError(
            f"{_describe(plugin, command)}: {_ending(outcome.returncode)} "
            "without a CNI error on stdout",
            stderr_tail(outcome.stderr),
        )

    async def exec_with_result(
        self,
        plugin: str,
        path: Path,
        config: Mapping[str, Any],
        call: Invocation,
        *,
        gate: Awaitable[object] | None = None,
    ) -> result.Result:
        """Run ADD; the result comes back in the config's own `cniVersion` (as libcni does).
        The plugin reads its config only once `gate` completes (`execute.PluginExec`)."""
        conf_version = str(config.get("cniVersion", "0.1.0"))
        # Serialised from the parsed config, never the text as written (SEC-KEYS): Go merges a
        # repeated object key into one (`"ipam": {...}, "ipam": {...}`), which the policy, like
        # Python's parser, reads as the last only; once parsed, each key reaches a plugin once.
        outcome = await self._run(plugin, path, json.dumps(config).encode(), call, gate)
        if outcome.returncode != 0:
            raise self._error(plugin, call.command, outcome)
        try:
            raw = json.loads(outcome.stdout)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise errors.DelegateFailedError(
                f"{_describe(plugin, call.command)}: its result is not JSON "
                f"({outcome.stdout[:200]!r})",
                stderr_tail(outcome.stderr),
            ) from exc
        from netattach.cni import result_convert  # only for a call that prints a result

        try:
            parsed = result.parse_result(raw, default_version=conf_version)
            return result_convert.convert(parsed, conf_version)
        except errors.CNIError as exc:
            raise type(exc)(f"{_describe(plugin, call.command)}: {exc.msg}", exc.details) from exc

    async def exec_without_result(
        self, plugin: str, path: Path, config: Mapping[str, Any], call: Invocation
    ) -> None:
        """Run DEL, CHECK, GC or STATUS: success is exit status 0, whatever stdout holds."""
        outcome = await self._run(plugin, path, json.dumps(config).encode(), call)
        if outcome.returncode != 0:
            raise self._error(plugin, call.command, outcome)

    async def version_info(self, plugin: str, path: Path, call: Invocation) -> tuple[str, ...]:
        """The versions a plugin supports (its `VERSION` reply)."""
        stdin = json.dumps({"cniVersion": spec.CURRENT_VERSION}).encode()
        outcome = await self._run(plugin, path, stdin, call._replace(command=spec.VERSION))
        if outcome.returncode != 0:
            failure = self._error(plugin, spec.VERSION, outcome)
            # A 0.1.0 plugin does not know VERSION at all (libcni's legacy rule).
            if "unknown CNI_COMMAND: VERSION" in (
                failure.msg + outcome.stderr.decode(errors="replace")
            ):
                return ("0.1.0",)
            raise failure
        try:
            raw = json.loads(outcome.stdout)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise errors.DecodingFailureError(
                f"plugin {plugin}: VERSION reply is not JSON", repr(outcome.stdout[:200])
            ) from exc
        if not isinstance(raw, dict):
            raise errors.DecodingFailureError(f"plugin {plugin}: VERSION reply is not an object")
        return version.parse_version_info(raw, plugin)
