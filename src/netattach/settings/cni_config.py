"""The thin plugin's path to its settings: the CNI config names the settings file, or carries it.

{"type": "netattach-thin", "configFile": "/etc/netattach/config.yaml", ...}
{"type": "netattach-thin", "settings": {clusterNetwork: ..., feed: ...}, ...}
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from netattach.cni import errors
from netattach.settings import fields
from netattach.settings import settings as settings_mod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

_CNI_CONFIG_KEYS: Final = ("configFile", "settings")


def settings_from_cni_config(
    raw: Mapping[str, object], *, source: str = "netattach CNI config"
) -> settings_mod.Settings:
    """The settings the thin plugin's CNI config points at, or carries inline.

    The config has exactly one of `configFile` (an absolute path, loaded with `load_settings`)
    and `settings` (the same mapping as the file, inline). Its other keys (`cniVersion`, `name`,
    `type`, `capabilities`, what the runtime injects) are the runtime's business and not read.
    """
    present = [key for key in _CNI_CONFIG_KEYS if raw.get(key) is not None]
    if len(present) != 1:
        got = {key: raw[key] for key in _CNI_CONFIG_KEYS if key in raw}
        raise errors.InvalidNetworkConfigError(
            f"{source}: invalid netattach CNI config",
            "exactly one of 'configFile' (an absolute path to the settings file) and 'settings' "
            f"(the settings inline) is required, got {fields.show(got) if got else 'neither'}",
        )
    if present == ["settings"]:
        return settings_mod.parse_settings(raw["settings"], source=source, prefix="settings.")
    value = raw["configFile"]
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise errors.InvalidNetworkConfigError(
            f"{source}: invalid netattach CNI config",
            f"configFile: must be an absolute path to the settings file, got {fields.show(value)}",
        )
    return settings_mod.load_settings(Path(value))
