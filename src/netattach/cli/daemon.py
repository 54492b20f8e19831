"""`netattach daemon --config FILE [--log-format text|json] [--log-level LEVEL]`: the node
daemon until SIGTERM or SIGINT. `--log-level` overrides the settings' `logLevel`."""

import asyncio
import sys
from pathlib import Path

from netattach import logs
from netattach.cli.signals import stop_on_signals
from netattach.cni import errors
from netattach.daemon import heap, service, shim_install
from netattach.settings import settings


def run(
    *,
    config: str,
    shim: str | None,
    log_format: logs.LogFormat = "text",
    log_level: str | None = None,
) -> int:
    heap.tune()
    try:
        cfg = settings.load_settings(Path(config))
    except errors.CNIError as exc:
        print(f"netattach daemon: {exc}", file=sys.stderr)
        return 2
    logs.configure(log_level or cfg.logging.level, log_format, loggers=dict(cfg.logging.loggers))

    async def main() -> int:
        stop = stop_on_signals()
        try:
            daemon = service.Daemon(cfg, shim=Path(shim) if shim else None)
        except (errors.CNIError, shim_install.ShimNotFoundError) as exc:
            print(f"netattach daemon: {exc}", file=sys.stderr)
            return 2
        return await daemon.run(stop)

    return asyncio.run(main())
