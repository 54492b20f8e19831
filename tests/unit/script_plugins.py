"""Plugins written as shell scripts, for the tests that run real processes: the script, the
one-plugin config list that runs it, and what a plugin that prints garbage fails with."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from netattach.cni import conf, errors
from netattach.runtime import chain

RT = chain.RuntimeConf(container_id="c1", ifname="eth0", netns="/run/netns/na-x")
# A plugin that prints no CNI result or error on stdout, a reason on stderr, and exits 3.
NOISY = "echo '%%garbage%%'\necho 'fatal: cannot frob' >&2\nexit 3\n"


def script(directory: Path, name: str, body: str) -> Path:
    """The executable `directory/name` running `body` with /bin/sh."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def one(plugin_type: str, version: str = "1.0.0") -> conf.NetworkConfigList:
    """The config list `n` of one plugin of type `plugin_type`."""
    return conf.parse_config_list(
        {"cniVersion": version, "name": "n", "plugins": [{"type": plugin_type}]}
    )


def unparsed_list(plugin: dict[str, Any]) -> conf.NetworkConfigList:
    """The config list `n` of `plugin`, built by hand past the parser and whatever it refuses."""
    evil = conf.NetworkConfig(
        raw=plugin,
        name="n",
        type=plugin["type"],
        cni_version="1.0.0",
        capabilities=frozenset(),
        source="test",
    )
    return conf.NetworkConfigList(
        raw={"cniVersion": "1.0.0", "name": "n", "plugins": [plugin]},
        name="n",
        cni_version="1.0.0",
        plugins=(evil,),
        disable_check=False,
        disable_gc=False,
        source="test",
    )


def check_noisy_failure(error: errors.DelegateFailedError) -> None:
    """The failure of the NOISY plugin's ADD: 103, and the tail of its stderr as details."""
    assert error.code == 103
    assert error.msg == "plugin noisy failed (add): exit status 3 without a CNI error on stdout"
    assert error.details == "fatal: cannot frob"
