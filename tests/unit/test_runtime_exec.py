"""The real exec path (`SubprocessExec`) with small script plugins: timeouts, garbage, busy files.

These run processes but need no root and no network namespace.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from netattach.cni import conf, errors
from netattach.runtime import chain, execute
from tests.unit.processes import check_gone_with_its_child
from tests.unit.script_plugins import NOISY, RT, check_noisy_failure, one, script, unparsed_list


@pytest.mark.req("CNI-TIMEOUT")
def test_a_hung_plugin_and_its_children_are_killed_at_the_timeout(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script(tmp_path / "bin", "hang", f"sleep 600 & echo $! > {pids}\necho $$ >> {pids}\nwait\n")
    runtime = chain.Runtime(path=[str(tmp_path / "bin")], cache_dir=tmp_path / "c", timeout=0.5)

    started = time.monotonic()
    with pytest.raises(errors.DelegateFailedError) as caught:
        asyncio.run(runtime.add_network_list(one("hang"), RT))
    elapsed = time.monotonic() - started

    assert caught.value.code == 103
    assert caught.value.msg == "plugin hang failed (add): hung, killed after 0.5s"
    assert "container c1 ifname eth0" in caught.value.details
    assert elapsed < 10
    check_gone_with_its_child(pids)


@pytest.mark.req("CNI-ERR")
def test_garbage_on_stdout_gives_103_with_the_stderr_tail(tmp_path: Path) -> None:
    script(tmp_path / "bin", "noisy", NOISY)
    runtime = chain.Runtime(path=[str(tmp_path / "bin")], cache_dir=tmp_path / "c")
    with pytest.raises(errors.DelegateFailedError) as caught:
        asyncio.run(runtime.add_network_list(one("noisy"), RT))
    check_noisy_failure(caught.value)


@pytest.mark.req("CNI-ERR")
def test_a_cni_error_on_stdout_keeps_its_code(tmp_path: Path) -> None:
    error = {"cniVersion": "1.0.0", "code": 11, "msg": "try later", "details": "busy"}
    script(tmp_path / "bin", "busy", f"echo '{json.dumps(error)}'\nexit 1\n")
    runtime = chain.Runtime(path=[str(tmp_path / "bin")], cache_dir=tmp_path / "c")
    with pytest.raises(errors.PluginError) as caught:
        asyncio.run(runtime.add_network_list(one("busy"), RT))
    assert caught.value.code == 11
    assert caught.value.msg == "plugin busy failed (add): try later"


@pytest.mark.req("CNI-ENV")
def test_the_real_exec_passes_env_and_stdin(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    result = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]}
    script(
        tmp_path / "bin",
        "recorder",
        f"env | grep '^CNI_' | sort > {dump}.env\n"
        f"cat > {dump}.stdin\n"
        f"echo '{json.dumps(result)}'\n",
    )
    runtime = chain.Runtime(path=["/nonexistent", str(tmp_path / "bin")], cache_dir=tmp_path / "c")
    rt = chain.RuntimeConf(
        container_id="c1", ifname="net3", netns="/run/netns/na-x", args=(("A", "1"), ("B", "2"))
    )
    got = asyncio.run(runtime.add_network_list(one("recorder"), rt))

    assert got.to_raw() == result
    assert Path(f"{dump}.env").read_text().splitlines() == [
        "CNI_ARGS=A=1;B=2",
        "CNI_COMMAND=ADD",
        "CNI_CONTAINERID=c1",
        "CNI_IFNAME=net3",
        "CNI_NETNS=/run/netns/na-x",
        f"CNI_PATH=/nonexistent:{tmp_path / 'bin'}",
    ]
    assert json.loads(Path(f"{dump}.stdin").read_text()) == {
        "type": "recorder",
        "name": "n",
        "cniVersion": "1.0.0",
    }


@pytest.mark.req("CNI-FIND")
def test_a_relative_type_cannot_reach_a_script_outside_the_path(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script(tmp_path / "bin", "sh", f"touch {marker}\necho '{{}}'\n")
    plugin_dir = tmp_path / "a" / "b"
    plugin_dir.mkdir(parents=True)
    runtime = chain.Runtime(path=[str(plugin_dir)], cache_dir=tmp_path / "c")
    plugin: dict[str, Any] = {"type": "../../bin/sh"}
    raw: dict[str, Any] = {"cniVersion": "1.0.0", "name": "n", "plugins": [plugin]}
    with pytest.raises(errors.InvalidNetworkConfigError) as caught:
        conf.parse_config_list(raw)
    assert "'../../bin/sh'" in str(caught.value)
    # even a list built by hand, past the parser, is refused by the finder
    with pytest.raises(errors.InvalidNetworkConfigError) as refused:
        asyncio.run(runtime.add_network_list(unparsed_list(plugin), RT))
    assert refused.value.code == 7
    assert not marker.exists()


def test_text_file_busy_is_retried_until_the_writer_is_done(tmp_path: Path) -> None:
    result = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.3/24"}]}
    path = script(tmp_path / "bin", "upgrading", f"echo '{json.dumps(result)}'\n")
    writer = os.open(path, os.O_WRONLY)  # an open writer makes execve fail with ETXTBSY
    closer = threading.Timer(0.3, os.close, args=(writer,))
    closer.start()
    try:
        runtime = chain.Runtime(
            path=[str(tmp_path / "bin")],
            cache_dir=tmp_path / "c",
            executor=execute.SubprocessExec(busy_retries=20, busy_backoff=0.02),
        )
        got = asyncio.run(runtime.add_network_list(one("upgrading"), RT))
    finally:
        closer.join()
    assert got.to_raw() == result


def test_text_file_busy_for_good_is_a_clear_error(tmp_path: Path) -> None:
    path = script(tmp_path / "bin", "stuck", "echo '{}'\n")
    writer = os.open(path, os.O_WRONLY)
    try:
        runtime = chain.Runtime(
            path=[str(tmp_path / "bin")],
            cache_dir=tmp_path / "c",
            executor=execute.SubprocessExec(busy_retries=2, busy_backoff=0.01),
        )
        with pytest.raises(errors.DelegateFailedError, match="plugin stuck failed") as caught:
            asyncio.run(runtime.add_network_list(one("stuck"), RT))
    finally:
        os.close(writer)
    assert "ETXTBSY" in caught.value.details
