"""`netattach-thin`: the executable a container runtime runs as a CNI plugin."""

import logging
import os
import sys

from netattach.daemon import thin


def main() -> int:
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="netattach-thin %(levelname)s %(message)s"
    )
    reply = thin.handle(os.environ, sys.stdin.buffer.read())
    sys.stdout.buffer.write(reply.stdout)
    sys.stdout.flush()
    return reply.exit_code


if __name__ == "__main__":
    sys.exit(main())
