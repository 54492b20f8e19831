"""Where the daemon serves its Prometheus metrics and its health (`/healthz`, `/readyz`).

metrics.address   host:port, an IPv6 address in brackets ('[::1]:9108')
metrics.enabled   serve them at all
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from netattach import names
from netattach.settings import fields
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

DEFAULT_METRICS_ADDRESS: Final = "127.0.0.1:9108"
_METRICS_KEYS: Final = ("address", "enabled")
_PORT: Final = r"[0-9]{1,5}"
_ADDRESS_FORM: Final = (
    "host:port, an IPv6 address in brackets ('[::1]:9108'), the port from 1 to 65535"
)


class MetricsSettings(NamedTuple):
    """Where the daemon serves its Prometheus metrics: `address` is host:port ("[::1]:9108")."""

    address: str = DEFAULT_METRICS_ADDRESS
    enabled: bool = True

    @property
    def host(self) -> str:
        """The address's host, an IPv6 address without its brackets; ready for `bind`."""
        return _split_address(self.address)[0]

    @property
    def port(self) -> int:
        return _split_address(self.address)[1]


def section(value: object, key: str, problems: list[str]) -> MetricsSettings | None:
    """The `metrics` section."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(
            f"{key}: must be a mapping such as {{address: '{DEFAULT_METRICS_ADDRESS}', enabled: "
            f"true}}, got {fields.show(value)}"
        )
        return None
    start = len(problems)
    fields.check_keys(value, _METRICS_KEYS, f"{key}.", problems)
    address = _address(value.get("address"), f"{key}.address", problems)
    enabled = fields.flag(value.get("enabled"), f"{key}.enabled", problems)
    if len(problems) > start:
        return None
    return MetricsSettings(
        address=DEFAULT_METRICS_ADDRESS if address is None else address,
        enabled=True if enabled is None else enabled,
    )


def _address(value: object, key: str, problems: list[str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        problems.append(f"{key}: must be {_ADDRESS_FORM}, got {fields.show(value)}")
        return None
    try:
        _split_address(value)
    except ValueError:
        problems.append(f"{key}: must be {_ADDRESS_FORM}, got {fields.show(value)}")
        return None
    return value


def _split_address(address: str) -> tuple[str, int]:
    """`address` ("host:port", "[v6]:port") as (host, port); ValueError when it is neither."""
    host, colon, port = address.rpartition(":")
    if not colon or re.fullmatch(_PORT, port) is None or not 1 <= int(port) <= 65535:
        raise ValueError(f"not {_ADDRESS_FORM}: {address!r}")
    if host.startswith("[") and host.endswith("]"):
        ipaddress.IPv6Address(host[1:-1])  # raises ValueError
        return host[1:-1], int(port)
    if not _is_host(host):
        raise ValueError(f"not {_ADDRESS_FORM}: {address!r}")
    return host, int(port)


def _is_host(text: str) -> bool:
    # Digits and dots are an IPv4 address or nothing: '300.1.1.1' is no hostname either.
    if re.fullmatch(r"[0-9.]+", text):
        try:
            ipaddress.IPv4Address(text)
        except ValueError:
            return False
        return True
    return names.is_subdomain(text.lower())
