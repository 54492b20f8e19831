"""The delegate policy as a ValidatingAdmissionPolicy: the same lists, checked in CEL by the API
server when a NAD is created or changed (SEC-ADMISSION). No webhook runs.

`build_policy(policy)` returns the ValidatingAdmissionPolicy and its binding
(admissionregistration.k8s.io/v1, Kubernetes 1.30 and later) as dicts, generated from the same
`DelegatePolicy` the daemon checks at ADD, so the two cannot drift apart.

CEL in Kubernetes cannot decode JSON, and `spec.config` is a JSON string, so the expressions read
it as text, with the regular expressions `globs` renders from each list:

- a `"key": "value"` pair is found wherever it is written, as the daemon checks a key at any
  depth; each value must be taken by the list and by none of its `!` exclusions;
- a config with a backslash is refused: an escape (`"\\u0068ost-device"`) could spell what the
  text does not show;
- a checked key whose value is not a string is refused (the daemon refuses it too);
- a macvlan/ipvlan without `master`, or a bridge without `bridge`, is found by counting: fewer
  `master` keys than macvlan, ipvlan and vlan plugins (fewer `bridge` keys than bridge plugins).

The NAD's `k8s.v1.cni.cncf.io/resourceName` annotation (DEV-RESOURCE) is no text of the config:
it is read as the daemon reads it (stripped of white space; none or blank names no resource) and
judged by the `resourceName` list, when some list narrows it.

Where text and structure differ, admission is the stricter (a duplicate key, a nested `sysctl`
object); the one case it can miss (a macvlan without `master` beside another plugin's `master`
key) the daemon still refuses at ADD, which remains the check that holds. A NAD without
`spec.config` names a file the operator installed on the node and is not checked here.
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Final

from netattach.cluster import model
from netattach.guard import admission_node, check, delegate_policy, globs, keys, node_rules

API_VERSION: Final = "admissionregistration.k8s.io/v1"
DEFAULT_NAME: Final = "netattach-delegate-policy"

_WS: Final = r"\s*"
QUOTE: Final = '"'
# The start of a value that is no JSON string: anything but a quote or white space.
NOT_A_STRING: Final = r'[^"\s]'
# A JSON string without escapes (a config with a backslash is refused first).
_STRING: Final = '"[^"]*"'


def _key(names: Sequence[str]) -> str:
    """The regex of a JSON key, one of `names`."""
    inner = "|".join(names)
    return f'"(?:{inner})"' if len(names) > 1 else f'"{inner}"'


def _pair(names: Sequence[str]) -> str:
    return _key(names) + _WS + ":" + _WS + _STRING


def _cel(text: str) -> str:
    """`text` as a CEL string literal (single-quoted; backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _alternatives(regexes: Sequence[str]) -> str | None:
    return "(?:" + "|".join(regexes) + ")" if regexes else None


def _value_check(token: str, names: Sequence[str], allowed: str | None, denied: str | None) -> str:
    """CEL: the pair `token` (`"key": "value"`) has a value `allowed` takes and `denied` not."""
    head, tail = "^" + _key(names) + _WS + ":" + _WS + QUOTE, QUOTE + "$"
    parts = ["false"] if allowed is None else [_matches(token, head + allowed + tail)]
    if denied is not None:
        parts.append("!" + _matches(token, head + denied + tail))
    return " && ".join(parts)


def _matches(token: str, regex: str) -> str:
    return f"{token}.matches({_cel(regex)})"


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """One list's check in CEL: each `tokens` match `m` of the config must satisfy `each`, and
    the whole config `whole` (the value kinds, the plugins left without a name)."""

    tokens: str
    each: str
    whole: tuple[str, ...] = ()

    def expression(self) -> str:
        found = f"variables.config.findAll({_cel(self.tokens)})"
        return " && ".join((*self.whole, f"{found}.all(m, {self.each})"))

    def offenders(self) -> str:
        """CEL: the matches that fail, a list of strings for the message."""
        return f"variables.config.findAll({_cel(self.tokens)}).filter(m, !({self.each}))"


def _names_check(names: Sequence[str], patterns: globs.Patterns, empty: str | None = None) -> str:
    """CEL on the pair `m`: its value is allowed by `patterns`; `empty` is the CEL constant
    deciding an empty value (None: like any other value)."""
    allowed = _alternatives([globs.glob_regex(p) for p in patterns.included])
    denied = _alternatives([globs.glob_regex(p) for p in patterns.excluded])
    check = _value_check("m", names, allowed, denied)
    if empty is not None:
        blank = "^" + _key(names) + _WS + ":" + _WS + QUOTE + QUOTE + "$"
        check = f"({_matches('m', blank)} ? {empty} : ({check}))"
    return check


def _strings_only(names: Sequence[str]) -> str:
    """CEL: every `names` key of the config has a string value."""
    not_a_string = _key(names) + _WS + ":" + _WS + NOT_A_STRING
    return "!" + _matches("variables.config", not_a_string)


def _count(regex: str) -> str:
    return f"variables.config.findAll({_cel(regex)}).size()"


def _types(rules: delegate_policy.DelegateRules) -> Check:
    names = ["type"]
    # A path (`../x`, `/usr/bin/x`) is refused whatever the list allows, as the daemon does.
    path = "^" + _key(names) + _WS + ":" + _WS + QUOTE + '[^"]*(?:/|\\.\\.)'
    each = "!" + _matches("m", path) + " && " + _names_check(names, rules.types)
    return Check(_pair(names), each, (_strings_only(names),))


def _master(rules: delegate_policy.DelegateRules) -> Check:
    names = ["master"]
    anything = rules.master.allows_anything
    whole = [_strings_only(names)]
    if not anything:
        kinds = "|".join((*check.DEFAULT_ROUTE_MASTER, "vlan"))
        plugins = _count(_key(["type"]) + _WS + ":" + _WS + f'"(?:{kinds})"')
        whole.append(f"{plugins} <= {_count(_key(names) + _WS + ':')}")
    each = _names_check(names, rules.master, empty="true" if anything else "false")
    return Check(_pair(names), each, tuple(whole))


def _bridge(rules: delegate_policy.DelegateRules) -> Check:
    names = ["bridge"]
    default = rules.bridge.allows(check.DEFAULT_BRIDGE_NAME)
    whole = [_strings_only(names)]
    if not default:
        plugins = _count(_key(["type"]) + _WS + ":" + _WS + '"bridge"')
        whole.append(f"{plugins} <= {_count(_key(names) + _WS + ':')}")
    each = _names_check(names, rules.bridge, empty="true" if default else "false")
    return Check(_pair(names), each, tuple(whole))


def _device(rules: delegate_policy.DelegateRules) -> Check:
    names = ["device"]
    whole = [_strings_only(names)]
    if not rules.device.allows_anything:
        other = _key(check.HOST_DEVICE_OTHER_NAMES) + _WS + ":"
        whole.append("!" + _matches("variables.config", other))
    return Check(_pair(names), _names_check(names, rules.device), tuple(whole))


def _pci(rules: delegate_policy.DelegateRules) -> Check:
    names = ["pciBusID", "deviceID"]
    return Check(_pair(names), _names_check(names, rules.pci_bus_id), (_strings_only(names),))


def _data_dir(rules: delegate_policy.DelegateRules) -> Check:
    names = ["dataDir"]
    prefixes = rules.data_dir
    allowed = _alternatives([globs.prefix_regex(d) for d in prefixes.included])
    denied = _alternatives([globs.prefix_regex(d) for d in prefixes.excluded])
    head = "^" + _key(names) + _WS + ":" + _WS + QUOTE
    dotdot = head + '(?:[^"]*/)?\\.\\.(?:/[^"]*)?"$'
    # Text cannot normalise a path: a spelling the daemon would normalise (`//`, `/./`, a
    # trailing `/` or `/.`) is refused, so the prefixes below read every path as written.
    unusual = head + '(?:[^"]*(?://|/\\./)[^"]*|[^"]+/\\.?|/\\.)"$'
    each = (
        "!"
        + _matches("m", dotdot)
        + " && !"
        + _matches("m", unusual)
        + " && "
        + _value_check("m", names, allowed, denied)
    )
    return Check(_pair(names), each, (_strings_only(names),))


def _sysctl(rules: delegate_policy.DelegateRules) -> Check:
    """Each flat `"sysctl": {...}` object `m`: every key allowed; a `sysctl` that is no flat
    object (a list, a string, nested objects) is refused by counting."""
    opening = _key(["sysctl"]) + _WS + ":"
    flat = opening + _WS + "\\{[^{}]*\\}"
    allowed = _alternatives([globs.glob_regex(p) for p in rules.sysctl.included])
    denied = _alternatives([globs.glob_regex(p) for p in rules.sysctl.excluded])
    key, tail = "[{,]" + _WS + QUOTE, QUOTE + _WS + ":$"
    checks = ["false"] if allowed is None else [_matches("k", "^" + key + allowed + tail)]
    if denied is not None:
        checks.append("!" + _matches("k", "^" + key + denied + tail))
    every_key = _cel(key + "[^" + QUOTE + "]*" + QUOTE + _WS + ":")
    each = f"m.findAll({every_key}).all(k, {' && '.join(checks)})"
    return Check(flat, each, (f"{_count(opening)} == {_count(flat)}",))


def _node_changes(rules: delegate_policy.DelegateRules) -> Check:
    """SEC-VALUES, what the config text shows: `macspoofchk` true only when `nodeChanges` grants
    it, a `daemonSocketPath` other than the dhcp daemon's only when it grants `dhcpSocket`."""
    mac, socket = node_rules.MACSPOOFCHK, node_rules.DHCP_SOCKET
    grant_mac = "true" if rules.node_changes.allows(mac) else "false"
    grant_socket = "true" if rules.node_changes.allows(socket) else "false"
    head_mac = "^" + _key([mac]) + _WS + ":" + _WS
    head_socket = "^" + _key(["daemonSocketPath"]) + _WS + ":" + _WS
    sockets = "|".join(path.replace(".", "\\.") for path in node_rules.DHCP_SOCKETS)
    tokens = _key([mac, "daemonSocketPath"]) + _WS + ":" + _WS + '(?:"[^"]*"|[^,}\\]\\s]+)'
    each = (
        f"{_matches('m', head_mac)} ? ({_matches('m', head_mac + 'false$')} || {grant_mac}) : "
        f"({_matches('m', head_socket + QUOTE + '(?:' + sockets + ')' + QUOTE + '$')} "
        f"|| {grant_socket})"
    )
    return Check(tokens, each)


Render = Callable[[delegate_policy.DelegateRules], Check]

# The validations, one per list: (settings key, what it is called in a message, its check).
_CHECKS: Final[tuple[tuple[str, str, Render], ...]] = (
    ("types", "plugin type", _types),
    ("master", "master interface", _master),
    ("bridge", "bridge", _bridge),
    ("device", "host device", _device),
    ("pciBusID", "PCI address", _pci),
    ("dataDir", "dataDir", _data_dir),
    ("sysctl", "sysctl", _sysctl),
    *admission_node.CHECKS,  # SEC-NODE: passthruMaster, gatewayBridge, reservedRanges
    ("nodeChanges", "node change that outlives the pod", _node_changes),  # SEC-VALUES
)


def _selector(selector: delegate_policy.NamespaceSelector) -> str:
    labels = "variables.labels"
    parts = [
        f"({_cel(k)} in {labels} && {labels}[{_cel(k)}] == {_cel(v)})"
        for k, v in selector.match_labels
    ]
    for r in selector.match_expressions:
        values = "[" + ", ".join(_cel(v) for v in r.values) + "]"
        present = f"{_cel(r.key)} in {labels}"
        if r.operator == "In":
            parts.append(f"({present} && {labels}[{_cel(r.key)}] in {values})")
        elif r.operator == "NotIn":
            parts.append(f"(!({present}) || !({labels}[{_cel(r.key)}] in {values}))")
        elif r.operator == "Exists":
            parts.append(f"({present})")
        else:
            parts.append(f"!({present})")
    return " && ".join(parts) or "true"


def _scope(policy: delegate_policy.DelegatePolicy) -> str:
    """CEL: the index of the first namespace entry that selects the NAD's namespace, else -1."""
    expression = "-1"
    for index in reversed(range(len(policy.namespaces))):
        expression = f"({_selector(policy.namespaces[index].selector)}) ? {index} : {expression}"
    return expression


def _by_scope(
    policy: delegate_policy.DelegatePolicy, key: str, render: Render
) -> tuple[str, str, str]:
    """CEL choosing by the NAD's namespace (`variables.scope`): the check of `key`, the list of
    what fails it, and the text of the rule that decides."""
    check = render(policy.rules)
    expression, offenders = check.expression(), check.offenders()
    rule = _cel(_rule_text(policy.rules, key))
    for index in reversed(range(len(policy.namespaces))):
        rules = policy.namespaces[index].rules
        check = render(rules)
        when = f"variables.scope == {index}"
        expression = f"{when} ? ({check.expression()}) : ({expression})"
        offenders = f"{when} ? ({check.offenders()}) : ({offenders})"
        rule = f"{when} ? {_cel(_rule_text(rules, key))} : {rule}"
    return expression, offenders, rule


def _rule_text(rules: delegate_policy.DelegateRules, key: str) -> str:
    listed: dict[str, globs.Patterns | globs.Prefixes] = {
        "types": rules.types,
        "master": rules.master,
        "bridge": rules.bridge,
        "device": rules.device,
        "pciBusID": rules.pci_bus_id,
        "dataDir": rules.data_dir,
        "sysctl": rules.sysctl,
        "resourceName": rules.resource_name,
        "passthruMaster": rules.passthru_master,
        "gatewayBridge": rules.gateway_bridge,
        "reservedRanges": globs.Patterns(rules.reserved_ranges),
        "nodeChanges": rules.node_changes,
    }
    return f"{rules.source}.{key} {listed[key]}"


_NAD: Final = (
    "'NetworkAttachmentDefinition ' + object.metadata.namespace + '/' + object.metadata.name"
)


def _spelling() -> dict[str, str]:
    """SEC-KEYS: a key that RE2's case folding (Unicode simple folding, as Go's decoder uses:
    `MASTER`, `ma\u017fter`) takes for a checked key must be spelled as that key."""
    names = sorted(keys.CHECKED_KEYS)
    folded = _cel('"(?i:' + "|".join(names) + ')"' + _WS + ":")
    exact = _cel("^" + _key(names) + _WS + ":$")
    found = f"variables.config.findAll({folded})"
    wrong = f"{found}.filter(m, !m.matches({exact}))"
    return {
        "expression": f"{found}.all(m, m.matches({exact}))",
        "messageExpression": f"{_NAD} + ': the key ' + {wrong}.join(', ') + ' is read as a "
        "checked key by a Go plugin (keys match ignoring case); spell it as the key is "
        "documented'",
        "reason": "Invalid",
    }


def _protected(protected: globs.Prefixes) -> dict[str, str]:
    """SEC-NODE: no `dataDir` in netattach's or the runtime's directories, whatever the lists."""
    pair = _pair(["dataDir"])
    held = _alternatives([globs.prefix_regex(d) for d in protected.included]) or "(?!)"
    inside = _cel("^" + _key(["dataDir"]) + _WS + ":" + _WS + QUOTE + held + QUOTE + "$")
    found = f"variables.config.findAll({_cel(pair)})"
    return {
        "expression": f"{found}.all(m, !m.matches({inside}))",
        "messageExpression": f"{_NAD} + ': dataDir ' + {found}.filter(m, m.matches({inside}))"
        f".join(', ') + ' lies in a directory of netattach or the runtime, which no list "
        f"grants: {protected}'",
        "reason": "Invalid",
    }


# SEC-VALUES at admission: a host link name as the kernel reads it (printable ASCII without '/',
# ':' and '%', at most 15 bytes, not '.' or '..'; a NUL needs an escape, refused before), and no
# IPv4-mapped IPv6 spelling (a run of zeros and colons, then `:ffff:`), which Go reads as IPv4.
_LINK_NAME: Final = "[!#$&-.0-9;-~]{0,15}"
_MAPPED: Final = '(?i)"[0:]*:ffff:[^"]*"'


def _values() -> list[dict[str, str]]:
    names = list(check.LINK_KEYS)
    head = "^" + _key(names) + _WS + ":" + _WS + QUOTE
    readable = _cel(head + _LINK_NAME + QUOTE + "$")
    dots = _cel(head + "\\.\\.?" + QUOTE + "$")
    found = f"variables.config.findAll({_cel(_pair(names))})"
    bad = f"{found}.filter(m, !m.matches({readable}) || m.matches({dots}))"
    mapped = f"variables.config.findAll({_cel(_MAPPED)})"
    return [
        {
            "expression": f"{bad}.size() == 0",
            "messageExpression": f"{_NAD} + ': interface name ' + {bad}.join(', ') + ' is not "
            "read by the kernel as written (at most 15 printable ASCII characters, no /, : or %, "
            "not . or ..), refused by SEC-VALUES'",
            "reason": "Invalid",
        },
        {
            "expression": f"{mapped}.size() == 0",
            "messageExpression": f"{_NAD} + ': address ' + {mapped}.join(', ') + ' is an "
            "IPv4-mapped IPv6 spelling, which a Go plugin reads as IPv4: write it as IPv4, "
            "refused by SEC-VALUES'",
            "reason": "Invalid",
        },
    ]


# The characters the daemon strips from the annotation (Python's `str.strip()`, which strips
# what `str.isspace()` takes), as the inside of an RE2 class.
WHITE_SPACE: Final = (
    "\\t\\n\\x0b\\f\\r\\x1c-\\x1f \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
    "\\x{202f}\\x{205f}\\x{3000}"
)
# `find` of this is the value stripped ('' when blank): from the first character that is not
# white space to the last (the first match, and `.*` greedy, as RE2 finds it).
_STRIPPED: Final = f"(?s)[^{WHITE_SPACE}](?:.*[^{WHITE_SPACE}])?"
_RESOURCE_NAME: Final = "variables.resourceName"


def resource_name_checked(policy: delegate_policy.DelegatePolicy) -> bool:
    """Whether some list of `policy` (cluster-wide or a namespace entry's) narrows resourceName:
    else the annotation is left alone (no variable, no validation)."""
    every = (policy.rules, *(entry.rules for entry in policy.namespaces))
    return not all(rules.resource_name.allows_anything for rules in every)


def _resource_name_allowed(rules: delegate_policy.DelegateRules) -> str:
    """CEL: the NAD's resourceName is none, or one `rules` allow (a glob's `*` and `?` take a
    line break too, hence `(?s)`)."""
    listed = rules.resource_name
    if listed.allows_anything:
        return "true"
    allowed = _alternatives([globs.glob_regex(p) for p in listed.included])
    denied = _alternatives([globs.glob_regex(p) for p in listed.excluded])
    parts = ["false"] if allowed is None else [_matches(_RESOURCE_NAME, f"^(?s:{allowed})$")]
    if denied is not None:
        parts.append("!" + _matches(_RESOURCE_NAME, f"^(?s:{denied})$"))
    return f"{_RESOURCE_NAME} == '' || {' && '.join(parts)}"


def _resource_name(policy: delegate_policy.DelegatePolicy) -> dict[str, str]:
    """DEV-RESOURCE: the NAD's resourceName allowed by the lists of its namespace, as the daemon
    checks it at ADD before it asks the kubelet for a device."""
    expression = _resource_name_allowed(policy.rules)
    rule = _cel(_rule_text(policy.rules, "resourceName"))
    for index in reversed(range(len(policy.namespaces))):
        rules = policy.namespaces[index].rules
        when = f"variables.scope == {index}"
        expression = f"{when} ? ({_resource_name_allowed(rules)}) : ({expression})"
        rule = f"{when} ? {_cel(_rule_text(rules, 'resourceName'))} : {rule}"
    return {
        "expression": expression,
        "messageExpression": f'{_NAD} + ": resourceName \'" + {_RESOURCE_NAME} + "\' is not '
        f'allowed by " + ({rule})',
        "reason": "Invalid",
    }


def _resource_name_variable() -> dict[str, str]:
    """`variables.resourceName`: the annotation as the daemon reads it, stripped; '' for none."""
    annotations = "object.metadata.annotations"
    key = _cel(model.RESOURCE_ANNOTATION)
    written = f"has({annotations}) && {key} in {annotations} ? {annotations}[{key}] : ''"
    return {"name": "resourceName", "expression": f"({written}).find({_cel(_STRIPPED)})"}


def build_validations(policy: delegate_policy.DelegatePolicy) -> list[dict[str, str]]:
    """The policy's validations: escapes and key spellings first, then one per list, then the
    protected directories, then the resourceName annotation when some list narrows it (its
    variable `resourceName` is `build_policy`'s)."""
    validations = [
        {
            "expression": "!variables.config.contains('\\\\')",
            "messageExpression": _NAD + " + ': spec.config uses a JSON escape (\\\\), which "
            "the delegate policy cannot read at admission'",
            "reason": "Invalid",
        },
        _spelling(),
    ]
    for key, noun, render in _CHECKS:
        expression, offenders, rule = _by_scope(policy, key, render)
        shown = (
            f"(({offenders}).size() > 0 ? ({offenders}).join(', ') "
            "+ ' is' : 'a value that is no string, or left out,' )"
        )
        validations.append(
            {
                "expression": expression,
                "messageExpression": f"{_NAD} + ': {noun} ' + {shown} + ' not allowed by ' "
                f"+ ({rule})",
                "reason": "Invalid",
            }
        )
    validations.append(_protected(policy.protected))
    validations.extend(_values())
    if resource_name_checked(policy):
        validations.append(_resource_name(policy))
    return validations


def build_policy(
    policy: delegate_policy.DelegatePolicy, *, name: str = DEFAULT_NAME
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding that enforce `policy` on NADs."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "netattach"}},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["k8s.cni.cncf.io"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["network-attachment-definitions"],
                        }
                    ]
                },
                "variables": [
                    {
                        "name": "config",
                        "expression": "has(object.spec) && has(object.spec.config) ? "
                        "string(object.spec.config) : ''",
                    },
                    {
                        "name": "labels",
                        "expression": "has(namespaceObject.metadata.labels) ? "
                        "namespaceObject.metadata.labels : {}",
                    },
                    {"name": "scope", "expression": _scope(policy)},
                    *([_resource_name_variable()] if resource_name_checked(policy) else []),
                ],
                "validations": build_validations(policy),
            },
        },
        {
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "netattach"}},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    ]
