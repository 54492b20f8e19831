"""constraints.txt pins every Python package netattach's installs take, and every install takes
it: `make venv` (so CI), the image's wheels (`make image`, deploy/Dockerfile). A release made
upstream between two runs then changes nothing; `make lock` (scripts/lock-deps.sh) refreshes it.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
PYPROJECT = ROOT / "pyproject.toml"
MAKEFILE = ROOT / "Makefile"
BUILD_INPUTS = ROOT / "deploy" / "image" / "build-inputs.sh"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
# `name==version` and nothing else: no range, marker, URL or option.
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)$")


def load_pins() -> dict[NormalizedName, Version]:
    pins: dict[NormalizedName, Version] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        match = _PIN.match(line)
        assert match is not None, f"constraints.txt: not an exact pin: {line!r}"
        name = canonicalize_name(match["name"])
        assert name not in pins, f"constraints.txt pins {name} twice"
        pins[name] = Version(match["version"])
    return pins


def declared() -> list[Requirement]:
    """What pyproject.toml requires: the dependencies, every extra, the build backend."""
    pyproject = tomllib.loads(PYPROJECT.read_text())
    extras = pyproject["project"]["optional-dependencies"].values()
    texts = {
        *pyproject["project"]["dependencies"],
        *(text for extra in extras for text in extra),
        *pyproject["build-system"]["requires"],
    }
    return [Requirement(text) for text in sorted(texts)]


def pip_lines(text: str) -> list[str]:
    """Each `pip install`/`pip wheel` command of a Makefile, shell script or Dockerfile, its
    continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line for line in joined.splitlines() if re.search(r"pip (install|wheel)\b", line)]


@pytest.mark.parametrize("requirement", declared(), ids=str)
def test_every_declared_requirement_has_an_exact_pin_it_allows(requirement: Requirement) -> None:
    pins = load_pins()
    name = canonicalize_name(requirement.name)
    assert name in pins, f"{requirement} is not pinned: run `make lock`"
    assert requirement.specifier.contains(pins[name], prereleases=True), (
        f"constraints.txt pins {name}=={pins[name]}, which pyproject.toml's {requirement}"
        " refuses: run `make lock`"
    )


def test_pip_itself_is_pinned_and_knows_build_constraints() -> None:
    # `make venv` and the image pass --build-constraint, which pip has since 25.3.
    assert load_pins()[canonicalize_name("pip")] >= Version("25.3")


def test_the_virtualenv_the_tests_run_in_holds_the_pinned_versions() -> None:
    """`make venv` installed from the pins: every pinned package installed here is at its pin."""
    drift = {}
    for name, version in load_pins().items():
        try:
            installed = Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            continue  # a build-only package (wheel) lives in pip's isolated build environment
        if installed != version:
            drift[name] = f"{installed} installed, {version} pinned"
    assert drift == {}, f"the virtualenv drifted from constraints.txt (run `make venv`): {drift}"


@pytest.mark.parametrize("path", [MAKEFILE, BUILD_INPUTS, DOCKERFILE], ids=lambda path: path.name)
def test_every_install_of_python_packages_takes_the_constraints(path: Path) -> None:
    commands = pip_lines(path.read_text())
    assert commands, f"no pip install in {path.name}"
    for command in commands:
        assert re.search(r"--constraint \S*(constraints\.txt|\$\(CONSTRAINTS\))", command), command
        if "-e " in command or " wheel " in command:  # builds netattach: setuptools pinned too
            assert "--build-constraint" in command, command


def test_the_dockerfile_copies_the_constraints_into_its_build() -> None:
    copies = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith("COPY ")]
    assert any("constraints.txt" in line.split() for line in copies), copies
