"""Constants of the CNI specification (seed 004 and the public SPEC.md up to 1.1.0)."""

from __future__ import annotations

# `typing` for mypy only: importing it would cost the shim, which imports this module, ~2 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

# Every result/config version the CNI specification has published, oldest first.
VERSIONS: Final = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
CURRENT_VERSION: Final = "1.1.0"

ADD: Final = "ADD"
DEL: Final = "DEL"
CHECK: Final = "CHECK"
VERSION: Final = "VERSION"
GC: Final = "GC"
STATUS: Final = "STATUS"
COMMANDS: Final = frozenset({ADD, DEL, CHECK, VERSION, GC, STATUS})

ENV_COMMAND: Final = "CNI_COMMAND"
ENV_CONTAINERID: Final = "CNI_CONTAINERID"
ENV_NETNS: Final = "CNI_NETNS"
ENV_IFNAME: Final = "CNI_IFNAME"
ENV_ARGS: Final = "CNI_ARGS"
ENV_PATH: Final = "CNI_PATH"
ENV_NAMES: Final = (ENV_COMMAND, ENV_CONTAINERID, ENV_NETNS, ENV_IFNAME, ENV_ARGS, ENV_PATH)

# CNI spec 1.1 "GC": the runtime passes the attachments that are still valid under this key.
VALID_ATTACHMENTS_KEY: Final = "cni.dev/valid-attachments"

# Linux IFNAMSIZ is 16 including the terminating NUL.
IFNAME_MAX_BYTES: Final = 15
