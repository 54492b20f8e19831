"""Network configurations and configuration lists, parsed without losing a byte of meaning.

The raw dict is kept verbatim: delegates get a copy of what the operator wrote with only the keys
the CNI spec tells a runtime to inject (`name`, `cniVersion`, `prevResult`, `runtimeConfig`,
`args`), never a re-serialised model, so plugin-specific fields survive untouched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from netattach.cni import errors, version
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Patterns as text: `re` compiles each on first use and caches it, so a start of the thin
# plugin compiles only those its call needs.
# CNI spec 1.0 "Configuration format": a network name starts with an alphanumeric character,
# then alphanumerics, underscore, period and hyphen.
_NETWORK_NAME = r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*"

# libcni's ConfFiles: the extensions a runtime reads from its config directory.
CONF_EXTENSIONS = (".conf", ".json")
LIST_EXTENSIONS = (".conflist",)

# A config from disk or a NAD with no cniVersion is, as libcni decodes it, version 0.1.0.
DEFAULT_VERSION = "0.1.0"

# How deep a config may nest (a list is 1, a plugin 2, its ipam 3, ranges 4 and 5, a range 6):
# far past any real config, far below Python's recursion limit, which copying and checking a
# deeper one would reach (docs/configuration.md, "Limits").
MAX_DEPTH = 32


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class NetworkConfig(NamedTuple):
    """One plugin's configuration. `raw` is what was written, untouched."""

    raw: dict[str, Any]
    name: str
    type: str
    cni_version: str
    capabilities: frozenset[str]
    source: str


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class NetworkConfigList(NamedTuple):
    """A network: its plugins in order. A single `.conf` becomes a list of one."""

    raw: dict[str, Any]
    name: str
    cni_version: str
    plugins: tuple[NetworkConfig, ...]
    disable_check: bool
    disable_gc: bool
    source: str


def plugin_type_problem(value: object) -> str | None:
    """Why `value` may not be used as a plugin `type`, or None (CNI-FIND, NAD-BADCONF)."""
    if not isinstance(value, str) or not value:
        return f"plugin type must be a non-empty string, not {value!r}"
    if "/" in value or "\\" in value or ".." in value or "\0" in value:
        return f"plugin type {value!r} must be a plain file name (no '/', '\\', '..' or NUL)"
    return None


def network_name_problem(value: object) -> str | None:
    if not isinstance(value, str) or not re.fullmatch(_NETWORK_NAME, value):
        return (
            f"network name {value!r} must start with a letter or digit, "
            "then letters, digits, '_', '.', '-'"
        )
    return None


def _decode(data: bytes | str | Mapping[str, Any], source: str) -> dict[str, Any]:
    if isinstance(data, Mapping):
        return dict(data)
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        # RecursionError: JSON nested deeper than the parser's stack is bad input, not a crash.
        raise errors.DecodingFailureError(f"{source}: invalid JSON", str(exc)[:200]) from exc
    if not isinstance(raw, dict):
        raise errors.InvalidNetworkConfigError(
            f"{source}: a network configuration must be a JSON object, not {type(raw).__name__}"
        )
    problem = depth_problem(raw)
    if problem:
        raise errors.InvalidNetworkConfigError(f"{source}: {problem}")
    return raw


def depth_problem(raw: object, limit: int = MAX_DEPTH) -> str | None:
    """Why `raw` (decoded JSON) nests too deep, or None. Walked with a stack, not recursion."""
    stack: list[tuple[object, int]] = [(raw, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return (
                f"objects and lists nest more than {limit} deep, the limit for a network "
                "configuration"
            )
        stack.extend((child, depth + 1) for child in children)
    return None


def _flag(raw: Mapping[str, Any], key: str, problems: list[str]) -> bool:
    # CNI spec 1.1: disableCheck/disableGC are booleans; libcni also accepts "true"/"false".
    value = raw.get(key, False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    problems.append(f"{key} must be a boolean, not {value!r}")
    return False


def _version_of(raw: Mapping[str, Any], problems: list[str]) -> str:
    """The version a config (list) runs at: highest known of `cniVersions`, else `cniVersion`."""
    versions = raw.get("cniVersions")
    if versions is not None:
        if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
            problems.append(f"cniVersions must be a list of strings, not {versions!r}")
        else:
            chosen = version.highest_common(versions)
            if chosen is not None:
                return chosen
            if "cniVersion" not in raw:
                problems.append(f"none of cniVersions {versions!r} is supported")
                return DEFAULT_VERSION
    declared = raw.get("cniVersion", DEFAULT_VERSION)
    if not isinstance(declared, str) or not version.is_known(declared):
        problems.append(f"cniVersion {declared!r} is not a CNI version netattach supports")
        return DEFAULT_VERSION
    return declared


def _capabilities(raw: Mapping[str, Any], where: str, problems: list[str]) -> frozenset[str]:
    caps = raw.get("capabilities", {})
    if not isinstance(caps, dict) or not all(
        isinstance(k, str) and isinstance(v, bool) for k, v in caps.items()
    ):
        problems.append(f"{where}capabilities must map names to booleans, not {caps!r}")
        return frozenset()
    return frozenset(k for k, v in caps.items() if v)


def _plugin(
    raw: dict[str, Any],
    *,
    name: str,
    cni_version: str,
    where: str,
    source: str,
    problems: list[str],
) -> NetworkConfig:
    problem = plugin_type_problem(raw.get("type"))
    if problem is not None:
        problems.append(f"{where}type: {problem}" if where else problem)
    return NetworkConfig(
        raw=raw,
        name=name,
        type=str(raw.get("type", "")),
        cni_version=cni_version,
        capabilities=_capabilities(raw, where, problems),
        source=source,
    )


def _fail(source: str, problems: list[str]) -> None:
    if problems:
        raise errors.InvalidNetworkConfigError(
            f"{source}: invalid network configuration", "; ".join(problems)
        )


def _name(raw: Mapping[str, Any], required: bool, problems: list[str]) -> str:
    """The config's `name`; NAD configs may omit it (standard §3.4.2 injects the NAD's)."""
    name = raw.get("name", "")
    if required or "name" in raw:
        problem = network_name_problem(name)
        if problem is not None:
            problems.append(problem)
    return str(name)


def parse_config(
    data: bytes | str | Mapping[str, Any], *, source: str = "<config>", require_name: bool = True
) -> NetworkConfig:
    """A single-plugin config (`.conf`); `require_name=False` for NAD configs (name injected)."""
    raw = _decode(data, source)
    problems: list[str] = []
    if "plugins" in raw:
        problems.append("this is a configuration list (it has 'plugins'), not a single config")
    name = _name(raw, require_name, problems)
    cni_version = _version_of(raw, problems)
    conf = _plugin(
        raw, name=name, cni_version=cni_version, where="", source=source, problems=problems
    )
    _fail(source, problems)
    return conf


def parse_config_list(
    data: bytes | str | Mapping[str, Any], *, source: str = "<config>", require_name: bool = True
) -> NetworkConfigList:
    """A config list (`.conflist`): every plugin's `name`/`cniVersion` come from the list."""
    raw = _decode(data, source)
    problems: list[str] = []
    name = _name(raw, require_name, problems)
    cni_version = _version_of(raw, problems)
    plugins_raw = raw.get("plugins")
    plugins: list[NetworkConfig] = []
    if not isinstance(plugins_raw, list) or not plugins_raw:
        problems.append(f"plugins must be a non-empty list, not {plugins_raw!r}")
    else:
        for index, item in enumerate(plugins_raw):
            if not isinstance(item, dict):
                problems.append(f"plugins[{index}] must be an object, not {item!r}")
                continue
            plugins.append(
                _plugin(
                    item,
                    name=name,
                    cni_version=cni_version,
                    where=f"plugins[{index}].",
                    source=source,
                    problems=problems,
                )
            )
    disable_check = _flag(raw, "disableCheck", problems)
    disable_gc = _flag(raw, "disableGC", problems)
    _fail(source, problems)
    return NetworkConfigList(
        raw=raw,
        name=name,
        cni_version=cni_version,
        plugins=tuple(plugins),
        disable_check=disable_check,
        disable_gc=disable_gc,
        source=source,
    )


def list_from_config(conf: NetworkConfig) -> NetworkConfigList:
    """A single config as a list of one (libcni's ConfListFromConf)."""
    raw = {"cniVersion": conf.cni_version, "name": conf.name, "plugins": [conf.raw]}
    return NetworkConfigList(
        raw=raw,
        name=conf.name,
        cni_version=conf.cni_version,
        plugins=(conf,),
        disable_check=False,
        disable_gc=False,
        source=conf.source,
    )


def parse_any(
    data: bytes | str | Mapping[str, Any], *, source: str = "<config>", require_name: bool = True
) -> NetworkConfigList:
    """A config or a config list, told apart by `plugins` (as Multus does for `spec.config`)."""
    raw = _decode(data, source)
    if "plugins" in raw:
        return parse_config_list(raw, source=source, require_name=require_name)
    return list_from_config(parse_config(raw, source=source, require_name=require_name))


def list_config_files(directory: Path) -> list[Path]:
    """The config files of a directory in lexical order, as a runtime reads them."""
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise errors.IOFailureError(
            f"cannot read config directory {str(directory)!r}", str(exc)
        ) from exc
    wanted = CONF_EXTENSIONS + LIST_EXTENSIONS
    return [p for p in entries if p.suffix in wanted and p.is_file()]


def load_file(path: Path) -> NetworkConfigList:
    """A `.conflist`, `.conf` or `.json` file; every error names the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise errors.IOFailureError(f"cannot read {str(path)!r}", str(exc)) from exc
    if path.suffix in LIST_EXTENSIONS:
        return parse_config_list(data, source=str(path))
    return list_from_config(parse_config(data, source=str(path)))


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class LoadedDirectory(NamedTuple):
    """What a config directory holds: the good networks and, separately, each bad file's error."""

    networks: tuple[NetworkConfigList, ...]
    problems: tuple[errors.CNIError, ...]


def load_dir(directory: Path) -> LoadedDirectory:
    networks: list[NetworkConfigList] = []
    problems: list[errors.CNIError] = []
    for path in list_config_files(directory):
        try:
            networks.append(load_file(path))
        except errors.CNIError as exc:
            problems.append(exc)
    return LoadedDirectory(networks=tuple(networks), problems=tuple(problems))


def find_network(
    directory: Path, name: str, skipped: list[errors.CNIError] | None = None
) -> NetworkConfigList | None:
    """The network called `name` on disk: config lists first, then single configs (standard §3.4.1).

    Within each kind, files are tried in lexical order and the first match wins. Files that fail
    to parse are passed over (they may belong to another network) and, when `skipped` is given,
    their errors are appended to it, so a caller that finds nothing can say why.
    """
    files = list_config_files(directory)
    ordered = [p for p in files if p.suffix in LIST_EXTENSIONS] + [
        p for p in files if p.suffix in CONF_EXTENSIONS
    ]
    for path in ordered:
        try:
            network = load_file(path)
        except errors.CNIError as exc:
            if skipped is not None:
                skipped.append(exc)
            continue
        if network.name == name:
            return network
    return None
