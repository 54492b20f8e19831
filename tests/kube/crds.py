"""The CRDs of deploy/crds as the fake serves them: their structural schemas, by kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.kube.api import Obj

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def load_crd_schemas(directory: Path = CRD_DIR) -> dict[str, Obj]:
    """Kind -> the openAPIV3Schema of its served version, from every CRD in `directory`."""
    schemas: dict[str, Obj] = {}
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec: dict[str, Any] = doc["spec"]
            for version in spec["versions"]:
                if version.get("served"):
                    schemas[spec["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    return schemas
