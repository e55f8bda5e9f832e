"""The world model's vocabulary: moves on an app's DAG, the element tree, device state, faults.

Shared by query generation (paths and their replay), the critics (element trees) and the
simulated farm. `trajforge.world.device` interprets app specs with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

LAUNCHER = "__launcher__"
# Layout at 1080 px wide, scaled for other widths.
STATUS_H, APPBAR_H, NAV_H, GAP, MARGIN = 90, 160, 140, 16, 48
ROW_H = {"button": 170, "toggle": 150, "input": 150, "text": 130, "list": 150}
ICON_W, ICON_H, ICONS_PER_ROW = 220, 260, 4
SCROLL_FRACTION = 0.6  # one swipe scrolls 60% of the viewport
POPUP_CLOSE = "popup_close"
_UNFILLED = re.compile(r"\{\w+\}")


class FaultConfig(BaseModel):
    """Realism switches, each a per-event probability; all off by default."""

    seed: int = 0
    popup_rate: float = Field(0.0, ge=0, le=1, description="A dialog covers a screen on entry.")
    slow_rate: float = Field(0.0, ge=0, le=1, description="A screen shows 'Loading' for one step.")
    crash_rate: float = Field(0.0, ge=0, le=1, description="The device crashes on an action.")
    hang_rate: float = Field(0.0, ge=0, le=1, description="The device stops responding on an action.")


@dataclass(frozen=True)
class Move:
    """One step of a ground-truth path: use `widget` on `screen` (with `value` for lists/inputs)."""

    screen: str
    widget: str
    value: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"screen": self.screen, "widget": self.widget, "value": self.value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Move:
        return cls(data["screen"], data["widget"], data.get("value"))


@dataclass(frozen=True)
class Element:
    """One node of the element tree, in pixels."""

    id: str
    kind: str
    text: str
    bounds: tuple[int, int, int, int]
    widget: str = ""
    value: str | None = None
    checked: bool | None = None
    focused: bool = False

    @property
    def center(self) -> tuple[int, int]:
        x1, y1, x2, y2 = self.bounds
        return ((x1 + x2) // 2, (y1 + y2) // 2)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "text": self.text,
            "bounds": list(self.bounds),
        }
        for key in ("widget", "value", "checked"):
            if getattr(self, key) not in (None, ""):
                out[key] = getattr(self, key)
        if self.focused:
            out["focused"] = True
        return out


@dataclass
class SimState:
    app: str | None = None
    screen: str = LAUNCHER
    stack: list[str] = field(default_factory=list)
    slots: dict[str, dict[str, str]] = field(default_factory=dict)  # per app
    typed: dict[str, str] = field(default_factory=dict)  # "screen.widget" -> text
    focus: str | None = None
    scroll: int = 0
    popup: bool = False
    loading: bool = False
    crashed: bool = False
    finished: str | None = None
    answer: str | None = None


def fill(template: str, values: dict[str, str], row: str | None = None) -> str:
    """A label with {slot} and {value} replaced; unknown slots show as blanks."""
    out = template
    if row is not None:
        out = out.replace("{value}", row)
    for key, val in values.items():
        out = out.replace("{" + key + "}", val)
    return _UNFILLED.sub("", out) if "{" in out else out
