"""deploy/ as the repository tier's checks read it: its Kubernetes objects, and what
`kubectl apply -k` makes of a kustomization without kustomize.

`render()` does what kustomize does with deploy/kustomization.yaml's two fields (the `resources`
in order, the `images` transformer on every container).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUSTOMIZATION = "kustomization.yaml"


def documents() -> list[tuple[str, dict[str, Any]]]:
    """Every Kubernetes object of deploy/, with the name of its file (kustomize's own file is
    no object)."""
    found = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.name == KUSTOMIZATION:
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                found.append((path.name, doc))
    return found


def one(kind: str, name: str = "netattach") -> dict[str, Any]:
    """The one object of deploy/ of this kind and name (the node daemon's by default; the
    policy controller's are `netattach-policy-controller`)."""
    (doc,) = [d for _, d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def split_image(image: str) -> tuple[str, str]:
    """(name, tag) of `name:tag` (a registry port is not a tag)."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return image, ""
    return name, tag


def set_images(doc: dict[str, Any], images: list[dict[str, str]]) -> None:
    """kustomize's images transformer on the pod template's containers."""
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        name, tag = split_image(container["image"])
        for rule in images:
            if rule["name"] == name:
                new_name = rule.get("newName", name)
                new_tag = rule.get("newTag", tag)
                container["image"] = f"{new_name}:{new_tag}" if new_tag else new_name


def render(kustomization_dir: Path = DEPLOY) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize kustomization_dir` renders, in order."""
    raw = yaml.safe_load((kustomization_dir / KUSTOMIZATION).read_text())
    found: list[dict[str, Any]] = []
    for resource in raw["resources"]:
        for doc in yaml.safe_load_all((kustomization_dir / resource).read_text()):
            if doc is not None:
                set_images(doc, raw.get("images", []))
                found.append(doc)
    return found
