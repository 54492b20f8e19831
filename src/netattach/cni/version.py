"""CNI versions: parsing, ordering, and choosing the version a config list runs at."""

from collections.abc import Iterable, Mapping, Sequence

from netattach.cni import errors, spec


def parse_version(text: str) -> tuple[int, int, int]:
    """`"0.3.1"` → `(0, 3, 1)`; anything not `MAJOR.MINOR.PATCH` raises code 1."""
    if isinstance(text, str) and text in _KNOWN:
        return _KNOWN[text]  # every result and config is compared by version many times a call
    return _parse_version(text)


def _parse_version(text: str) -> tuple[int, int, int]:
    parts = text.split(".") if isinstance(text, str) else []
    if len(parts) != 3 or not all(
        p.isdigit() and (p == "0" or not p.startswith("0")) for p in parts
    ):
        raise errors.IncompatibleVersionError(f"invalid CNI version {text!r}")
    major, minor, patch = (int(p) for p in parts)
    return major, minor, patch


_KNOWN: dict[str, tuple[int, int, int]] = {v: _parse_version(v) for v in spec.VERSIONS}


def at_least(version: str, floor: str) -> bool:
    """`version >= floor` as semantic versions."""
    return parse_version(version) >= parse_version(floor)


def is_known(version: str) -> bool:
    return version in spec.VERSIONS


def highest(versions: Iterable[str]) -> str | None:
    """The highest well-formed version of `versions`, or None when there is none."""
    best: tuple[tuple[int, int, int], str] | None = None
    for text in versions:
        try:
            key = parse_version(text)
        except errors.IncompatibleVersionError:
            continue
        if best is None or key > best[0]:
            best = (key, text)
    return None if best is None else best[1]


def highest_common(wanted: Sequence[str], supported: Iterable[str] = spec.VERSIONS) -> str | None:
    """The highest version in `wanted` that is also in `supported` (CNI 1.1 `cniVersions`)."""
    allowed = set(supported)
    return highest(v for v in wanted if v in allowed)


def family(version: str) -> str:
    """The result layout of a version: "0.2.0" (ip4/ip6), "0.4.0" (ips with version), "1.0.0"."""
    key = parse_version(version)
    if key < (0, 3, 0):
        return "0.2.0"
    if key < (1, 0, 0):
        return "0.4.0"
    return "1.0.0"


def parse_version_info(raw: Mapping[str, object], plugin: str) -> tuple[str, ...]:
    """The versions a plugin's `VERSION` reply lists.

    A 0.1.0 plugin replies without `supportedVersions`: it then supports what it names.
    """
    supported = raw.get("supportedVersions")
    if supported is None:
        own = raw.get("cniVersion")
        if isinstance(own, str):
            return (own,) if own != "0.2.0" else ("0.1.0", "0.2.0")
        raise errors.DecodingFailureError(f"plugin {plugin}: VERSION reply has no versions")
    if not isinstance(supported, list) or not all(isinstance(v, str) for v in supported):
        raise errors.DecodingFailureError(
            f"plugin {plugin}: VERSION reply has invalid supportedVersions {supported!r}"
        )
    return tuple(supported)
