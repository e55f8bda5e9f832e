"""What a critic may see of an episode, and nothing else (Step-GUI §2.1.4, GUI-Owl §6.3).

A critic judges from what a model critic on a real farm would be shown: the instruction, the
screenshots (by hash), the element tree as the device reports it (visible text, role,
bounds, checked / selected / focused), and the actions with the policy's raw output. The
types below have no field for the spec's widget ids, slot names or values, the query's path
or goal, the device's hidden state or the episode's own anchor: a critic cannot read what
the view does not carry (`tests/critics/test_learned.py` fails if such a field appears).

Hit-testing here is what a real device does: the innermost element under the point takes the
tap, and a tap just outside every box goes to the nearest element within the touch slop
(Android's touch slop, Chromium's touch adjustment).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trajforge.actions import Screen
from trajforge.actions.compare import element_at
from trajforge.episode import Step

SLOP_SHARE = 0.03  # touch slop as a share of the screen's shorter side
SLOP_MIN_PX = 8


@dataclass(frozen=True)
class SeenElement:
    """One node of the element tree as the device reports it."""

    text: str
    role: str
    bounds: tuple[int, int, int, int]
    checked: bool | None = None
    selected: bool | None = None
    focused: bool = False

    @classmethod
    def reported(cls, node: dict[str, Any]) -> SeenElement:
        """From a stored tree node; the fields a device does not report are never read."""
        x1, y1, x2, y2 = (int(v) for v in node.get("bounds") or (0, 0, 0, 0))
        return cls(
            text=str(node.get("text") or node.get("desc") or ""),
            role=str(node.get("kind") or node.get("role") or "view"),
            bounds=(x1, y1, x2, y2),
            checked=node.get("checked"),
            selected=node.get("selected"),
            focused=bool(node.get("focused")),
        )


def _bounds(e: SeenElement) -> tuple[int, int, int, int]:
    return e.bounds


@dataclass(frozen=True)
class SeenStep:
    action: dict[str, Any] | None  # the parsed action; None when the output did not parse
    raw_output: str
    parse_error: str | None
    before: str  # screenshot hashes
    after: str
    elements: tuple[SeenElement, ...]  # the tree shown before the action
    width: int
    height: int

    def touched(self) -> SeenElement | None:
        """The element the action's point targets (`element_at`: the innermost under the finger, a link
        inside its paragraph), or the nearest within the touch slop."""
        point = (self.action or {}).get("point")
        if point is None or not self.width or not self.height:
            return None
        slop = max(SLOP_MIN_PX, SLOP_SHARE * min(self.width, self.height))
        at = (int(point[0]), int(point[1]))
        return element_at(self.elements, at, Screen(self.width, self.height), bounds=_bounds, slop=slop)


@dataclass(frozen=True)
class CriticView:
    """An episode as a critic sees it."""

    instruction: str
    steps: tuple[SeenStep, ...]

    def prefix(self, n: int) -> CriticView:
        return CriticView(self.instruction, self.steps[:n])


def seen_step(step: Step) -> SeenStep:
    """A recorded step as a critic sees it."""
    return SeenStep(
        action=None if step.action is None else step.action.stored(),
        raw_output=step.raw_output,
        parse_error=step.parse_error,
        before=step.screenshot,
        after=step.after,
        elements=tuple(SeenElement.reported(e) for e in step.elements or []),
        width=step.width,
        height=step.height,
    )


def critic_view(instruction: str, steps: Sequence[Step]) -> CriticView:
    return CriticView(instruction, tuple(seen_step(st) for st in steps))
