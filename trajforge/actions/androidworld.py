"""AndroidWorld `JSONAction`: `{"action_type": "click", "x": 540, "y": 1200}` in pixels.

`scroll` names the direction the content moves, so the finger moves the opposite
way; `input_text` may carry the x/y of the field to focus; `status` ends the task
with `goal_status` "complete" or "infeasible". Element `index` targets need the
element tree and are refused here.
"""

from __future__ import annotations

import json
from typing import Any

from trajforge.actions.model import (
    DESKTOP_KINDS,
    OPPOSITE,
    Action,
    ActionKind,
    Direction,
    Screen,
    build_action,
    load_json_object,
    refuse_desktop,
    require_str,
)
from trajforge.errors import ParseError, UnsupportedAction

_PRESS = {"navigate_home": "home", "navigate_back": "back", "keyboard_enter": "enter"}
_PRESS_BACK = {v: k for k, v in _PRESS.items()}
_GOAL = {"complete": "success", "infeasible": "failure"}


class AndroidWorldCodec:
    name = "androidworld"
    notes: tuple[str, ...] = ()

    def parse(self, text: str, screen: Screen) -> Action:
        data = load_json_object(text, text)
        kind = data.get("action_type")
        if not isinstance(kind, str):
            raise ParseError("missing_field", "'action_type' is required", text)
        kind = kind.lower()

        def xy(required: bool = True) -> tuple[int, int] | None:
            x, y = data.get("x"), data.get("y")
            if x is None and y is None:
                if required:
                    reason = "element_index_unsupported" if "index" in data else "missing_field"
                    raise ParseError(reason, f"{kind} needs pixel 'x' and 'y'", text)
                return None
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (x, y)):
                raise ParseError("bad_coordinate", f"x, y must be numbers, got {x!r}, {y!r}", text)
            return screen.from_px(float(x), float(y), text)  # type: ignore[arg-type]

        f: dict[str, Any] = {}
        if kind == "click":
            f.update(kind=ActionKind.CLICK, point=xy())
        elif kind == "long_press":
            f.update(kind=ActionKind.LONG_PRESS, point=xy())
        elif kind in ("scroll", "swipe"):
            direction = str(data.get("direction", "")).lower()
            if direction not in OPPOSITE:
                raise ParseError("bad_value", f"{kind} direction {data.get('direction')!r}", text)
            finger: Direction = OPPOSITE[direction] if kind == "scroll" else direction
            f.update(kind=ActionKind.SWIPE, point=xy(required=False) or (500, 500), direction=finger)
        elif kind == "input_text":
            f.update(kind=ActionKind.TYPE, text=require_str(data, "text", text), point=xy(required=False))
        elif kind in _PRESS:
            f.update(kind=ActionKind.PRESS, key=_PRESS[kind])
        elif kind == "open_app":
            f.update(kind=ActionKind.OPEN_APP, text=require_str(data, "app_name", text))
        elif kind == "wait":
            f.update(kind=ActionKind.WAIT)
        elif kind == "answer":
            f.update(kind=ActionKind.ANSWER, text=require_str(data, "text", text))
        elif kind == "status":
            goal = _GOAL.get(str(data.get("goal_status", "")).lower())
            if goal is None:
                raise ParseError(
                    "bad_value",
                    f"goal_status {data.get('goal_status')!r}; known: complete, infeasible",
                    text,
                )
            f.update(kind=ActionKind.TERMINATE, status=goal)
        else:
            raise ParseError("unknown_action", f"JSONAction action_type {kind!r}", text)
        return build_action(text, **f)

    def format(self, action: Action, screen: Screen) -> str:
        refuse_desktop(action, "AndroidWorld JSONAction")
        out: dict[str, Any] = {}
        kind = action.kind
        if kind in (ActionKind.CLICK, ActionKind.LONG_PRESS):
            out["action_type"] = str(kind)
        elif kind == ActionKind.SWIPE:
            out.update(action_type="scroll", direction=OPPOSITE[action.swipe_direction()])
        elif kind == ActionKind.TYPE:
            out.update(action_type="input_text", text=action.text)
        elif kind == ActionKind.PRESS:
            if action.key == "menu":
                raise UnsupportedAction("unsupported_action", "AndroidWorld JSONAction has no menu key")
            out["action_type"] = _PRESS_BACK[action.key or ""]
        elif kind == ActionKind.OPEN_APP:
            out.update(action_type="open_app", app_name=action.text)
        elif kind == ActionKind.WAIT:
            out["action_type"] = "wait"
        elif kind == ActionKind.ANSWER:
            out.update(action_type="answer", text=action.text)
        else:
            out.update(
                action_type="status",
                goal_status="complete" if action.status == "success" else "infeasible",
            )
        if action.point is not None:
            out["x"], out["y"] = screen.to_px(action.point)
        return json.dumps(out, ensure_ascii=False, separators=(",", ":"))

    def represents(self, action: Action) -> bool:
        if action.thought is not None or action.intent is not None or action.key == "menu":
            return False
        if action.kind in DESKTOP_KINDS:
            return False
        if action.kind in (ActionKind.LONG_PRESS, ActionKind.WAIT):
            return action.duration_ms is None
        if action.kind == ActionKind.SWIPE:
            return action.direction is not None and action.duration_ms is None
        return True
