"""The thin plugin runs its call without an event loop (netattach.offload), importing only what
ADD and DEL use: the same outcomes as under asyncio, without asyncio's start-up cost."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Generator
from pathlib import Path

import pytest

from netattach import offload
from netattach.cni import conf, errors
from netattach.runtime import chain, execute
from tests.unit.processes import check_gone_with_its_child
from tests.unit.script_plugins import NOISY, RT, check_noisy_failure, one, script

SRC = Path(__file__).resolve().parents[2] / "src"

# What the daemon needs and the thin plugin's ADD and DEL do not: each is imported where it is
# used (the daemon's process and its loops, a delegate policy, a config with a mistake, a policy
# manifest, the first log line that passes its level). The value classes on the path are not
# dataclasses: `dataclasses` brings `inspect`, `ast` and `dis`. Nor does anything on it import
# `typing` (~2 ms): its names are the type checker's only (netattach.values says how).
NOT_ON_THE_THIN_PATH = (
    "asyncio",
    "dataclasses",
    "typing",
    "inspect",
    "ast",
    "dis",
    "logging",
    "traceback",
    "netattach.logs",
    "netattach.cluster.dirwatch",
    "netattach.guard.check",
    "netattach.daemon",
    "difflib",
    "secrets",
    "uuid",
    "yaml",
    "pyroute2",
)


def loaded_after(imports: str) -> set[str]:
    """The modules a fresh `python -I -S` holds after running `imports` (our src first)."""
    code = f"import sys; sys.path.insert(0, {str(SRC)!r}); {imports}; print(' '.join(sys.modules))"
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_the_thin_plugins_call_path_imports_nothing_it_does_not_use() -> None:
    loaded = loaded_after("from netattach.pods import thin; from netattach.cli import thin")
    # A package or module by its full name (`netattach.x.y`, and what is under it), a library by
    # its top-level one.
    found = [
        m
        for m in loaded
        if m.split(".")[0] in NOT_ON_THE_THIN_PATH
        or any(m == name or m.startswith(f"{name}.") for name in NOT_ON_THE_THIN_PATH)
    ]
    assert sorted(found) == []


def test_the_delegate_policy_an_add_checks_brings_no_dataclasses_or_typing() -> None:
    # The policy is on by default: the thin plugin imports its check at every ADD of a NAD.
    loaded = loaded_after("from netattach.pods import thin; from netattach.guard import check")
    assert "netattach.guard.check" in loaded  # the probe did import it
    assert sorted({"dataclasses", "inspect", "ast", "typing"} & loaded) == []


# -- offload ------------------------------------------------------------------------------------


def test_run_returns_what_the_coroutine_returns_and_raises_what_it_raises() -> None:
    async def double(x: int) -> int:
        await offload.sleep(0)
        return await offload.to_thread(lambda: 2 * x)

    async def fail() -> None:
        raise ValueError("no")

    assert offload.run(double(21)) == 42
    with pytest.raises(ValueError, match="no"):
        offload.run(fail())


class _Suspends:
    """What an asyncio future does while it is pending: give control back to a loop."""

    def __await__(self) -> Generator[None, None, None]:
        yield


def test_run_refuses_a_coroutine_that_waits_for_an_event_loop() -> None:
    cleaned = []

    async def waits() -> None:
        try:
            await _Suspends()
        finally:
            cleaned.append(True)

    with pytest.raises(offload.SuspendedError):
        offload.run(waits())
    assert cleaned == [True]  # closed: its `finally` (a lock's release, say) ran


def test_without_a_loop_blocking_work_runs_inline_and_with_one_in_a_worker_thread() -> None:
    import threading

    def where() -> int:
        return threading.get_ident()

    here = threading.get_ident()
    assert offload.run(offload.to_thread(where)) == here

    async def under_a_loop() -> int:
        return await offload.to_thread(where)

    assert asyncio.run(under_a_loop()) != here


def test_a_started_coroutine_without_a_loop_gives_every_await_its_outcome() -> None:
    runs: list[int] = []

    async def once(value: int) -> int:
        runs.append(value)
        if value < 0:
            raise ValueError(value)
        return value

    async def twice(value: int) -> tuple[int, int]:
        started = offload.start(once(value))
        return await started, await started

    assert offload.run(twice(7)) == (7, 7)
    with pytest.raises(ValueError, match="-1"):
        offload.run(twice(-1))
    assert runs == [7, -1]  # each ran once, however often awaited


def test_sleep_waits_with_and_without_a_loop() -> None:
    started = time.monotonic()
    offload.run(offload.sleep(0.05))
    asyncio.run(offload.sleep(0.05))
    assert time.monotonic() - started >= 0.1


def test_sleep_of_nothing_without_a_loop_is_no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """`sleep(0)` yields to a loop; without one (the thin plugin's ADD) it is not a system
    call."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)  # the module offload calls it on
    offload.run(offload.sleep(0))
    offload.run(offload.sleep(0.01))
    assert slept == [0.01]


# -- BlockingExec -------------------------------------------------------------------------------


def blocking_runtime(bin_dir: Path, cache: Path, timeout: float = 10.0) -> chain.Runtime:
    return chain.Runtime(
        path=[str(bin_dir)], cache_dir=cache, timeout=timeout, executor=execute.BlockingExec()
    )


def test_a_plugin_run_without_a_loop_gets_its_config_and_gives_its_result(tmp_path: Path) -> None:
    dump = tmp_path / "stdin"
    result = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}
    script(tmp_path / "bin", "recorder", f"cat > {dump}\necho '{json.dumps(result)}'\n")
    runtime = blocking_runtime(tmp_path / "bin", tmp_path / "c")

    got = offload.run(runtime.add_network_list(one("recorder"), RT))

    assert got.to_raw() == result
    assert json.loads(dump.read_text())["type"] == "recorder"


def test_a_failing_plugin_run_without_a_loop_fails_as_under_one(tmp_path: Path) -> None:
    script(tmp_path / "bin", "noisy", NOISY)
    runtime = blocking_runtime(tmp_path / "bin", tmp_path / "c")
    with pytest.raises(errors.DelegateFailedError) as caught:
        offload.run(runtime.add_network_list(one("noisy"), RT))
    check_noisy_failure(caught.value)


@pytest.mark.req("CNI-TIMEOUT")
def test_a_hung_plugin_run_without_a_loop_is_killed_with_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script(tmp_path / "bin", "hang", f"sleep 600 & echo $! > {pids}\necho $$ >> {pids}\nwait\n")
    runtime = blocking_runtime(tmp_path / "bin", tmp_path / "c", timeout=0.5)

    with pytest.raises(errors.DelegateFailedError) as caught:
        offload.run(runtime.add_network_list(one("hang"), RT))

    assert caught.value.msg == "plugin hang failed (add): hung, killed after 0.5s"
    check_gone_with_its_child(pids)


def test_a_plugin_that_reads_no_stdin_still_gives_its_result(tmp_path: Path) -> None:
    result = {"cniVersion": "1.0.0"}
    script(tmp_path / "bin", "deaf", f"echo '{json.dumps(result)}'\n")
    runtime = blocking_runtime(tmp_path / "bin", tmp_path / "c")
    big = {"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "deaf", "pad": "x" * 300_000}]}

    got = offload.run(runtime.add_network_list(conf.parse_config_list(big), RT))

    assert got.to_raw() == result


@pytest.mark.req("CNI-TIMEOUT")
def test_a_plugin_that_closes_its_output_and_hangs_is_timed_out(tmp_path: Path) -> None:
    script(tmp_path / "bin", "quiet", "exec >&- 2>&-\nsleep 600\n")
    runtime = blocking_runtime(tmp_path / "bin", tmp_path / "c", timeout=0.5)
    started = time.monotonic()
    with pytest.raises(errors.DelegateFailedError) as caught:
        offload.run(runtime.add_network_list(one("quiet"), RT))
    assert caught.value.msg == "plugin quiet failed (add): hung, killed after 0.5s"
    assert time.monotonic() - started < 10


def test_a_plugin_killed_by_a_signal_is_reported_so(tmp_path: Path) -> None:
    script(tmp_path / "bin", "crash", "kill -SEGV $$\n")
    runtime = blocking_runtime(tmp_path / "bin", tmp_path / "c")
    with pytest.raises(errors.DelegateFailedError) as caught:
        offload.run(runtime.add_network_list(one("crash"), RT))
    assert "killed by SIGSEGV" in caught.value.msg
