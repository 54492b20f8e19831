"""The generated ValidatingAdmissionPolicy evaluated as the API server does: the CEL, run by
cel-python with the Kubernetes library functions it uses, against NADs as admission sees them."""

from __future__ import annotations

from typing import Any

import celpy
import re2
from celpy import adapter, celtypes, evaluation

from netattach.guard import delegate_policy
from tests import builders


def _find_all(text: celtypes.StringType, regex: celtypes.StringType) -> celtypes.ListType:
    # Kubernetes' regex library: every non-overlapping match, RE2 syntax.
    return celtypes.ListType([celtypes.StringType(m.group(0)) for m in re2.finditer(regex, text)])


def _join(items: celtypes.ListType, separator: celtypes.StringType) -> celtypes.StringType:
    # Kubernetes' strings library (cel-go ext.Strings): list<string>.join(separator).
    return celtypes.StringType(str(separator).join(str(i) for i in items))


def _find(text: celtypes.StringType, regex: celtypes.StringType) -> celtypes.StringType:
    # Kubernetes' regex library: the first match (leftmost-first, as RE2 finds it), else ''.
    found = re2.search(regex, text)
    return celtypes.StringType(found.group(0) if found else "")


FUNCTIONS: dict[str, evaluation.CELFunction] = {"findAll": _find_all, "join": _join, "find": _find}


class CompiledPolicy:
    """A ValidatingAdmissionPolicy evaluated as the API server does: variables in order, then
    every validation; refused when one is false."""

    def __init__(self, vap: dict[str, Any]) -> None:
        env = celpy.Environment()
        self.variables = [
            (v["name"], env.program(env.compile(v["expression"]), functions=FUNCTIONS))
            for v in vap["spec"]["variables"]
        ]
        self.validations = [
            (
                env.program(env.compile(v["expression"]), functions=FUNCTIONS),
                env.program(env.compile(v["messageExpression"]), functions=FUNCTIONS),
            )
            for v in vap["spec"]["validations"]
        ]

    def messages(self, nad: dict[str, Any], labels: dict[str, str]) -> list[str]:
        """The messages of the validations `nad` fails; [] when admitted."""
        namespace = nad["metadata"]["namespace"]
        activation: dict[str, Any] = {
            "object": adapter.json_to_cel(nad),
            "namespaceObject": adapter.json_to_cel(
                {
                    "metadata": {
                        "name": namespace,
                        # The API server labels every namespace with its name.
                        "labels": {**labels, delegate_policy.NAMESPACE_NAME_LABEL: namespace},
                    }
                }
            ),
        }
        values: dict[str, Any] = {}
        for name, program in self.variables:
            activation["variables"] = celtypes.MapType(
                {celtypes.StringType(k): v for k, v in values.items()}
            )
            values[name] = program.evaluate(activation)
        activation["variables"] = celtypes.MapType(
            {celtypes.StringType(k): v for k, v in values.items()}
        )
        failed = []
        for validation, message in self.validations:
            verdict = validation.evaluate(activation)
            assert isinstance(verdict, celtypes.BoolType), verdict
            if not verdict:
                failed.append(str(message.evaluate(activation)))
        return failed


def nad(
    namespace: str, config: str | None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """The NAD `namespace/net-a` as admission sees it: `config` its spec's text, as written."""
    return dict(builders.nad("net-a", config, namespace=namespace, annotations=annotations))


def policy_of(raw: dict[str, Any]) -> delegate_policy.DelegatePolicy:
    """The delegate policy `raw` writes; it must be valid."""
    return builders.delegate_policy_of(raw)
