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

from typing import Any, Final

from netattach.cluster import model
from netattach.guard import admission_node, cel, delegate_policy, globs, keys, node_rules

API_VERSION: Final = "admissionregistration.k8s.io/v1"
DEFAULT_NAME: Final = "netattach-delegate-policy"


def _types(rules: delegate_policy.DelegateRules) -> cel.Check:
    names = ["type"]
    # A path (`../x`, `/usr/bin/x`) is refused whatever the list allows, as the daemon does.
    path = "^" + cel.key(names) + cel.WS + ":" + cel.WS + cel.QUOTE + '[^"]*(?:/|\\.\\.)'
    each = "!" + cel.matches("m", path) + " && " + cel.names_check(names, rules.types)
    return cel.Check(cel.pair(names), each, (cel.strings_only(names),))


def _master(rules: delegate_policy.DelegateRules) -> cel.Check:
    names = ["master"]
    anything = rules.master.allows_anything
    whole = [cel.strings_only(names)]
    if not anything:
        kinds = "|".join((*keys.DEFAULT_ROUTE_MASTER, "vlan"))
        plugins = cel.count(cel.key(["type"]) + cel.WS + ":" + cel.WS + f'"(?:{kinds})"')
        whole.append(f"{plugins} <= {cel.count(cel.key(names) + cel.WS + ':')}")
    each = cel.names_check(names, rules.master, empty="true" if anything else "false")
    return cel.Check(cel.pair(names), each, tuple(whole))


def _bridge(rules: delegate_policy.DelegateRules) -> cel.Check:
    names = ["bridge"]
    default = rules.bridge.allows(keys.DEFAULT_BRIDGE_NAME)
    whole = [cel.strings_only(names)]
    if not default:
        plugins = cel.count(cel.key(["type"]) + cel.WS + ":" + cel.WS + '"bridge"')
        whole.append(f"{plugins} <= {cel.count(cel.key(names) + cel.WS + ':')}")
    each = cel.names_check(names, rules.bridge, empty="true" if default else "false")
    return cel.Check(cel.pair(names), each, tuple(whole))


def _device(rules: delegate_policy.DelegateRules) -> cel.Check:
    names = ["device"]
    whole = [cel.strings_only(names)]
    if not rules.device.allows_anything:
        other = cel.key(keys.HOST_DEVICE_OTHER_NAMES) + cel.WS + ":"
        whole.append("!" + cel.matches(cel.CONFIG, other))
    return cel.Check(cel.pair(names), cel.names_check(names, rules.device), tuple(whole))


def _pci(rules: delegate_policy.DelegateRules) -> cel.Check:
    names = ["pciBusID", "deviceID"]
    return cel.Check(
        cel.pair(names), cel.names_check(names, rules.pci_bus_id), (cel.strings_only(names),)
    )


def _data_dir(rules: delegate_policy.DelegateRules) -> cel.Check:
    names = ["dataDir"]
    prefixes = rules.data_dir
    allowed = cel.alternatives([globs.prefix_regex(d) for d in prefixes.included])
    denied = cel.alternatives([globs.prefix_regex(d) for d in prefixes.excluded])
    head = "^" + cel.key(names) + cel.WS + ":" + cel.WS + cel.QUOTE
    dotdot = head + '(?:[^"]*/)?\\.\\.(?:/[^"]*)?"$'
    # Text cannot normalise a path: a spelling the daemon would normalise (`//`, `/./`, a
    # trailing `/` or `/.`) is refused, so the prefixes below read every path as written.
    unusual = head + '(?:[^"]*(?://|/\\./)[^"]*|[^"]+/\\.?|/\\.)"$'
    each = (
        "!"
        + cel.matches("m", dotdot)
        + " && !"
        + cel.matches("m", unusual)
        + " && "
        + cel.value_check("m", names, allowed, denied)
    )
    return cel.Check(cel.pair(names), each, (cel.strings_only(names),))


def _sysctl(rules: delegate_policy.DelegateRules) -> cel.Check:
    """Each flat `"sysctl": {...}` object `m`: every key allowed; a `sysctl` that is no flat
    object (a list, a string, nested objects) is refused by counting."""
    opening = cel.key(["sysctl"]) + cel.WS + ":"
    flat = opening + cel.WS + "\\{[^{}]*\\}"
    allowed = cel.alternatives([globs.glob_regex(p) for p in rules.sysctl.included])
    denied = cel.alternatives([globs.glob_regex(p) for p in rules.sysctl.excluded])
    key, tail = "[{,]" + cel.WS + cel.QUOTE, cel.QUOTE + cel.WS + ":$"
    checks = ["false"] if allowed is None else [cel.matches("k", "^" + key + allowed + tail)]
    if denied is not None:
        checks.append("!" + cel.matches("k", "^" + key + denied + tail))
    every_key = cel.literal(key + "[^" + cel.QUOTE + "]*" + cel.QUOTE + cel.WS + ":")
    each = f"m.findAll({every_key}).all(k, {' && '.join(checks)})"
    return cel.Check(flat, each, (f"{cel.count(opening)} == {cel.count(flat)}",))


def _node_changes(rules: delegate_policy.DelegateRules) -> cel.Check:
    """SEC-VALUES, what the config text shows: `macspoofchk` true only when `nodeChanges` grants
    it, a `daemonSocketPath` other than the dhcp daemon's only when it grants `dhcpSocket`."""
    mac, socket = node_rules.MACSPOOFCHK, node_rules.DHCP_SOCKET
    grant_mac = "true" if rules.node_changes.allows(mac) else "false"
    grant_socket = "true" if rules.node_changes.allows(socket) else "false"
    head_mac = "^" + cel.key([mac]) + cel.WS + ":" + cel.WS
    head_socket = "^" + cel.key(["daemonSocketPath"]) + cel.WS + ":" + cel.WS
    sockets = "|".join(path.replace(".", "\\.") for path in node_rules.DHCP_SOCKETS)
    tokens = cel.key([mac, "daemonSocketPath"]) + cel.WS + ":" + cel.WS + '(?:"[^"]*"|[^,}\\]\\s]+)'
    dhcp_socket = head_socket + cel.QUOTE + "(?:" + sockets + ")" + cel.QUOTE + "$"
    each = (
        f"{cel.matches('m', head_mac)} ? ({cel.matches('m', head_mac + 'false$')} || {grant_mac}) "
        f": ({cel.matches('m', dhcp_socket)} || {grant_socket})"
    )
    return cel.Check(tokens, each)


# The validations, one per list: (settings key, what it is called in a message, its check).
_CHECKS: Final[tuple[tuple[str, str, cel.Render], ...]] = (
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
        f"({cel.literal(k)} in {labels} && {labels}[{cel.literal(k)}] == {cel.literal(v)})"
        for k, v in selector.match_labels
    ]
    for r in selector.match_expressions:
        values = "[" + ", ".join(cel.literal(v) for v in r.values) + "]"
        present = f"{cel.literal(r.key)} in {labels}"
        if r.operator == "In":
            parts.append(f"({present} && {labels}[{cel.literal(r.key)}] in {values})")
        elif r.operator == "NotIn":
            parts.append(f"(!({present}) || !({labels}[{cel.literal(r.key)}] in {values}))")
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
    policy: delegate_policy.DelegatePolicy, key: str, render: cel.Render
) -> tuple[str, str, str]:
    """CEL choosing by the NAD's namespace (`variables.scope`): the check of `key`, the list of
    what fails it, and the text of the rule that decides."""
    check = render(policy.rules)
    expression, offenders = check.expression(), check.offenders()
    rule = cel.literal(_rule_text(policy.rules, key))
    for index in reversed(range(len(policy.namespaces))):
        rules = policy.namespaces[index].rules
        check = render(rules)
        when = f"variables.scope == {index}"
        expression = f"{when} ? ({check.expression()}) : ({expression})"
        offenders = f"{when} ? ({check.offenders()}) : ({offenders})"
        rule = f"{when} ? {cel.literal(_rule_text(rules, key))} : {rule}"
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
    folded = cel.literal('"(?i:' + "|".join(names) + ')"' + cel.WS + ":")
    exact = cel.literal("^" + cel.key(names) + cel.WS + ":$")
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
    pair = cel.pair(["dataDir"])
    held = cel.alternatives([globs.prefix_regex(d) for d in protected.included]) or "(?!)"
    inside = cel.literal(
        "^" + cel.key(["dataDir"]) + cel.WS + ":" + cel.WS + cel.QUOTE + held + cel.QUOTE + "$"
    )
    found = f"variables.config.findAll({cel.literal(pair)})"
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
    names = list(keys.LINK_KEYS)
    head = "^" + cel.key(names) + cel.WS + ":" + cel.WS + cel.QUOTE
    readable = cel.literal(head + _LINK_NAME + cel.QUOTE + "$")
    dots = cel.literal(head + "\\.\\.?" + cel.QUOTE + "$")
    found = f"variables.config.findAll({cel.literal(cel.pair(names))})"
    bad = f"{found}.filter(m, !m.matches({readable}) || m.matches({dots}))"
    mapped = f"variables.config.findAll({cel.literal(_MAPPED)})"
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
    allowed = cel.alternatives([globs.glob_regex(p) for p in listed.included])
    denied = cel.alternatives([globs.glob_regex(p) for p in listed.excluded])
    parts = ["false"] if allowed is None else [cel.matches(_RESOURCE_NAME, f"^(?s:{allowed})$")]
    if denied is not None:
        parts.append("!" + cel.matches(_RESOURCE_NAME, f"^(?s:{denied})$"))
    return f"{_RESOURCE_NAME} == '' || {' && '.join(parts)}"


def _resource_name(policy: delegate_policy.DelegatePolicy) -> dict[str, str]:
    """DEV-RESOURCE: the NAD's resourceName allowed by the lists of its namespace, as the daemon
    checks it at ADD before it asks the kubelet for a device."""
    expression = _resource_name_allowed(policy.rules)
    rule = cel.literal(_rule_text(policy.rules, "resourceName"))
    for index in reversed(range(len(policy.namespaces))):
        rules = policy.namespaces[index].rules
        when = f"variables.scope == {index}"
        expression = f"{when} ? ({_resource_name_allowed(rules)}) : ({expression})"
        rule = f"{when} ? {cel.literal(_rule_text(rules, 'resourceName'))} : {rule}"
    return {
        "expression": expression,
        "messageExpression": f'{_NAD} + ": resourceName \'" + {_RESOURCE_NAME} + "\' is not '
        f'allowed by " + ({rule})',
        "reason": "Invalid",
    }


def _resource_name_variable() -> dict[str, str]:
    """`variables.resourceName`: the annotation as the daemon reads it, stripped; '' for none."""
    annotations = "object.metadata.annotations"
    key = cel.literal(model.RESOURCE_ANNOTATION)
    written = f"has({annotations}) && {key} in {annotations} ? {annotations}[{key}] : ''"
    return {"name": "resourceName", "expression": f"({written}).find({cel.literal(_STRIPPED)})"}


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
