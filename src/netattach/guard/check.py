"""A delegate config against the delegate policy's lists: what it may not do (SEC-DELEGATE).

`check_config(raw, rules)` walks the whole config (a `.conf` or a conflist, as the NAD wrote it
or as it will run) and returns every refusal, `[]` when the config may run. Keys are checked
wherever they appear, at any depth: a meta plugin's delegate is a plugin too, and a key hidden in
a nested object is checked rather than trusted. What each key means:

    type                  every `type` (plugins, their `ipam`, a meta plugin's delegates)
    master                a host interface to hang off; macvlan/ipvlan without one (or with "")
                          use the node's default-route interface, allowed only by a list that
                          allows anything
    bridge                a host bridge to join; bridge without one (or with "") joins `cni0`
    device                a host interface host-device moves into the pod; host-device's other
                          ways to name one (`hwaddr`, `kernelpath`) only when `device` allows
                          anything
    pciBusID, deviceID    a PCI address (host-device, `runtimeConfig.deviceID`)
    dataDir               a directory written as root (host-local, tuning)
    sysctl                a mapping whose keys are sysctls tuning writes

A value of the wrong kind (`"master": 5`, `"type": null`) is refused too: the plugin would read
it some way we did not check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from netattach.cni import conf
from netattach.guard import delegate_policy, globs, ifnames, keys, node_rules, refusal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

# The keys that name host resources, settings list by key.
NAME_KEYS: Final = {
    "master": "master",
    "bridge": "bridge",
    "device": "device",
    "pciBusID": "pciBusID",
    "deviceID": "pciBusID",
}


def check_config(
    raw: Mapping[str, Any],
    rules: delegate_policy.DelegateRules,
    protected: globs.Prefixes = delegate_policy.DEFAULT_PROTECTED,
) -> list[refusal.Refusal]:
    """Every refusal of the config `raw` under `rules`: first the keys a Go plugin would read
    otherwise than written (SEC-KEYS: nothing else can be judged then), else the values, in
    the order the keys are written. `protected` are directories no `dataDir` may name, whatever
    the lists say (netattach's own and the runtime's)."""
    spelled = keys.spelling_problems(raw)
    if spelled:
        return [
            refusal.Refusal(key=path, value=refusal.show(value), rule="", why=why)
            for path, value, why in spelled
        ]
    refusals: list[refusal.Refusal] = []
    _walk(raw, "", rules, protected, refusals)
    # SEC-NODE: passthru masters, gateway bridges, reserved ranges.
    refusals.extend(node_rules.check_config(raw, rules))
    return refusals


def _walk(
    node: object,
    path: str,
    rules: delegate_policy.DelegateRules,
    protected: globs.Prefixes,
    refusals: list[refusal.Refusal],
) -> None:
    if isinstance(node, list):
        for index, item in enumerate(node):
            _walk(item, f"{path}[{index}]", rules, protected, refusals)
        return
    if not isinstance(node, Mapping):
        return
    _check_object(node, path, rules, protected, refusals)
    for key, value in node.items():
        if key == "sysctl" and isinstance(value, Mapping):
            continue  # its keys are sysctl names, checked above; its values are not configs
        _walk(value, refusal.join(path, str(key)), rules, protected, refusals)


def _check_object(
    obj: Mapping[str, Any],
    path: str,
    rules: delegate_policy.DelegateRules,
    protected: globs.Prefixes,
    refusals: list[refusal.Refusal],
) -> None:
    def refuse(key: str, value: object, listed: object, name: str, why: str = "") -> None:
        rule = f"{rules.source}.{name} {listed}"
        refusals.append(
            refusal.Refusal(
                key=refusal.join(path, key),
                value=refusal.show(value),
                rule=rule,
                why=why or refusal.NOT_ALLOWED,
            )
        )

    for key, value in obj.items():
        if key == "type":
            if isinstance(value, str) and conf.plugin_type_problem(value):
                # A path runs whatever file it names: never, whatever `types` allows.
                why = "is not a plain file name (no '/', '\\', '..'), refused whatever"
                refuse(key, value, rules.types, "types", why)
            elif not isinstance(value, str) or not rules.types.allows(value):
                refuse(key, value, rules.types, "types")
        elif key in NAME_KEYS:
            name = NAME_KEYS[key]
            listed = _names(rules, name)
            if not isinstance(value, str):
                refuse(key, value, listed, name, "is not a string, refused by")
            elif value == "" and key == "master":
                if not rules.master.allows_anything:
                    refusals.append(_default_master(path, rules))
            elif value == "" and key == "bridge":
                if not rules.bridge.allows(keys.DEFAULT_BRIDGE_NAME):
                    refusals.append(_default_bridge(path, rules))
            elif key in keys.LINK_KEYS and (problem := ifnames.problem(value)):
                # SEC-VALUES: the kernel would act on another name than the list judged.
                refuse(key, value, listed, name, f"{problem}; refused whatever")
            elif not listed.allows(value):
                refuse(key, value, listed, name)
        elif key == "dataDir":
            _check_data_dir(value, refusal.join(path, key), rules, protected, refusals)
        elif key == "sysctl":
            if not isinstance(value, Mapping):
                refuse(key, value, rules.sysctl, "sysctl", "is not a mapping, refused by")
                continue
            for sysctl in value:
                if not rules.sysctl.allows(str(sysctl)):
                    refuse(f"{key}[{refusal.show(str(sysctl))}]", sysctl, rules.sysctl, "sysctl")
        elif key in keys.HOST_DEVICE_OTHER_NAMES and not rules.device.allows_anything:
            refuse(key, value, rules.device, "device", "names a host device that only")
    _check_defaults(obj, path, rules, refusals)


def _check_data_dir(
    value: object,
    path: str,
    rules: delegate_policy.DelegateRules,
    protected: globs.Prefixes,
    refusals: list[refusal.Refusal],
) -> None:
    """A `dataDir` judged as the plugin will write it: normalised (`//`, `/./`, a trailing `/`),
    then with its symlinks resolved as they stand on this node now; both forms must be allowed
    by the list, and neither may lie in a protected directory."""
    rule = f"{rules.source}.dataDir {rules.data_dir}"
    if not isinstance(value, str):
        refusals.append(
            refusal.Refusal(path, refusal.show(value), rule, "is not a string, refused by")
        )
        return
    normal = globs.normal_path(value)
    if normal is None:  # relative, or with `..`: no list takes it
        refusals.append(refusal.Refusal(path, refusal.show(value), rule))
        return
    resolved = globs.normal_path(os.path.realpath(normal)) or normal
    shown = (
        refusal.show(value)
        if resolved == value
        else f"{refusal.show(value)} (written to {resolved!r})"
    )
    forms = dict.fromkeys((normal, resolved))
    if not all(rules.data_dir.allows(form) for form in forms):
        refusals.append(refusal.Refusal(path, shown, rule))
    elif any(protected.holds(form) for form in forms):
        why = "lies in a directory of netattach or the runtime, which no list grants:"
        refusals.append(refusal.Refusal(path, shown, str(protected), why))


def _check_defaults(
    obj: Mapping[str, Any],
    path: str,
    rules: delegate_policy.DelegateRules,
    refusals: list[refusal.Refusal],
) -> None:
    """What a plugin uses when the config leaves a name out: the node's uplink, or cni0."""
    kind = obj.get("type")
    if (
        kind in keys.DEFAULT_ROUTE_MASTER
        and "master" not in obj
        and not rules.master.allows_anything
    ):
        refusals.append(_default_master(path, rules))
    if (
        kind == "bridge"
        and "bridge" not in obj
        and not rules.bridge.allows(keys.DEFAULT_BRIDGE_NAME)
    ):
        refusals.append(_default_bridge(path, rules))


def _default_master(path: str, rules: delegate_policy.DelegateRules) -> refusal.Refusal:
    return refusal.Refusal(
        key=refusal.join(path, "master"),
        value="unset (the node's default-route interface)",
        rule=f"{rules.source}.master {rules.master}",
        why="is allowed only by a list that allows anything, not by",
    )


def _default_bridge(path: str, rules: delegate_policy.DelegateRules) -> refusal.Refusal:
    return refusal.Refusal(
        key=refusal.join(path, "bridge"),
        value=f"unset (bridge CNI's default, {keys.DEFAULT_BRIDGE_NAME!r})",
        rule=f"{rules.source}.bridge {rules.bridge}",
    )


def _names(rules: delegate_policy.DelegateRules, name: str) -> globs.Patterns:
    if name == "master":
        return rules.master
    if name == "bridge":
        return rules.bridge
    if name == "device":
        return rules.device
    return rules.pci_bus_id
