"""An app spec's parts as pydantic models: screens, widgets, slots (docs/app-spec.md). `trajforge.appspec`
loads a spec into them and `trajforge.spec_check` checks it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
