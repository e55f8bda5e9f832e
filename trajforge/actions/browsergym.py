"""Canonical actions as BrowserGym's high-level action strings (`browsergym.core.action.highlevel`):
what the browsergym suite sends a page (`rollout.suites.browsergym.env`) and what a `browsergym`
export writes as the answer, so rows are in the action space the episodes ran in.

`click("12")`, `fill("12", "text")`, `select_option("12", "text")` for a select: aimed at the
element's BrowserGym id (`bid`); where no element is under the point, the coordinates
(`mouse_click(x, y)`, in the page's CSS pixels).
"""

from __future__ import annotations

import json
from typing import Any

from trajforge.actions.model import WHEEL_CLICKS, Action, ActionKind

# Playwright's key names for trajforge's (`press`'s keys and a hotkey's parts).
KEYS = {
    "enter": "Enter", "return": "Enter", "tab": "Tab", "esc": "Escape", "escape": "Escape",
    "backspace": "Backspace", "delete": "Delete", "del": "Delete", "space": " ", "up": "ArrowUp",
    "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight", "home": "Home", "end": "End",
    "pageup": "PageUp", "pagedown": "PageDown", "ctrl": "Control", "control": "Control",
    "shift": "Shift", "alt": "Alt", "cmd": "Meta", "command": "Meta", "win": "Meta", "meta": "Meta",
}  # fmt: skip
WHEEL_PX = 100  # one wheel click, in CSS pixels
SWIPE_PX = 300


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _xy(at: tuple[float, float]) -> str:
    return f"{at[0]:.1f}, {at[1]:.1f}"


def to_code(
    action: Action, target: dict[str, Any] | None, at: tuple[float, float], to: tuple[float, float] | None
) -> str:
    """One canonical action as BrowserGym code: aimed at `target`'s bid when there is one, else at
    `at` (CSS pixels, where the pointer is when the action has no point)."""
    kind, bid = action.kind, _q(target["id"]) if target and target.get("id") else None
    pointed = action.point is not None
    if kind == ActionKind.CLICK:
        return f"click({bid})" if bid else f"mouse_click({_xy(at)})"
    if kind == ActionKind.DOUBLE_CLICK:
        return f"dblclick({bid})" if bid else f"mouse_dblclick({_xy(at)})"
    if kind == ActionKind.RIGHT_CLICK:
        return f'click({bid}, button="right")' if bid else f'mouse_click({_xy(at)}, button="right")'
    if kind == ActionKind.HOVER:
        return f"hover({bid})" if bid else f"mouse_move({_xy(at)})"
    if kind == ActionKind.LONG_PRESS:
        return f"mouse_down({_xy(at)})\nnoop({action.duration_ms or 800})\nmouse_up({_xy(at)})"
    if kind == ActionKind.TYPE:
        text = _q(action.text or "")
        if bid and target is not None and target["tag"] == "combobox":
            return f"select_option({bid}, {text})"
        if bid and target is not None and target["kind"] == "input":
            return f"fill({bid}, {text})"
        return (f"mouse_click({_xy(at)})\n" if pointed else "") + f"keyboard_type({text})"
    if kind == ActionKind.DRAG and to is not None:
        return f"mouse_drag_and_drop({_xy(at)}, {_xy(to)})"
    if kind in (ActionKind.SWIPE, ActionKind.SCROLL):
        return _scroll(action, at)
    if kind == ActionKind.PRESS:
        if action.key in ("back", "home"):  # a page's back is the browser's; it has no home screen
            return "go_back()" if action.key == "back" else "noop(0)"
        return f"keyboard_press({_q(KEYS.get(action.key or '', action.key or ''))})"
    if kind == ActionKind.HOTKEY:
        keys = "+".join(KEYS.get(k, k if len(k) > 1 else k.lower()) for k in (action.text or "").split("+"))
        return f"keyboard_press({_q(keys)})"
    if kind == ActionKind.ANSWER:
        return f"send_msg_to_user({_q(action.text or '')})"
    if kind == ActionKind.WAIT:
        return f"noop({min(action.duration_ms or 1000, 5000)})"
    return "noop(0)"  # terminate and app launches: a page has nothing to do


def _scroll(action: Action, at: tuple[float, float]) -> str:
    """A swipe moves content with the finger ("up" shows what is further down); a scroll is the
    wheel's sense ("down" shows what is further down), `amount` clicks."""
    if action.kind == ActionKind.SWIPE:
        way = action.swipe_direction()
        sense = {"up": "down", "down": "up", "left": "right", "right": "left"}.get(way or "", "down")
        dist = SWIPE_PX
    else:
        sense, dist = action.direction or "down", WHEEL_PX * (action.amount or WHEEL_CLICKS)
    dx, dy = {"down": (0, dist), "up": (0, -dist), "right": (dist, 0), "left": (-dist, 0)}[sense]
    return f"scroll_at({_xy(at)}, {dx}, {dy})" if action.point is not None else f"scroll({dx}, {dy})"
