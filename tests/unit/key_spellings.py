"""Issue 27's attacks by key spelling (SEC-KEYS): configs that passed the exact-name delegate
policy, each with the lists it was judged under and what its refusal says. Shared by the pure
checks and the admission policy's."""

from __future__ import annotations

from typing import Any

from netattach.guard import delegate_policy

HOST_DEVICE = {"types": [*delegate_policy.DEFAULT_TYPES, "host-device"], "device": ["na-ok"]}

# Issue 27's attacks by key spelling: each passed the exact-name policy, each is refused now.
SPELLINGS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "DEVICE after device": (
        {"type": "host-device", "device": "na-ok", "DEVICE": "eth0"},
        HOST_DEVICE,
        "DEVICE \"eth0\" is the same key as 'device' to a Go plugin",
    ),
    "Device": ({"type": "host-device", "Device": "eth0"}, HOST_DEVICE, "is read as 'device'"),
    "HWADDR": (
        {"type": "host-device", "HWADDR": "52:54:00:00:00:01"},
        HOST_DEVICE,
        "HWADDR \"52:54:00:00:00:01\" is read as 'hwaddr'",
    ),
    "PCIBUSID": (
        {"type": "host-device", "PCIBUSID": "0000:00:01.0"},
        HOST_DEVICE,
        "is read as 'pciBusID'",
    ),
    "RuntimeConfig.DeviceID": (
        {"type": "host-device", "RuntimeConfig": {"DeviceID": "0000:00:01.0"}},
        HOST_DEVICE,
        "RuntimeConfig {",
    ),
    "ipam TYPE": (
        {"type": "bridge", "bridge": "b", "ipam": {"type": "host-local", "TYPE": "na-evil"}},
        {},
        "ipam.TYPE \"na-evil\" is the same key as 'type'",
    ),
    "DataDir": (
        {"type": "bridge", "ipam": {"type": "host-local", "DataDir": "/etc/na"}},
        {},
        "ipam.DataDir \"/etc/na\" is read as 'dataDir'",
    ),
    "MASTER": ({"type": "macvlan", "master": "ok", "MASTER": "eth0"}, {"master": ["ok"]}, "MASTER"),
    "ma\u017fter": ({"type": "macvlan", "ma\u017fter": "eth0"}, {"master": ["ok"]}, "is read as"),
    "BRIDGE": ({"type": "bridge", "BRIDGE": "cni0"}, {"bridge": ["*", "!cni0"]}, "BRIDGE"),
    "Sysctl": (
        {"type": "tuning", "Sysctl": {"kernel.core_pattern": "|/x"}},
        {},
        'Sysctl {"kernel.core_pattern": "|/x"} is read as \'sysctl\'',
    ),
    "\u017fysctl": (
        {"type": "tuning", "\u017fysctl": {"kernel.x": "1"}},
        {},
        "is read as 'sysctl'",
    ),
    "\u212a in kernelpath": (
        {"type": "host-device", "\u212aernelpath": "/sys/x"},
        HOST_DEVICE,
        "is read as 'kernelpath'",
    ),
}
