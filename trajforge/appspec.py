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
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trajforge.errors import SpecError, yaml_problem
from trajforge.files import read_text
from trajforge.spec_check import validate_spec
from trajforge.spec_refs import ROW_VALUE, SLOT_REF

WidgetKind = Literal["button", "list", "toggle", "input", "text"]


class Widget(BaseModel):
    """One element of a screen. Lists, toggles and inputs act on `slot`."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Unique within its screen.")
    kind: WidgetKind
    label: str = Field("", description="Text shown; {slot} shows the slot's current value.")
    slot: str | None = Field(
        None, description="list: rows are the slot's values; toggle/input: the slot set."
    )
    goto: str | None = Field(
        None, description="Screen shown after a tap (button, list row) or submit (input)."
    )
    sets: dict[str, str] = Field(
        default_factory=dict, alias="set", description="button: slot values set by a tap (YAML key `set`)."
    )
    phrase: str | None = Field(None, description="How an instruction says this step, e.g. 'choose {dish}'.")
    bounds: tuple[int, int, int, int] | None = Field(
        None, description="Fixed box x1,y1,x2,y2 in 0-1000 screen units; default: stacked layout."
    )

    @model_validator(mode="after")
    def _kind_fields(self) -> Widget:
        if self.kind in ("list", "toggle", "input") and self.slot is None:
            raise ValueError(f"a {self.kind} widget needs 'slot'")
        if self.kind in ("toggle", "text") and self.goto is not None:
            raise ValueError(f"a {self.kind} widget cannot have 'goto'")
        if self.sets and self.kind != "button":
            raise ValueError("only a button can 'set' slots")
        if self.bounds is not None:
            x1, y1, x2, y2 = self.bounds
            if not (0 <= x1 < x2 <= 1000 and 0 <= y1 < y2 <= 1000):
                raise ValueError(
                    f"bounds {self.bounds} must satisfy 0 <= x1 < x2 <= 1000, 0 <= y1 < y2 <= 1000"
                )
        return self

    def slot_refs(self) -> set[str]:
        """Slots this widget reads or writes; `{value}` (a list row's own value) is not a slot."""
        refs = set(SLOT_REF.findall(self.label)) | set(SLOT_REF.findall(self.phrase or ""))
        return (refs - {ROW_VALUE}) | set(self.sets) | ({self.slot} if self.slot else set())


class Screen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str = Field(min_length=1)
    description: str = Field(min_length=1, description="What the screen shows and is for.")
    widgets: list[Widget] = Field(default_factory=list)
    terminal: bool = Field(False, description="A task may end here; the verifier checks this screen.")
    intents: list[str] = Field(
        default_factory=list, description="Instruction templates for paths ending here, e.g. 'Order {dish}'."
    )


MIN_TASK_ACTIONS = 3  # the default shortest task: open the app and two more actions


class AppSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    title: str = Field(min_length=1, description="Name on the launcher; what open_app matches.")
    package: str | None = Field(
        None, description="android backend: the activity adb starts (com.example.app/.MainActivity)."
    )
    locale: Literal["en", "zh"] = "en"
    graph: Literal["dag", "cyclic"] = Field("dag", description="dag: goto edges must not form a cycle.")
    start: str
    slots: dict[str, list[str]] = Field(default_factory=dict)
    initial: dict[str, str] = Field(
        default_factory=dict,
        description="Slot values on a fresh device (toggles default to their first value).",
    )
    screens: dict[str, Screen]
    min_actions: int = Field(
        MIN_TASK_ACTIONS,
        ge=1,
        le=12,
        description="The fewest actions a sampled task takes, opening the app included: lower it for "
        "an app whose tasks are one or two taps (1 allows any).",
    )

    @field_validator("slots", mode="before")
    @classmethod
    def _slot_values_as_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: [_as_text(v, f"slots.{k}") for v in vs] if isinstance(vs, list) else vs
                for k, vs in value.items()
            }
        return value

    @field_validator("initial", mode="before")
    @classmethod
    def _initial_as_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _as_text(v, f"initial.{k}") for k, v in value.items()}
        return value

    def edges(self) -> list[tuple[str, str, str]]:
        """(from screen, widget id, to screen) for every goto."""
        return [(sid, w.id, w.goto) for sid, s in self.screens.items() for w in s.widgets if w.goto]

    def initial_values(self) -> dict[str, str]:
        """Slot values when the app starts: `initial`, and each toggle at its first value."""
        values = dict(self.initial)
        for screen in self.screens.values():
            for w in screen.widgets:
                if w.kind == "toggle" and w.slot and w.slot not in values:
                    values[w.slot] = self.slots[w.slot][0]
        return values

    def widget(self, screen: str, widget_id: str) -> Widget:
        return next(w for w in self.screens[screen].widgets if w.id == widget_id)


def _as_text(value: Any, where: str) -> Any:
    """Slot values are text; YAML numbers become text, YAML booleans are refused with the fix."""
    if isinstance(value, bool):
        raise ValueError(
            f'{where}: {value!r} was read as a boolean (YAML reads on/off/yes/no so); quote it, e.g. "on"'
        )
    return str(value) if isinstance(value, int | float) else value


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
