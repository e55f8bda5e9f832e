"""Whether two actions do the same thing on a screen, and the element an action targets.

This is the one comparison the engine uses wherever a predicted action is checked
against a recorded one: thought synthesis (GUI-Owl §2.2.3 rejection sampling), the
thought-action consistency filter, and RL ground truth (AgentCPM-GUI §3.5's in-bbox
rule, Step-GUI §2.2.3's point rewards). A point matches when it falls inside the
element the reference point falls in; outside any element it must lie within
`tolerance` (0-1000 units) of the reference point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from trajforge.actions.model import POINTED_KINDS, Action, ActionKind, Screen

THOUGHT_ACTION_MISMATCH = "thought_action_mismatch"  # the drop reason of a thought whose action differs
DEFAULT_TOLERANCE = 40


def inside(bounds: Sequence[float], x: float, y: float) -> bool:
    """Whether a pixel lands in pixel bounds x1,y1,x2,y2, edges included: the one hit test, which
    every element lookup (the simulator's, the critics', the policies', the exports') uses."""
    x1, y1, x2, y2 = bounds
    return x1 <= x <= x2 and y1 <= y <= y2


E = TypeVar("E")


def element_at(
    elements: Sequence[E],
    point: tuple[int, int],
    screen: Screen,
    *,
    bounds: Callable[[E], Sequence[float]] = lambda e: e["bounds"],  # type: ignore[index]
    slop: float = 0.0,
) -> E | None:
    """The element a 0-1000 point targets: the one rule every lookup uses (the simulator's tap, the
    step's description, the critics, the annotator's view, the exports, the recovery probe).

    The innermost element holding the point (the smallest by area: a link inside its paragraph, a
    row inside its list); among equals, the first in tree order. With `slop` (pixels) and none
    holding it, the nearest within that distance (a finger that lands just off a small control).
    `bounds` reads an element's pixel bounds x1,y1,x2,y2 (a dict's `bounds` by default)."""
    x, y = screen.to_px(point)
    under = [e for e in elements if inside(bounds(e), x, y)]
    if under or slop <= 0:
        return min(under, key=lambda e: _area(bounds(e)), default=None)
    near = [(d, e) for e in elements if (d := _distance(bounds(e), x, y)) <= slop]
    return min(near, key=lambda t: (t[0], _area(bounds(t[1]))))[1] if near else None


def on_screen(bounds: list[int], screen: Screen) -> list[int]:
    """Pixel bounds x1,y1,x2,y2 cut to the screen (a device may report an element past its edge)."""
    limits = (screen.width, screen.height)
    return [min(max(v, 0), limits[i % 2]) for i, v in enumerate(bounds)]


def target_bbox(action: Action, elements: list[dict[str, Any]], screen: Screen) -> list[int] | None:
    """The 0-1000 bbox of the element a pointed action hits, or None; its part on the screen (a
    device may report an element that runs past the screen's edge, as a list's last row does)."""
    if action.point is None:
        return None
    element = element_at(elements, action.point, screen)
    if element is None:
        return None
    x1, y1, x2, y2 = on_screen(element["bounds"], screen)
    (a, b), (c, d) = screen.from_px(x1, y1), screen.from_px(x2, y2)
    return [a, b, c, d]


def mismatch(
    predicted: Action,
    reference: Action,
    elements: list[dict[str, Any]],
    screen: Screen,
    tolerance: int = DEFAULT_TOLERANCE,
) -> str | None:
    """None when `predicted` does what `reference` does on this screen, else the reason code."""
    if predicted.kind != reference.kind:
        return "kind_mismatch"
    kind = reference.kind
    if kind in POINTED_KINDS:
        assert predicted.point is not None and reference.point is not None
        target = element_at(elements, reference.point, screen)
        if target is not None:
            x, y = screen.to_px(predicted.point)
            return None if inside(target["bounds"], x, y) else "point_outside_target"
        return None if math.dist(predicted.point, reference.point) <= tolerance else "point_beyond_tolerance"
    if kind == ActionKind.SWIPE:
        return None if predicted.swipe_direction() == reference.swipe_direction() else "direction_mismatch"
    if kind in (ActionKind.TYPE, ActionKind.OPEN_APP, ActionKind.ANSWER):
        same = (predicted.text or "").strip().casefold() == (reference.text or "").strip().casefold()
        return None if same else "text_mismatch"
    if kind == ActionKind.PRESS:
        return None if predicted.key == reference.key else "key_mismatch"
    if kind == ActionKind.TERMINATE:
        return None if predicted.status == reference.status else "status_mismatch"
    if kind == ActionKind.SCROLL:
        return None if predicted.direction == reference.direction else "direction_mismatch"
    if kind == ActionKind.HOTKEY:
        return None if predicted.text == reference.text else "key_mismatch"
    if kind == ActionKind.DRAG:
        assert predicted.to is not None and reference.to is not None
        return None if math.dist(predicted.to, reference.to) <= tolerance else "point_beyond_tolerance"
    return None  # wait


def _area(bounds: Sequence[float]) -> float:
    x1, y1, x2, y2 = bounds
    return max(0, x2 - x1) * max(0, y2 - y1)


def _distance(bounds: Sequence[float], x: float, y: float) -> float:
    x1, y1, x2, y2 = bounds
    return math.hypot(max(x1 - x, 0, x - x2), max(y1 - y, 0, y - y2))
