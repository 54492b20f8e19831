"""One pool's state on this node: the blocks it holds, who holds each address, and when each
freed address was freed (IPAM-UNIQUE, IPAM-NOLEAK).

A file per pool, `<stateDir>/ipam/<pool>.json`, written whole and renamed over the old one at
every change, before the ADD that made the change answers (no fsync: a power cut ends every pod
of the node as well, and host-local does the same). It is the node's own truth: an ADD reads and
writes it alone, never the API.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from pathlib import Path

from netattach import atomic
from netattach.cni import errors
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

    from netattach.ipam.config import Address, Network

_SAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")


class Holder(NamedTuple):
    """Who holds an address: a container's interface, and its pod for people to read."""

    container_id: str
    ifname: str
    pod: str = ""  # namespace/name
    uid: str = ""

    def to_raw(self) -> dict[str, str]:
        return {"containerID": self.container_id, "ifname": self.ifname, "pod": self.pod,
                "uid": self.uid}  # fmt: skip

    @classmethod
    def from_raw(cls, raw: Any) -> Holder:
        return cls(
            container_id=str(raw["containerID"]),
            ifname=str(raw["ifname"]),
            pod=str(raw.get("pod", "")),
            uid=str(raw.get("uid", "")),
        )


class Ledger:
    """A pool's blocks and allocations on this node, as kept in its file."""

    def __init__(self, path: Path, pool: str) -> None:
        self.path = path
        self.pool = pool
        self.blocks: set[Network] = set()
        self.held: dict[Address, Holder] = {}
        self.freed: dict[Address, float] = {}  # wall-clock time of the DEL

    @classmethod
    def load(cls, directory: Path, pool: str) -> Ledger:
        """The pool's ledger from `directory` (empty when there is none yet)."""
        ledger = cls(directory / file_name(pool), pool)
        try:
            raw = json.loads(ledger.path.read_bytes())
            ledger.blocks = {ipaddress.ip_network(b) for b in raw["blocks"]}
            ledger.held = {
                ipaddress.ip_address(a): Holder.from_raw(h) for a, h in raw["held"].items()
            }
            ledger.freed = {ipaddress.ip_address(a): float(t) for a, t in raw["freed"].items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise errors.IOFailureError(
                f"the address ledger of pool {pool!r} at {ledger.path} is unreadable", str(exc)
            ) from exc
        return ledger

    def save(self) -> None:
        raw = {
            "pool": self.pool,
            "blocks": sorted(str(b) for b in self.blocks),
            "held": {str(a): h.to_raw() for a, h in sorted(self.held.items(), key=_order)},
            "freed": {str(a): t for a, t in sorted(self.freed.items(), key=_order)},
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic.write_atomic(self.path, json.dumps(raw).encode(), durable=False)
        except OSError as exc:
            raise errors.IOFailureError(
                f"cannot write the address ledger of pool {self.pool!r}", str(exc)
            ) from exc

    def holders_in(self, block: Network) -> dict[Address, Holder]:
        return {a: h for a, h in self.held.items() if a in block}


def load_all(directory: Path) -> list[Ledger]:
    """Every pool's ledger in `directory`."""
    found = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            pool = json.loads(path.read_bytes())["pool"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise errors.IOFailureError(
                f"the address ledger {path} is unreadable", str(exc)
            ) from exc
        found.append(Ledger.load(directory, str(pool)))
    return found


def file_name(pool: str) -> str:
    """The pool's file: its name made safe, and a digest so two names made alike stay apart."""
    digest = hashlib.sha256(pool.encode()).hexdigest()[:12]
    return f"{_SAFE.sub('_', pool)[:64]}-{digest}.json"


def _order(item: tuple[Address, object]) -> tuple[int, int]:
    return item[0].version, int(item[0])
