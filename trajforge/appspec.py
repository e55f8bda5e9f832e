"""App specs: an app's navigation graph (GUI-Owl §6.2) as YAML, loaded and validated.

Screens carry a description, widgets and the slots they use; widgets move between
screens (`goto`) or change state (`set`, toggles, inputs); slots have value sets.
A path that ends on a `terminal` screen is a task, and the state it set is what the
verifier checks. The format is documented in docs/app-spec.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trajforge.errors import SpecError, yaml_problem
from trajforge.files import read_text
from trajforge.spec_check import validate_spec
from trajforge.spec_model import MIN_TASK_ACTIONS, AppSpec


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML that refuses a key given twice in one mapping (plain YAML keeps the last, silently);
    parsed by libyaml where PyYAML has it (ten times faster on a large spec)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise DuplicateKey(
                    f"line {key_node.start_mark.line + 1}: key {key!r} appears twice in one mapping; "
                    "keep one (YAML would silently use the last)"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class DuplicateKey(yaml.YAMLError):
    pass


def _read_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_UniqueKeyLoader)


def load_spec(path: Path) -> AppSpec:
    """Load and validate an app spec file.

    Raises:
        SpecError: unreadable YAML, unknown fields, or any validation problem (all listed).
    """
    text = read_text(path, "app spec", SpecError)
    try:
        data = _read_yaml(text)
    except DuplicateKey as exc:
        raise SpecError(f"app spec {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise SpecError(f"app spec {path}: not valid YAML at {yaml_problem(exc)}; fix the syntax") from exc
    return parse_spec(data, str(path))


def parse_spec(data: Any, source: str) -> AppSpec:
    """Validate already-parsed YAML; `source` names the file in messages."""
    if not isinstance(data, dict):
        raise SpecError(f"app spec {source}: top level must be a mapping with name, title, start, screens")
    try:
        spec = AppSpec.model_validate(_with_widget_ids(data))
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "top level"
            msg = err["msg"].removeprefix("Value error, ")
            fix = " (remove it or check the spelling)" if err["type"] == "extra_forbidden" else ""
            located = (
                msg if msg.startswith(f"{where}.") else f"{where}: {msg}"
            )  # message names a deeper element
            lines.append(f"app spec {source}: {located}{fix}")
        raise SpecError("\n".join(lines), problems=lines) from exc
    problems = validate_spec(spec, source)
    if problems:
        raise SpecError("\n".join(problems), problems=problems)
    return spec


def _with_widget_ids(data: dict[str, Any]) -> dict[str, Any]:
    """Widgets without an id get one from their kind and position (button_2), for short specs."""
    screens = data.get("screens")
    if not isinstance(screens, dict):
        return data
    out = dict(data)
    out["screens"] = {}
    for sid, screen in screens.items():
        if isinstance(screen, dict) and isinstance(screen.get("widgets"), list):
            screen = dict(screen)
            screen["widgets"] = [
                {"id": f"{w.get('kind', 'widget')}_{i}", **w} if isinstance(w, dict) and "id" not in w else w
                for i, w in enumerate(screen["widgets"])
            ]
        out["screens"][sid] = screen
    return out


def builtin_app_names() -> list[str]:
    return sorted(
        p.name.removesuffix(".yaml")
        for p in resources.files("trajforge.apps").iterdir()
        if p.name.endswith(".yaml")
    )


def load_app(name_or_path: str) -> AppSpec:
    """A built-in app by name, or a spec file by path."""
    if name_or_path in builtin_app_names():
        ref = resources.files("trajforge.apps") / f"{name_or_path}.yaml"
        return parse_spec(_read_yaml(ref.read_text(encoding="utf-8")), f"{name_or_path}.yaml")
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return load_spec(path)
    raise SpecError(
        f"no built-in app {name_or_path!r} and no such file; built-in apps: {', '.join(builtin_app_names())}"
    )


def load_apps(refs: Sequence[str] = ()) -> list[AppSpec]:
    """The apps of a run: built-in names and/or spec paths (none: every built-in app).

    Raises:
        SpecError: a spec cannot be loaded, or two entries define the same app name differently
            (a spec named like a built-in would otherwise mix its queries with the built-in's).
    """
    apps: dict[str, tuple[str, AppSpec]] = {}
    for ref in refs or builtin_app_names():
        spec = load_app(ref)
        if spec.name in apps:
            first, other = apps[spec.name]
            if other != spec:
                a, b = (f"{r} (built-in)" if r in builtin_app_names() else r for r in (first, ref))
                raise SpecError(
                    f"apps: {a} and {b} both define app {spec.name!r} differently; "
                    "give one of them another `name:`"
                )
            continue
        apps[spec.name] = (ref, spec)
    return [spec for _, spec in apps.values()]


def spec_sha256(spec: AppSpec) -> str:
    """The spec's identity: the hash of its canonical JSON."""
    dump = spec.model_dump(mode="json", by_alias=True)
    if dump["min_actions"] == MIN_TASK_ACTIONS:  # specs from before the field keep their identity
        del dump["min_actions"]
    body = json.dumps(dump, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()
