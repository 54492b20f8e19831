"""`netattach daemon --config FILE`: the node daemon until SIGTERM or SIGINT."""

import asyncio
import logging
import signal
import sys
from pathlib import Path

from netattach.cni import errors
from netattach.daemon import service, settings


def run(*, config: str, shim: str | None) -> int:
    try:
        cfg = settings.load_settings(Path(config))
    except errors.CNIError as exc:
        print(f"netattach daemon: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        stream=sys.stderr,
        level=cfg.logging.level.upper(),
        format="%(asctime)s netattach %(levelname)s %(name)s: %(message)s",
    )
    # the HTTP client logs every request at INFO: the feed reports what matters itself
    for noisy in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            daemon = service.Daemon(cfg, shim=Path(shim) if shim else None)
        except errors.CNIError as exc:
            print(f"netattach daemon: {exc}", file=sys.stderr)
            return 2
        return await daemon.run(stop)

    return asyncio.run(main())
