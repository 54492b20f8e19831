"""The test tree's own shape: a test module is run, never imported. What two test files share
lives in a harness module (tests/repo/deploy_files.py, tests/e2e/harness.py, ...), so each
`test_*.py` can move between tiers, or go, without breaking another."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def module_name(path: Path) -> str:
    """`tests.unit.test_x` of tests/unit/test_x.py (a package of its __init__.py)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def is_test_module(name: str) -> bool:
    """Whether `name` is a module of the test tree that pytest collects (tests.**.test_*)."""
    parts = name.split(".")
    return parts[0] == "tests" and parts[-1].startswith("test_")


def resolve(package: str, module: str | None, level: int) -> str:
    """The absolute name of `from <level dots><module> import ...` in a module of `package`."""
    if level == 0:
        return module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imported_modules(source: str, package: str) -> Iterator[str]:
    """The modules the imports of `source`, a module of `package`, name: for `from a import b`,
    `a`, or `a.b` when `b` may be a module (`a` not one that pytest collects)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = resolve(package, node.module, node.level)
            yield base
            if not is_test_module(base):
                yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def violations() -> set[tuple[str, str]]:
    """(importer, imported) for every import of a test module anywhere in tests/."""
    found = set()
    for path in sorted(TESTS.rglob("*.py")):
        importer = module_name(path)
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for imported in imported_modules(path.read_text(), package):
            if is_test_module(imported) and imported != importer:
                found.add((importer, imported))
    return found


@pytest.mark.parametrize(
    ("source", "wanted"),
    [
        ("from tests.unit.test_a import x", "tests.unit.test_a"),
        ("from tests.unit.test_a import test_x", "tests.unit.test_a"),
        ("import tests.unit.test_a", "tests.unit.test_a"),
        ("import tests.unit.test_a as a", "tests.unit.test_a"),
        ("from tests.unit import test_a", "tests.unit.test_a"),
        ("from tests.unit import harness, test_a", "tests.unit.test_a"),
        ("from .test_a import x", "tests.unit.test_a"),
        ("from . import test_a", "tests.unit.test_a"),
        ("from ..e2e.test_b import y", "tests.e2e.test_b"),
        ("from ..e2e import test_b", "tests.e2e.test_b"),
        ("def f():\n    from tests.e2e import test_b", "tests.e2e.test_b"),
    ],
)
def test_the_checker_sees_every_form_of_import(source: str, wanted: str) -> None:
    named = {n for n in imported_modules(source, "tests.unit") if is_test_module(n)}
    assert named == {wanted}


def test_a_harness_import_is_no_violation() -> None:
    source = "from tests.e2e import harness\nfrom tests.repo.deploy_files import one\n"
    assert not [n for n in imported_modules(source, "tests.unit") if is_test_module(n)]


def test_no_module_of_the_tests_imports_a_test_module() -> None:
    found = violations()
    assert not found, f"test modules imported (move what they share to a harness module): {found}"
