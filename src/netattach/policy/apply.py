"""The kernel side effect of policy: netattach's nftables table inside a pod's netns.

Every call runs `nft` as its own subprocess under `nsenter --net=<netns path>`, so no thread
of ours ever changes namespace. netattach owns exactly one table per pod netns,
`table inet netattach`; a rendered script replaces it whole in a single nft transaction
(`add table` + `delete table` + the new definition), so a failing script leaves the previous
table exactly as it was.
"""

from __future__ import annotations

import json
import os
from typing import Any

from netattach import process
from netattach.cni import errors

TABLE = "netattach"
FAMILY = "inet"
NFT = "nft"
NSENTER = "nsenter"
STDERR_TAIL = 2000  # characters of nft's stderr quoted in an error


def _tail(text: str) -> str:
    text = text.strip()
    if len(text) <= STDERR_TAIL:
        return text
    return "..." + text[-STDERR_TAIL:]


async def _nft(
    netns_path: str, *args: str, stdin: bytes | None = None, timeout: float
) -> tuple[int, str, str]:
    """Run `nft args...` inside the netns at `netns_path`: (exit status, stdout, stderr)."""
    argv = [NSENTER, f"--net={netns_path}", "--", NFT, *args]
    try:
        done = await process.run_in_loop(argv, dict(os.environ), stdin or b"", timeout)
    except process.TimedOutError:
        raise errors.PolicyApplyError(
            f"nft {' '.join(args)} in {netns_path} timed out after {timeout:g}s"
        ) from None
    except OSError as exc:
        raise errors.PolicyApplyError(
            f"cannot run {NSENTER} {NFT} in {netns_path}", str(exc)
        ) from exc
    return (
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
    )


def _failed(what: str, netns_path: str, status: int, stderr: str) -> errors.PolicyApplyError:
    return errors.PolicyApplyError(
        f"{what} in {netns_path} failed (nft exit {status})", _tail(stderr) or "(no stderr)"
    )


async def apply_ruleset(netns_path: str, script: str, *, timeout: float = 10.0) -> None:
    """Run `script` with `nft -f -` in the netns: one transaction, all of it or none.

    The script replaces netattach's table itself (it starts with `add table inet netattach`
    and `delete table inet netattach`). Failure raises `PolicyApplyError` quoting nft.
    """
    status, _, err = await _nft(netns_path, "-f", "-", stdin=script.encode(), timeout=timeout)
    if status != 0:
        raise _failed("applying the policy ruleset", netns_path, status, err)


async def list_tables(netns_path: str, *, timeout: float = 10.0) -> list[str]:
    """The netns's nftables tables as `"<family> <name>"`, in nft's order."""
    status, out, err = await _nft(netns_path, "-j", "list", "tables", timeout=timeout)
    if status != 0:
        raise _failed("listing nftables tables", netns_path, status, err)
    try:
        doc: Any = json.loads(out)
        items = doc["nftables"]
        tables: list[str] = []
        for item in items:
            table = item.get("table") if isinstance(item, dict) else None
            if isinstance(table, dict):
                tables.append(f"{table['family']} {table['name']}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise errors.PolicyApplyError(
            f"cannot parse `nft -j list tables` in {netns_path}", _tail(out)
        ) from exc
    return tables


async def _present(netns_path: str, timeout: float) -> bool:
    return f"{FAMILY} {TABLE}" in await list_tables(netns_path, timeout=timeout)


async def read_table(netns_path: str, *, timeout: float = 10.0) -> str | None:
    """`nft list table inet netattach` as nft prints it, or None when there is no table."""
    status, out, err = await _nft(netns_path, "list", "table", FAMILY, TABLE, timeout=timeout)
    if status == 0:
        return out
    if not await _present(netns_path, timeout):
        return None
    raise _failed(f"reading table {FAMILY} {TABLE}", netns_path, status, err)


async def remove_table(netns_path: str, *, timeout: float = 10.0) -> bool:
    """Delete netattach's table if present; True when it existed. Idempotent."""
    status, _, err = await _nft(netns_path, "delete", "table", FAMILY, TABLE, timeout=timeout)
    if status == 0:
        return True
    if not await _present(netns_path, timeout):
        return False
    raise _failed(f"deleting table {FAMILY} {TABLE}", netns_path, status, err)
