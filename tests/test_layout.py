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


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Each project module's project modules, from every import it holds: at the top, in a function or
    under TYPE_CHECKING (a cycle a function-level import hides is still a cycle)."""
    paths = {_module_name(p): p for package in ALLOWED for p in _modules(package)}

    def known(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                module = (
                    (f"{base}.{node.module}" if node.module else base) if node.level else str(node.module)
                )
                subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in paths]
                targets += subs if len(subs) == len(node.names) else [module, *subs]  # `from pkg import mod`
        graph[name] = {t for raw in targets if (t := known(raw)) and t != name}
    return graph


def test_no_import_cycle_anywhere() -> None:
    """No module reaches itself through imports (a package's `__init__` counts as a module)."""
    graph, found = _import_graph(), []
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            walk(start, [start])
    assert not found, f"import cycles: {found}"


# The kernel's three parts (docs/layout.md): each may reach, through any kernel module, only the
# parts below it. Modules beside them (errors, logs, world/, app specs, ...) belong to none.
RECORDS = {"trajforge.actions.model", "trajforge.actions.compare", "trajforge.domain", "trajforge.episode"}
RECORDS |= {"trajforge.sample", "trajforge.verdicts"}
MODEL_IO = {
    "trajforge.chat",
    "trajforge.gateway",
    "trajforge.endpoints",
    "trajforge.ledger",
    "trajforge.probe",
}
MODEL_IO |= {"trajforge.json_output", "trajforge.llm_settings", "trajforge.actions", "trajforge.families"}
CONFIGURATION = {"trajforge.settings", "trajforge.stage_settings", "trajforge.model_settings"}


def _kernel_part(module: str) -> int | None:
    """0 records, 1 model I/O, 2 configuration; None: beside them."""
    if module in RECORDS:
        return 0
    if any(module == m or module.startswith(f"{m}.") for m in MODEL_IO):
        return 1
    return 2 if module in CONFIGURATION else None


def test_the_kernel_is_in_three_parts_and_none_reaches_a_part_above_it() -> None:
    graph = _import_graph()
    assert {m for m in RECORDS | MODEL_IO | CONFIGURATION if m not in graph} == set()
    wrong = []
    for start in sorted(graph):
        if (part := _kernel_part(start)) is None:
            continue
        reached, todo = {start}, [start]
        while todo:
            for nxt in graph[todo.pop()] - reached:
                if nxt.startswith("trajforge"):
                    reached.add(nxt)
                    todo.append(nxt)
        wrong += [f"{start} reaches {m}" for m in sorted(reached) if (_kernel_part(m) or 0) > part]
    assert not wrong, f"a kernel part reaches a part above it: {wrong}"


def test_every_stage_is_declared_beside_the_code_it_runs() -> None:
    """A stage lives in the package whose code it runs; the loop keeps only the round's start and
    finish and the gate (docs/layout.md, "The round's stages")."""
    from evolve.stages import ROUND

    home = {stage.name: stage.run.__module__.split(".")[0] for stage in ROUND}
    assert home == {
        "start": "evolve",
        "queries": "querygen",
        "devices": "rollout",
        "rollout": "rollout",
        "guided": "rollout",
        "explore": "rollout",
        "judge": "critics",
        "calibrate": "critics",
        "encoder": "curation",
        "featurise": "curation",
        "curate": "curation",
        "publish": "publish",
        "train": "publish",
        "promote": "evolve",
        "finish": "evolve",
    }
