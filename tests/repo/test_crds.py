"""The CRDs in deploy/crds: identity, versions, structural schemas, and objects they accept.

No cluster is needed. Two small tools are written here:

- `structural_errors`: the rules of the Kubernetes docs "Specifying a structural schema" (plus the
  extra restrictions `apiextensions.k8s.io/v1` puts on a CRD schema) that an API server applies
  before it accepts a CRD;
- `validate`: a tiny validator for objects against such a schema (types, required, enum,
  int-or-string). Fields a schema does not name are pruned by the API server, not rejected, so
  they are ignored here too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "deploy" / "crds"
NAD_FILE = CRDS / "network-attachment-definitions.yaml"
POLICY_FILE = CRDS / "multi-networkpolicies.yaml"

GROUP = "k8s.cni.cncf.io"

Schema = dict[str, Any]

nad = pytest.mark.req("NAD-CRD")
# The MultiNetworkPolicy tests carry no requirement marker: POL-CRD also needs the
# `policy-for` annotation handling, which the policy work proves.


def load_crd(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert len(docs) == 1, f"{path.name}: expected one YAML document, found {len(docs)}"
    crd = docs[0]
    assert isinstance(crd, dict)
    return crd


def served_schema(crd: dict[str, Any], version: str) -> Schema:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema = entry["schema"]["openAPIV3Schema"]
            assert isinstance(schema, dict)
            return schema
    raise AssertionError(f"no version {version}")


# --- identity and versions ------------------------------------------------------------------------

EXPECTED = [
    pytest.param(
        NAD_FILE,
        {
            "kind": "NetworkAttachmentDefinition",
            "plural": "network-attachment-definitions",
            "singular": "network-attachment-definition",
            "shortNames": ["net-attach-def"],
        },
        "v1",
        id="nad",
        marks=nad,
    ),
    pytest.param(
        POLICY_FILE,
        {
            "kind": "MultiNetworkPolicy",
            "plural": "multi-networkpolicies",
            "singular": "multi-networkpolicy",
            "shortNames": ["multi-policy"],
        },
        "v1beta1",
        id="multi-networkpolicy",
    ),
]

CRD_FILES = [
    pytest.param(NAD_FILE, id="nad", marks=nad),
    pytest.param(POLICY_FILE, id="multi-networkpolicy"),
]


@pytest.mark.parametrize(("path", "names", "version"), EXPECTED)
def test_crd_identity(path: Path, names: dict[str, Any], version: str) -> None:
    crd = load_crd(path)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{names['plural']}.{GROUP}"
    assert spec["group"] == GROUP
    assert spec["scope"] == "Namespaced"
    for key, value in names.items():
        assert spec["names"][key] == value, key
    # v1beta1 CRD fields that apiextensions.k8s.io/v1 no longer has
    assert not {"version", "validation", "subresources", "additionalPrinterColumns"} & set(spec)
    assert [v["name"] for v in spec["versions"]] == [version]


@pytest.mark.parametrize("path", CRD_FILES)
def test_exactly_one_storage_version_and_it_is_served(path: Path) -> None:
    versions = load_crd(path)["spec"]["versions"]
    for entry in versions:
        assert isinstance(entry["served"], bool)
        assert isinstance(entry["storage"], bool)
    storage = [v for v in versions if v["storage"]]
    assert len(storage) == 1
    assert storage[0]["served"] is True


# --- the structural-schema checker ----------------------------------------------------------------

TYPES = {"object", "array", "string", "integer", "number", "boolean"}

# What a JSONSchemaProps in apiextensions.k8s.io/v1 may carry (x-kubernetes-* checked apart).
KNOWN_KEYS = {
    "description", "type", "format", "title", "default", "nullable", "enum", "example",
    "externalDocs", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum", "multipleOf",
    "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxProperties",
    "minProperties", "required", "properties", "additionalProperties", "items",
    "allOf", "anyOf", "oneOf", "not",
}  # fmt: skip
KNOWN_EXTENSIONS = {
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type", "x-kubernetes-validations",
}  # fmt: skip
# Forbidden outright in a v1 CRD schema.
FORBIDDEN_KEYS = {
    "$ref", "$schema", "id", "definitions", "dependencies", "patternProperties", "additionalItems",
}  # fmt: skip
# Not allowed inside allOf/anyOf/oneOf/not: those may only validate values, never shape them.
NOT_IN_VALUE_VALIDATION = {"description", "type", "default", "additionalProperties", "nullable"}
LOGIC = ("allOf", "anyOf", "oneOf", "not")
INT_OR_STRING_ANYOF = [{"type": "integer"}, {"type": "string"}]
# Restrictions allowed on metadata.name and metadata.generateName at the root.
NAME_RESTRICTIONS = {"type", "description", "pattern", "maxLength", "minLength", "format"}


def structural_errors(
    schema: Any, path: str = "openAPIV3Schema", *, root: bool = True
) -> list[str]:
    """Why `schema` is not a structural schema an API server accepts ([] when it is)."""
    if not isinstance(schema, dict):
        return [f"{path}: a schema must be a mapping"]
    errors: list[str] = []
    keys = set(schema)
    for key in sorted(keys & FORBIDDEN_KEYS):
        errors.append(f"{path}: {key} is not allowed")
    unknown = keys - KNOWN_KEYS - KNOWN_EXTENSIONS - FORBIDDEN_KEYS
    errors += [f"{path}: unknown keyword {key}" for key in sorted(unknown)]
    if schema.get("uniqueItems") is True:
        errors.append(f"{path}: uniqueItems: true is not allowed")

    int_or_string = schema.get("x-kubernetes-int-or-string") is True
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    for ext in ("x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields"):
        if ext in schema and schema[ext] is not True:
            errors.append(f"{path}: {ext} must be true when set")
    kind = schema.get("type")
    if int_or_string:
        if kind is not None:
            errors.append(f"{path}: x-kubernetes-int-or-string must not have a type")
        if "anyOf" in schema and schema["anyOf"] != INT_OR_STRING_ANYOF:
            errors.append(f"{path}: int-or-string anyOf must be [integer, string]")
    elif kind is None and not preserve:
        errors.append(f"{path}: type is missing")
    if kind is not None and kind not in TYPES:
        errors.append(f"{path}: type {kind!r} is not one of {sorted(TYPES)}")
    if schema.get("x-kubernetes-embedded-resource") is True and not (preserve or kind == "object"):
        errors.append(f"{path}: an embedded resource needs type object")

    if "properties" in schema and "additionalProperties" in schema:
        errors.append(f"{path}: properties and additionalProperties exclude each other")
    if ("properties" in schema or "additionalProperties" in schema) and kind != "object":
        errors.append(f"{path}: properties/additionalProperties need type object")
    if "items" in schema and kind != "array":
        errors.append(f"{path}: items needs type array")
    if kind == "array" and not isinstance(schema.get("items"), dict):
        errors.append(f"{path}: an array needs items, one schema")
    for name in schema.get("required", []):
        if name not in schema.get("properties", {}):
            errors.append(f"{path}: required {name!r} is not among the properties")

    if root:
        errors += _root_errors(schema, path)
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        errors.append(f"{path}.properties: must be a mapping")
        properties = {}
    for name, sub in properties.items():
        if not (root and name == "metadata"):
            errors += structural_errors(sub, f"{path}.properties.{name}", root=False)
    if "items" in schema:
        errors += structural_errors(schema["items"], f"{path}.items", root=False)
    additional = schema.get("additionalProperties")
    if additional is not None:
        if isinstance(additional, dict):
            errors += structural_errors(additional, f"{path}.additionalProperties", root=False)
        else:
            errors.append(f"{path}.additionalProperties: must be a schema")

    for logic in LOGIC:
        if logic not in schema or (logic == "anyOf" and int_or_string):
            continue
        branches = schema[logic] if logic != "not" else [schema[logic]]
        for i, branch in enumerate(branches):
            errors += _value_validation_errors(branch, schema, f"{path}.{logic}[{i}]")
    return errors


def _root_errors(schema: Schema, path: str) -> list[str]:
    errors: list[str] = []
    if schema.get("type") != "object":
        errors.append(f"{path}: the root must be type object")
    if "additionalProperties" in schema:
        errors.append(f"{path}: additionalProperties is not allowed at the root")
    metadata = schema.get("properties", {}).get("metadata")
    if metadata is None:
        return errors
    mpath = f"{path}.properties.metadata"
    if not isinstance(metadata, dict) or metadata.get("type") != "object":
        return [*errors, f"{mpath}: must be type object"]
    extra = set(metadata) - {"type", "description", "properties"}
    errors += [f"{mpath}: only name and generateName may be restricted ({key})" for key in extra]
    for name, sub in metadata.get("properties", {}).items():
        if name not in {"name", "generateName"}:
            errors.append(f"{mpath}: only name and generateName may be restricted ({name})")
        elif (
            not isinstance(sub, dict) or sub.get("type") != "string" or set(sub) - NAME_RESTRICTIONS
        ):
            errors.append(f"{mpath}.properties.{name}: only string restrictions are allowed")
    return errors


def _value_validation_errors(branch: Any, outer: Schema, path: str) -> list[str]:
    """A branch of allOf/anyOf/oneOf/not may only constrain what `outer` already specifies."""
    if not isinstance(branch, dict):
        return [f"{path}: must be a schema"]
    errors = [f"{path}: {key} is not allowed here" for key in NOT_IN_VALUE_VALIDATION & set(branch)]
    errors += [f"{path}: {key} is not allowed" for key in FORBIDDEN_KEYS & set(branch)]
    outer_properties = outer.get("properties", {})
    for name, sub in branch.get("properties", {}).items():
        if name not in outer_properties:
            errors.append(f"{path}.properties.{name}: not specified outside the value validation")
        else:
            errors += _value_validation_errors(sub, outer_properties[name], f"{path}.{name}")
    if "items" in branch:
        if "items" not in outer:
            errors.append(f"{path}.items: not specified outside the value validation")
        else:
            errors += _value_validation_errors(branch["items"], outer["items"], f"{path}.items")
    for logic in LOGIC:
        if logic in branch:
            nested = branch[logic] if logic != "not" else [branch[logic]]
            for i, sub in enumerate(nested):
                errors += _value_validation_errors(sub, outer, f"{path}.{logic}[{i}]")
    return errors


def walk(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    """Every schema node under `schema`, with a dotted path of property names ([] for items)."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}" if path else name)
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("path", CRD_FILES)
def test_every_version_schema_is_structural(path: Path) -> None:
    crd = load_crd(path)
    for entry in crd["spec"]["versions"]:
        schema = entry["schema"]["openAPIV3Schema"]
        assert structural_errors(schema) == [], entry["name"]


@pytest.mark.parametrize("path", CRD_FILES)
def test_unknown_fields_are_preserved_nowhere(path: Path) -> None:
    # Every level is spelled out, so nothing needs x-kubernetes-preserve-unknown-fields.
    for entry in load_crd(path)["spec"]["versions"]:
        for where, node in walk(entry["schema"]["openAPIV3Schema"]):
            assert "x-kubernetes-preserve-unknown-fields" not in node, where


NOT_STRUCTURAL = [
    pytest.param({"type": "object", "properties": {"spec": {}}}, "type is missing", id="no-type"),
    pytest.param(
        {"type": "object", "properties": {"spec": {"$ref": "#/definitions/spec"}}},
        "$ref is not allowed",
        id="ref",
    ),
    pytest.param(
        {"type": "object", "properties": {"s": {"type": "string", "properties": {}}}},
        "need type object",
        id="properties-on-string",
    ),
    pytest.param(
        {"type": "object", "properties": {"a": {"type": "object", "items": {"type": "string"}}}},
        "items needs type array",
        id="items-on-object",
    ),
    pytest.param(
        {"type": "object", "properties": {"a": {"type": "array"}}},
        "an array needs items",
        id="array-without-items",
    ),
    pytest.param(
        {
            "type": "object",
            "properties": {
                "a": {
                    "type": "object",
                    "properties": {"b": {"type": "string"}},
                    "additionalProperties": {"type": "string"},
                }
            },
        },
        "exclude each other",
        id="properties-and-additional",
    ),
    pytest.param(
        {"type": "object", "additionalProperties": {"type": "string"}},
        "not allowed at the root",
        id="root-additional",
    ),
    pytest.param(
        {
            "type": "object",
            "properties": {
                "metadata": {
                    "type": "object",
                    "properties": {"labels": {"type": "object"}},
                }
            },
        },
        "only name and generateName",
        id="metadata-labels",
    ),
    pytest.param(
        {
            "type": "object",
            "properties": {"a": {"type": "string", "anyOf": [{"type": "string"}]}},
        },
        "type is not allowed here",
        id="type-in-anyof",
    ),
    pytest.param(
        {
            "type": "object",
            "properties": {"a": {"type": "object", "oneOf": [{"properties": {"b": {}}}]}},
        },
        "not specified outside",
        id="field-only-in-oneof",
    ),
    pytest.param(
        {
            "type": "object",
            "properties": {"p": {"type": "string", "x-kubernetes-int-or-string": True}},
        },
        "must not have a type",
        id="int-or-string-with-type",
    ),
    pytest.param(
        {"type": "array", "items": {"type": "string"}}, "root must be type object", id="root"
    ),
    pytest.param(
        {"type": "object", "properties": {"a": {"type": "string", "propeties": {}}}},
        "unknown keyword",
        id="typo",
    ),
]


@pytest.mark.parametrize(("schema", "reason"), NOT_STRUCTURAL)
def test_checker_rejects_non_structural(schema: Schema, reason: str) -> None:
    errors = structural_errors(schema)
    assert any(reason in e for e in errors), errors


def test_checker_accepts_the_allowed_exceptions() -> None:
    schema: Schema = {
        "type": "object",
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 63, "pattern": "^[a-z]+$"}},
            },
            "port": {"x-kubernetes-int-or-string": True, "anyOf": INT_OR_STRING_ANYOF},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "open": {"x-kubernetes-preserve-unknown-fields": True},
            "either": {
                "type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
            },
        },
    }
    assert structural_errors(schema) == []


# --- a tiny object validator ----------------------------------------------------------------------


def validate(value: Any, schema: Schema, path: str = "") -> list[str]:
    """Why `value` does not fit `schema`: types, required, enum, int-or-string ([] when it fits)."""
    where = path or "<root>"
    if schema.get("x-kubernetes-int-or-string") is True:
        if isinstance(value, bool) or not isinstance(value, int | str):
            return [f"{where}: expected an integer or a string, got {type(value).__name__}"]
        return []
    if value is None and schema.get("nullable") is True:
        return []
    kind = schema.get("type")
    checks: dict[str, Any] = {
        "object": dict,
        "array": list,
        "string": str,
        "integer": int,
        "number": int | float,
        "boolean": bool,
    }
    if kind is not None:
        wrong_bool = isinstance(value, bool) and kind in {"integer", "number"}
        if wrong_bool or not isinstance(value, checks[kind]):
            return [f"{where}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {value!r} is not one of {schema['enum']}"]
    errors: list[str] = []
    if isinstance(value, dict):
        errors += [
            f"{where}: {name} is required"
            for name in schema.get("required", [])
            if name not in value
        ]
        properties = schema.get("properties", {})
        additional = schema.get("additionalProperties")
        for name, sub in value.items():
            sub_path = f"{path}.{name}" if path else name
            if name in properties:
                errors += validate(sub, properties[name], sub_path)
            elif isinstance(additional, dict):
                errors += validate(sub, additional, sub_path)
            # anything else is pruned by the API server, not rejected
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], f"{path}[{i}]")
    return errors


def test_validator_checks_what_it_claims() -> None:
    schema: Schema = {
        "type": "object",
        "required": ["n"],
        "properties": {
            "n": {"type": "integer"},
            "p": {"x-kubernetes-int-or-string": True},
            "e": {"type": "string", "enum": ["A"]},
            "l": {"type": "array", "items": {"type": "boolean"}},
            "m": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }
    assert (
        validate({"n": 1, "p": "x", "e": "A", "l": [True], "m": {"k": "v"}, "junk": 1}, schema)
        == []
    )
    assert validate({}, schema) == ["<root>: n is required"]
    assert validate({"n": True}, schema) == ["n: expected integer, got bool"]
    assert validate({"n": 1, "p": 1.5}, schema) == ["p: expected an integer or a string, got float"]
    assert validate({"n": 1, "e": "B"}, schema) == ["e: 'B' is not one of ['A']"]
    assert validate({"n": 1, "l": [1]}, schema) == ["l[0]: expected boolean, got int"]
    assert validate({"n": 1, "m": {"k": 2}}, schema) == ["m.k: expected string, got int"]


# --- NetworkAttachmentDefinition ------------------------------------------------------------------

# The examples of the standard, §3.2.1-3.2.4, as printed there.
STANDARD_NADS = {
    "3.2.1-config": """
apiVersion: "k8s.cni.cncf.io/v1"
kind: NetworkAttachmentDefinition
metadata:
  name: a-bridge-network
spec:
  config: '{
    "cniVersion": "0.3.0",
    "name": "a-bridge-network",
    "type": "bridge",
    "bridge": "br0",
    "isGateway": true,
    "ipam": {
      "type": "host-local",
      "subnet": "192.168.5.0/24",
      "dataDir": "/mnt/cluster-ipam"
    }
}'
""",
    "3.2.2-configlist": """
apiVersion: "k8s.cni.cncf.io/v1"
kind: NetworkAttachmentDefinition
metadata:
  name: another-bridge-network
spec:
  config: '{
  "cniVersion": "0.3.0",
  "name": "another-bridge-network",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "br0",
      "ipam": {
        "type": "host-local",
        "subnet": "192.168.5.0/24"
      }
    },
    {
      "type": "port-forwarding"
    },
    {
      "type": "tuning",
      "sysctl": {
        "net.ipv4.conf.all.log_martians": "1"
      }
    }
  ]
}'
""",
    "3.2.3-thick": """
apiVersion: "k8s.cni.cncf.io/v1"
kind: NetworkAttachmentDefinition
metadata:
  name: a-bridge-network
spec:
  config: '{
    "cniVersion": "0.3.0",
    "type": "awesome-plugin"
}'
""",
    "3.2.4-no-spec": """
apiVersion: "k8s.cni.cncf.io/v1"
kind: NetworkAttachmentDefinition
metadata:
  name: a-bridge-network
""",
}


def nad_schema() -> Schema:
    return served_schema(load_crd(NAD_FILE), "v1")


@nad
def test_spec_config_is_a_string_and_nothing_is_required() -> None:
    schema = nad_schema()
    spec = schema["properties"]["spec"]
    assert spec["type"] == "object"
    assert spec["properties"]["config"]["type"] == "string"
    assert "spec" not in schema.get("required", [])  # §3.2.4: a NAD without spec
    assert "config" not in spec.get("required", [])  # spec.config is optional too


@nad
@pytest.mark.parametrize("text", STANDARD_NADS.values(), ids=STANDARD_NADS.keys())
def test_standard_examples_validate(text: str) -> None:
    crd = load_crd(NAD_FILE)
    obj = yaml.safe_load(text)
    assert obj["apiVersion"] == f"{crd['spec']['group']}/v1"
    assert obj["kind"] == crd["spec"]["names"]["kind"]
    assert validate(obj, nad_schema()) == []
    if "spec" in obj:  # transcribed faithfully: the config is still JSON
        assert isinstance(json.loads(obj["spec"]["config"]), dict)


def example_nads() -> list[Any]:
    found = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") == "NetworkAttachmentDefinition":
                found.append(pytest.param(doc, id=f"{path.name}:{doc['metadata']['name']}"))
    return found


@nad
@pytest.mark.parametrize("obj", example_nads())
def test_repository_example_nads_validate(obj: dict[str, Any]) -> None:
    assert validate(obj, nad_schema()) == []


@nad
@pytest.mark.parametrize(
    ("spec", "error"),
    [
        pytest.param(
            {"config": {"cniVersion": "1.0.0", "type": "bridge"}},
            "spec.config: expected string, got dict",
            id="config-object",
        ),
        pytest.param(
            {"config": ["bridge"]}, "spec.config: expected string, got list", id="config-list"
        ),
        pytest.param({"config": 1}, "spec.config: expected string, got int", id="config-number"),
        pytest.param('{"type": "bridge"}', "spec: expected object, got str", id="spec-string"),
    ],
)
def test_wrong_shapes_are_rejected(spec: Any, error: str) -> None:
    obj = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "a-bridge-network"},
        "spec": spec,
    }
    assert validate(obj, nad_schema()) == [error]


# --- MultiNetworkPolicy ---------------------------------------------------------------------------

POLICY = """
apiVersion: k8s.cni.cncf.io/v1beta1
kind: MultiNetworkPolicy
metadata:
  name: db-from-web
  namespace: blue
  annotations:
    k8s.v1.cni.cncf.io/policy-for: blue/storage-net,red/backup-net
spec:
  podSelector:
    matchLabels: {app: db}
  policyTypes: [Ingress, Egress]
  ingress:
    - {}
    - from:
        - podSelector:
            matchExpressions:
              - {key: tier, operator: In, values: [web, api]}
          namespaceSelector:
            matchLabels: {team: blue}
        - ipBlock:
            cidr: 2001:db8::/64
            except: [2001:db8::/80]
      ports:
        - {protocol: TCP, port: 5432}
        - {protocol: UDP, port: metrics}
        - {protocol: SCTP, port: 30000, endPort: 30100}
  egress:
    - to:
        - ipBlock: {cidr: 192.0.2.0/24, except: [192.0.2.128/25]}
        - namespaceSelector:
            matchExpressions:
              - {key: backup, operator: Exists}
      ports:
        - port: 873
"""


def policy_schema() -> Schema:
    return served_schema(load_crd(POLICY_FILE), "v1beta1")


def test_a_full_policy_validates() -> None:
    assert validate(yaml.safe_load(POLICY), policy_schema()) == []


def test_port_is_int_or_string_everywhere() -> None:
    ports = [node for where, node in walk(policy_schema()) if where.endswith("ports[].port")]
    assert len(ports) == 2  # ingress and egress
    for node in ports:
        assert node["x-kubernetes-int-or-string"] is True
        assert "type" not in node


def test_selectors_are_the_same_everywhere() -> None:
    selectors = [
        node
        for where, node in walk(policy_schema())
        if where.rsplit(".", 1)[-1] in {"podSelector", "namespaceSelector"}
    ]
    assert len(selectors) == 5  # spec, and pod/namespace in from and to

    def shape(node: Schema) -> Any:
        if isinstance(node, dict):
            return {k: shape(v) for k, v in node.items() if k != "description"}
        return node

    assert len({json.dumps(shape(s), sort_keys=True) for s in selectors}) == 1


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        pytest.param(
            {"ingress": [{"ports": [{"port": 1.5}]}]},
            "expected an integer or a string",
            id="port-float",
        ),
        pytest.param(
            {"ingress": [{"ports": [{"port": True}]}]},
            "expected an integer or a string",
            id="port-bool",
        ),
        pytest.param(
            {"ingress": [{"ports": [{"protocol": "ICMP"}]}]}, "is not one of", id="protocol"
        ),
        pytest.param(
            {"egress": [{"to": [{"ipBlock": {"except": []}}]}]}, "cidr is required", id="no-cidr"
        ),
        pytest.param({"policyTypes": ["Both"]}, "is not one of", id="policy-type"),
        pytest.param({"policyTypes": "Ingress"}, "expected array", id="policy-types-string"),
        pytest.param(
            {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
            "is not one of",
            id="operator",
        ),
        pytest.param(
            {"podSelector": {"matchLabels": {"app": 1}}}, "expected string", id="label-value"
        ),
    ],
)
def test_bad_policies_are_rejected(patch: dict[str, Any], reason: str) -> None:
    obj = {
        "apiVersion": "k8s.cni.cncf.io/v1beta1",
        "kind": "MultiNetworkPolicy",
        "metadata": {"name": "p"},
    }
    obj["spec"] = {"podSelector": {}, **patch}
    errors = validate(obj, policy_schema())
    assert len(errors) == 1
    assert reason in errors[0]


def test_pod_selector_is_required() -> None:
    obj = {"apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy", "spec": {}}
    assert validate(obj, policy_schema()) == ["spec: podSelector is required"]
