"""AgentCPM-GUI compact JSON (seed 000 §3.2, Table 1).

`{"POINT":[x,y]}` tap, `+ "duration"` long press, `+ "to"` swipe (direction or point),
`{"TYPE":s}`, `{"PRESS":"HOME"|"BACK"|"ENTER"}`, `{"duration":ms}` wait,
`{"STATUS":s}`; an optional `"thought"` comes first. Coordinates are 0-1000.
"""

from __future__ import annotations

import json
from typing import Any

from trajforge.actions.model import (
    DESKTOP_KINDS,
    DIRECTIONS,
    Action,
    ActionKind,
    Screen,
    build_action,
    load_json_object,
    norm_point,
    refuse_desktop,
)
from trajforge.errors import ParseError, UnsupportedAction

_KEYS = {"POINT", "to", "TYPE", "PRESS", "STATUS", "duration", "thought"}
_PRESS = {"HOME": "home", "BACK": "back", "ENTER": "enter"}
# STATUS values of §3.2 that end the task, and how.
_STATUS = {
    "finish": "success",
    "satisfied": "success",
    "impossible": "failure",
    "interrupt": "failure",
}


class AgentCPMCodec:
    name = "agentcpm"
    notes: tuple[str, ...] = ("thought",)

    def parse(self, text: str, screen: Screen) -> Action:
        data = load_json_object(text, text)
        unknown = set(data) - _KEYS
        if unknown:
            raise ParseError(
                "unknown_field", f"unknown key(s) {sorted(unknown)}; known: {sorted(_KEYS)}", text
            )
        thought = data.get("thought")
        if thought is not None and not isinstance(thought, str):
            raise ParseError("bad_value", f"'thought' must be a string, got {thought!r}", text)
        status = data.get("STATUS", "continue")
        duration = data.get("duration")
        if duration is not None and (not isinstance(duration, int) or isinstance(duration, bool)):
            raise ParseError("bad_value", f"'duration' must be integer milliseconds, got {duration!r}", text)
        acting = [k for k in ("POINT", "TYPE", "PRESS") if k in data]
        if len(acting) > 1:
            raise ParseError("conflicting_fields", f"one action per output, got {acting}", text)
        if status != "continue":
            if status not in _STATUS:
                raise ParseError("unsupported_status", f"STATUS {status!r} has no canonical action", text)
            if acting or duration is not None:
                raise ParseError("conflicting_fields", f"STATUS {status!r} together with an action", text)
            return build_action(text, kind=ActionKind.TERMINATE, status=_STATUS[status], thought=thought)
        fields: dict[str, Any] = {"thought": thought}
        if "POINT" in data:
            fields["point"] = norm_point(data["POINT"], text, "POINT")
            if "to" in data:
                fields.update(kind=ActionKind.SWIPE, duration_ms=duration, **self._to(data["to"], text))
            elif duration is not None:
                fields.update(kind=ActionKind.LONG_PRESS, duration_ms=duration)
            else:
                fields["kind"] = ActionKind.CLICK
        elif "to" in data:
            raise ParseError("missing_field", "'to' needs a POINT to start from", text)
        elif "TYPE" in data:
            if not isinstance(data["TYPE"], str):
                raise ParseError("bad_value", f"'TYPE' must be a string, got {data['TYPE']!r}", text)
            fields.update(kind=ActionKind.TYPE, text=data["TYPE"])
        elif "PRESS" in data:
            key = _PRESS.get(str(data["PRESS"]).upper())
            if key is None:
                raise ParseError(
                    "unsupported_key", f"PRESS {data['PRESS']!r}; known: HOME, BACK, ENTER", text
                )
            fields.update(kind=ActionKind.PRESS, key=key)
        elif duration is not None:
            fields.update(kind=ActionKind.WAIT, duration_ms=duration)
        else:
            raise ParseError("no_action", "no POINT, TYPE, PRESS, duration or STATUS", text)
        return build_action(text, **fields)

    @staticmethod
    def _to(value: Any, raw: str) -> dict[str, Any]:
        if isinstance(value, str):
            if value not in DIRECTIONS:
                raise ParseError(
                    "bad_value", f"'to' direction {value!r}; known: {', '.join(DIRECTIONS)}", raw
                )
            return {"direction": value}
        return {"to": norm_point(value, raw, "to")}

    def format(self, action: Action, screen: Screen) -> str:
        refuse_desktop(action, "AgentCPM-GUI")
        out: dict[str, Any] = {}
        if action.thought is not None:
            out["thought"] = action.thought
        kind = action.kind
        if kind in (ActionKind.CLICK, ActionKind.LONG_PRESS, ActionKind.SWIPE):
            out["POINT"] = list(action.point or ())
            if kind == ActionKind.SWIPE:
                out["to"] = action.direction if action.direction else list(action.to or ())
            if action.duration_ms is not None:
                out["duration"] = action.duration_ms
            elif kind == ActionKind.LONG_PRESS:
                out["duration"] = 1000  # a POINT without duration would be a tap
        elif kind == ActionKind.TYPE:
            out["TYPE"] = action.text
        elif kind == ActionKind.PRESS and action.key != "menu":
            out["PRESS"] = (action.key or "").upper()
        elif kind == ActionKind.WAIT:
            out["duration"] = action.duration_ms if action.duration_ms is not None else 1000
        elif kind == ActionKind.TERMINATE:
            out["STATUS"] = "finish" if action.status == "success" else "impossible"
        else:
            what = f"press {action.key}" if kind == ActionKind.PRESS else str(kind)
            raise UnsupportedAction("unsupported_action", f"AgentCPM-GUI has no {what} action")
        return json.dumps(out, ensure_ascii=False, separators=(",", ":"))

    def represents(self, action: Action) -> bool:
        """True when format() then parse() gives back exactly this action."""
        if action.intent is not None or action.key == "menu":
            return False
        if action.kind in (ActionKind.OPEN_APP, ActionKind.ANSWER, *DESKTOP_KINDS):
            return False
        if action.kind == ActionKind.TYPE:
            return action.point is None
        if action.kind in (ActionKind.LONG_PRESS, ActionKind.WAIT):
            return action.duration_ms is not None
        return True
