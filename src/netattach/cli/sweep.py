"""`netattach gc --config FILE`: one sweep of stale pod records (a timer on thin nodes)."""

import asyncio
import sys
from pathlib import Path

from netattach.cni import errors
from netattach.pods import thin
from netattach.settings import settings


def run(*, config: str) -> int:
    try:
        cfg = settings.load_settings(Path(config))
        swept = asyncio.run(thin.build_orchestrator(cfg, sweep_only=True).sweep())
    except errors.CNIError as exc:
        print(f"netattach gc: {exc}", file=sys.stderr)
        return 1
    for container_id in swept:
        print(f"deleted the attachments of container {container_id} (its netns is gone)")
    print(f"{len(swept)} stale containers deleted")
    return 0
