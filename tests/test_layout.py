"""The house's layout rules, checked on the source: imports run one way, modules stay small and
functions read top to bottom.

flows -> evolve -> stages (querygen, rollout, critics, curation, annotation) and publish -> storage ->
trajforge. A stage never imports a sibling stage; what two stages share lives in `storage` or the kernel.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STAGES = {"querygen", "rollout", "critics", "curation", "annotation"}
# What each package may import from the project (besides itself).
ALLOWED = {
    "trajforge": set(),
    "storage": {"trajforge"},
    **{stage: {"storage", "trajforge"} for stage in STAGES},
    "publish": {"storage", "trajforge"},  # dataset building: shards, manifests, exports
    "evolve": STAGES | {"publish", "storage", "trajforge"},
    "flows": STAGES | {"evolve", "publish", "storage", "trajforge"},
}
PROJECT = set(ALLOWED) | {"bench", "tests"}
MAX_LINES = 400
MAX_FUNCTION_LINES = 60  # outside migrations and tests


def _modules(package: str) -> list[Path]:
    return [p for p in (ROOT / package).rglob("*.py") if "migrations" not in p.parts]


def _imports(path: Path) -> set[str]:
    tops = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            tops.add(node.module.split(".")[0])
    return tops & PROJECT


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_run_one_way(package: str) -> None:
    wrong = {
        str(p.relative_to(ROOT)): sorted(bad)
        for p in _modules(package)
        if (bad := _imports(p) - ALLOWED[package] - {package})
    }
    assert not wrong, f"{package} may import only {sorted(ALLOWED[package])}; these reach further: {wrong}"


def test_no_module_over_the_size_limit() -> None:
    big = {
        str(p.relative_to(ROOT)): n
        for package in [*ALLOWED, "bench"]
        for p in _modules(package)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not big, f"split these modules (over {MAX_LINES} lines): {big}"


def test_no_function_over_the_length_limit() -> None:
    long = {
        f"{p.relative_to(ROOT)}:{node.name}": n
        for package in [*ALLOWED, "bench"]
        for p in _modules(package)
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (n := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES
    }
    assert not long, f"split these functions (over {MAX_FUNCTION_LINES} lines): {long}"
