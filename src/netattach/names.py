"""Kubernetes object names: the DNS-1123 rules, written once.

    label       at most 63 lower-case letters, digits and '-', starting and ending with a
                letter or digit: a namespace, a NetworkAttachmentDefinition's name (standard
                §3.3), a network selection's `name` and `namespace`
    subdomain   labels joined by '.', at most 253 characters: a pod, a Node, an IPAMClaim, a
                MultiNetworkPolicy, the prefix of a label key

`a..b`, `a.-b` and `-a` are neither; nor is a name with a trailing line break. Every reader of a
name (the selection annotation, the manifests of the directory feed, the settings, the policy
model, `netattach validate`) asks here, and words its own message with `LABEL_RULE` or
`SUBDOMAIN_RULE`.

Standard library only, and cheap to import: the thin plugin reads a selection at every ADD.
Patterns as text: `re` compiles each on first use and caches it.
"""

import re

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
LABEL_RULE = (
    f"at most {LABEL_MAX} lower-case letters, digits and '-', starting and ending with a "
    "letter or digit"
)
SUBDOMAIN_RULE = (
    f"at most {SUBDOMAIN_MAX} lower-case letters, digits, '-' and '.', starting and ending "
    "with a letter or digit"
)
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(?:\.{_LABEL})*"


def is_label(value: object) -> bool:
    """Is `value` a DNS-1123 label?"""
    return (
        isinstance(value, str)
        and len(value) <= LABEL_MAX
        and re.fullmatch(_LABEL, value) is not None
    )


def is_subdomain(value: object) -> bool:
    """Is `value` a DNS-1123 subdomain?"""
    return (
        isinstance(value, str)
        and len(value) <= SUBDOMAIN_MAX
        and re.fullmatch(_SUBDOMAIN, value) is not None
    )
