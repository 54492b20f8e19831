"""The node image is built from the same steps both ways: `make image` (scripts/build-image.sh,
no registry) and deploy/Dockerfile (for registry users). tests/node runs the first; these checks
keep the second from drifting away from it (KUBE-DEPLOY)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
BUILD_IMAGE = ROOT / "scripts" / "build-image.sh"
STEPS = ("deploy/image/build-inputs.sh", "install.sh", "packages.txt")


def dockerfile_cmd() -> list[str]:
    (line,) = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith("CMD ")]
    command = json.loads(line.removeprefix("CMD "))
    assert isinstance(command, list)
    return [str(word) for word in command]


def build_image_cmd() -> list[str]:
    """The `--config.cmd` words scripts/build-image.sh gives umoci, in order."""
    text = BUILD_IMAGE.read_text().replace("\\\n", " ")
    return re.findall(r"--config\.cmd\s+(\S+)", text)


@pytest.mark.req("KUBE-DEPLOY")
@pytest.mark.parametrize("step", STEPS)
def test_both_builds_run_the_same_steps(step: str) -> None:
    assert step in DOCKERFILE.read_text()
    assert step.rsplit("/", 1)[-1] in BUILD_IMAGE.read_text()


@pytest.mark.req("KUBE-DEPLOY")
def test_both_images_start_the_daemon_the_same_way() -> None:
    assert build_image_cmd() == dockerfile_cmd()
    assert dockerfile_cmd()[:2] == ["netattach", "daemon"]


def test_make_image_names_the_image_as_the_daemonset_runs_it() -> None:
    """build-image.sh's default IMAGE is read from deploy/daemonset.yaml's one `image:`."""
    (line,) = [
        line for line in BUILD_IMAGE.read_text().splitlines() if line.startswith('IMAGE="${IMAGE:-')
    ]
    expression = line.removeprefix('IMAGE="${IMAGE:-$(').removesuffix(')}"')
    done = subprocess.run(
        ["bash", "-c", expression.replace("$ROOT", str(ROOT))],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    daemonset = (ROOT / "deploy" / "daemonset.yaml").read_text()
    (image,) = re.findall(r"^\s*image:\s*(\S+)", daemonset, flags=re.MULTILINE)
    assert done.stdout.strip() == image
