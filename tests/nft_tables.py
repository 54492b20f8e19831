"""The netattach nftables table inside a network namespace: written with `nft -f`, and read
back as nft holds it, for comparing two tables."""

from __future__ import annotations

import json
import subprocess
from typing import Any


def nft(netns: str, script: str) -> None:
    """Run `script` with `nft -f` in `netns`; the test fails with nft's message."""
    done = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "-f", "-"],
        input=script,
        text=True,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, (done.stderr, script[:2000])


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "handle"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def listing(netns: str) -> list[Any]:
    """The table as nft holds it: sets by name, chains by name, each chain's rules in order."""
    out = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "-j", "list", "table", "inet", "netattach"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout
    items = [_strip(i) for i in json.loads(out)["nftables"] if "metainfo" not in i]
    sets = sorted((i for i in items if "set" in i), key=lambda i: i["set"]["name"])
    chains = sorted((i for i in items if "chain" in i), key=lambda i: i["chain"]["name"])
    rules = sorted((i for i in items if "rule" in i), key=lambda i: i["rule"]["chain"])
    return [sets, chains, rules]
