"""Desktop action formats of the model families: Qwen2.5-VL's `computer_use` and UI-TARS-1.5's computer
actions. A phone's action (back, home, a long press, a swipe, an app launch) is refused by both: a
ParseError `mobile_action` on the model's answer, UnsupportedAction on a recorded action.

`computer_use`: QwenLM/Qwen2.5-VL `cookbooks/utils/agent_function_call.py` (`ComputerUse`), called as
the Qwen2.5-VL chat template renders a tool call, with pixels of the image after smart resize. Its
`left_click_drag` drags from where the pointer is to `coordinate`; its `scroll` turns the wheel by
`pixels` (positive up) where the pointer is; its `key` presses `keys` together.

`uitars15-computer`: bytedance/UI-TARS `codes/ui_tars/prompt.py` (`COMPUTER_USE_DOUBAO`): `click`,
`left_double`, `right_single`, `drag`, `hotkey(key='ctrl c')` (keys split by a space), `type`,
`scroll(point, direction)` (the direction shows more on that side: the wheel's sense), `wait` and
`finished`; pixels of the image after UI-TARS-1.5's smart resize. Calls are written as `uitars15`
writes them (`start_box='(x,y)'`), which `codes/ui_tars/action_parser.py` reads.
"""

from __future__ import annotations

import json
from typing import Any

from trajforge.actions.model import (
    HOTKEY,
    MOBILE_KEYS,
    WHEEL_CLICKS,
    Action,
    ActionKind,
    Screen,
    build_action,
    number_pair,
    require_str,
    survives_markup,
)
from trajforge.actions.qwen import QwenCodec, tool_arguments, tool_call_body
from trajforge.actions.uitars import UITarsCodec
from trajforge.errors import ParseError, UnsupportedAction

TOOL_NAME = "computer_use"
MOBILE_NAMES = {"long_press", "swipe", "system_button", "open", "press_back", "press_home", "open_app"}
_CLICKS = {
    "left_click": ActionKind.CLICK,
    "double_click": ActionKind.DOUBLE_CLICK,
    "right_click": ActionKind.RIGHT_CLICK,
    "mouse_move": ActionKind.HOVER,
}
_CLICK_NAMES = {kind: name for name, kind in _CLICKS.items()}
ENTER = {"enter", "return"}


def refuse_mobile(action: Action, family: str) -> None:
    """A desktop's format cannot state a phone's action: UnsupportedAction naming it."""
    mobile = action.kind in (ActionKind.LONG_PRESS, ActionKind.SWIPE, ActionKind.OPEN_APP)
    if mobile or (action.kind == ActionKind.PRESS and action.key in MOBILE_KEYS):
        what = f"{action.key} key" if action.kind == ActionKind.PRESS else f"{action.kind} action"
        raise UnsupportedAction("mobile_action", f"{family} has no {what} (a phone's)")


def desktop_states(action: Action) -> bool:
    """Whether a desktop format states `action` as it is: none states a phone's action, a press
    other than enter, or typing at a point (the formats type where the focus is)."""
    kind = action.kind
    if kind in (ActionKind.LONG_PRESS, ActionKind.SWIPE, ActionKind.OPEN_APP):
        return False
    if kind == ActionKind.PRESS:
        return action.key == "enter"
    return not (kind == ActionKind.TYPE and action.point is not None)


def hotkey(keys: list[str], raw: str) -> Action:
    """The action of keys pressed together: `enter` alone is the enter key, anything else a hotkey."""
    names = [k.strip().lower() for k in keys if k.strip()]
    if names and names[0] in ENTER and len(names) == 1:
        return Action(kind=ActionKind.PRESS, key="enter")
    text = "+".join(names)
    if not HOTKEY.match(text):
        raise ParseError("unsupported_key", f"keys {keys!r} are not key names", raw)
    return Action(kind=ActionKind.HOTKEY, text=text)


def hotkey_keys(action: Action) -> list[str]:
    """The keys of a hotkey or of the enter key, in the order they are pressed."""
    return ["enter"] if action.kind == ActionKind.PRESS else (action.text or "").split("+")


class ComputerUseCodec(QwenCodec):
    """Qwen2.5-VL `computer_use` tool calls; an optional <think> block is the thought."""

    name = "computer_use"

    def parse(self, text: str, screen: Screen) -> Action:
        body = tool_call_body(text)
        think = self._THINK.search(text)
        thought = think[1].strip() if think else None
        args = tool_arguments(text if body is None else body, TOOL_NAME, text)
        return self._action(args, screen, text).model_copy(update={"thought": thought})

    def _action(self, args: dict[str, Any], screen: Screen, raw: str) -> Action:
        action = args.get("action")

        def point(required: bool = True) -> tuple[int, int] | None:
            if "coordinate" not in args:
                if required:
                    raise ParseError("missing_field", f"{action} needs 'coordinate'", raw)
                return None
            return screen.from_px(*number_pair(args["coordinate"], raw, "coordinate"), raw)

        if action in _CLICKS:
            return build_action(raw, kind=_CLICKS[action], point=point())
        if action == "left_click_drag":
            return build_action(raw, kind=ActionKind.DRAG, to=point())
        if action == "scroll":
            pixels = args.get("pixels")
            if not isinstance(pixels, int | float) or isinstance(pixels, bool) or round(pixels) == 0:
                raise ParseError(
                    "bad_value", f"scroll 'pixels' must be a non-zero number, got {pixels!r}", raw
                )
            direction = "up" if pixels > 0 else "down"
            return build_action(
                raw,
                kind=ActionKind.SCROLL,
                direction=direction,
                amount=min(100, abs(round(pixels))),
                point=point(False),
            )
        if action == "key":
            keys = args.get("keys")
            if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
                raise ParseError("missing_field", "key needs 'keys', a list of key names", raw)
            return hotkey(keys, raw)
        if action == "type":
            return build_action(raw, kind=ActionKind.TYPE, text=require_str(args, "text", raw))
        if action == "wait":
            seconds = args.get("time")
            ms = round(seconds * 1000) if isinstance(seconds, int | float) and seconds >= 0 else None
            return build_action(raw, kind=ActionKind.WAIT, duration_ms=ms)
        if action == "terminate":
            status = require_str(args, "status", raw).lower()
            if status not in ("success", "failure"):
                raise ParseError("bad_value", f"terminate status {status!r}; known: success, failure", raw)
            return build_action(raw, kind=ActionKind.TERMINATE, status=status)
        if action in MOBILE_NAMES:
            raise ParseError("mobile_action", f"computer_use has no {action!r} (a phone's action)", raw)
        raise ParseError("unknown_action", f"computer_use action {action!r}", raw)

    def format(self, action: Action, screen: Screen) -> str:
        think = f"<think>{action.thought}</think>\n" if action.thought is not None else ""
        body = json.dumps({"name": TOOL_NAME, "arguments": self._args(action, screen)}, ensure_ascii=False)
        return f"{think}<tool_call>\n{body}\n</tool_call>"

    def _args(self, action: Action, screen: Screen) -> dict[str, Any]:
        refuse_mobile(action, "Qwen2.5-VL computer_use")
        kind = action.kind
        if kind in _CLICK_NAMES:
            assert action.point is not None
            return {"action": _CLICK_NAMES[kind], "coordinate": list(screen.to_px(action.point))}
        if kind == ActionKind.DRAG:
            if action.point is not None:
                raise UnsupportedAction(
                    "drag_from_point", "computer_use drags only from where the pointer is"
                )
            assert action.to is not None
            return {"action": "left_click_drag", "coordinate": list(screen.to_px(action.to))}
        if kind == ActionKind.SCROLL:
            if action.direction not in ("up", "down"):
                raise UnsupportedAction("unsupported_action", "computer_use scrolls only up and down")
            clicks = action.amount or WHEEL_CLICKS
            out: dict[str, Any] = {
                "action": "scroll",
                "pixels": clicks if action.direction == "up" else -clicks,
            }
            if action.point is not None:
                out["coordinate"] = list(screen.to_px(action.point))
            return out
        if kind in (ActionKind.HOTKEY, ActionKind.PRESS):
            return {"action": "key", "keys": hotkey_keys(action)}
        if kind == ActionKind.TYPE:
            return {"action": "type", "text": action.text}
        if kind == ActionKind.WAIT:
            ms = action.duration_ms if action.duration_ms is not None else 5000
            return {"action": "wait", "time": ms // 1000 if ms % 1000 == 0 else ms / 1000}
        if kind == ActionKind.TERMINATE:
            return {"action": "terminate", "status": action.status}
        raise UnsupportedAction("unsupported_action", f"computer_use has no {kind} action")

    def represents(self, action: Action) -> bool:
        if action.intent is not None or not survives_markup(action.thought):
            return False
        kind = action.kind
        if "</tool_call>" in (action.text or "") or kind == ActionKind.ANSWER or not desktop_states(action):
            return False
        if kind == ActionKind.DRAG:
            return action.point is None
        if kind == ActionKind.SCROLL:
            return action.direction in ("up", "down") and action.amount is not None
        return kind != ActionKind.WAIT or action.duration_ms is not None


class UITarsComputerCodec(UITarsCodec):
    """UI-TARS-1.5's computer actions (pixels of the image after its smart resize)."""

    def __init__(self) -> None:
        super().__init__("uitars15-computer", absolute=True)

    def _to_action(
        self, name: str, args: dict[str, Any], raw: str, thought: str | None, screen: Screen
    ) -> Action:
        def box(key: str) -> tuple[int, int]:
            return self._box(name, args, key, raw, screen)

        f: dict[str, Any] = {"thought": thought}
        if name in ("left_double", "right_single", "hover"):
            kinds = {"left_double": ActionKind.DOUBLE_CLICK, "right_single": ActionKind.RIGHT_CLICK}
            f.update(kind=kinds.get(name, ActionKind.HOVER), point=box("start_box"))
        elif name == "left_single":
            f.update(kind=ActionKind.CLICK, point=box("start_box"))
        elif name == "drag":
            f.update(kind=ActionKind.DRAG, point=box("start_box"), to=box("end_box"))
        elif name == "scroll":
            direction = str(args.get("direction", "")).lower()
            if direction not in ("up", "down", "left", "right"):
                raise ParseError("bad_value", f"scroll direction {args.get('direction')!r}", raw)
            point = box("start_box") if "start_box" in args else None
            f.update(kind=ActionKind.SCROLL, direction=direction, point=point)
        elif name == "hotkey":
            keys = str(args.get("key", args.get("hotkey", ""))).split()
            return hotkey(keys, raw).model_copy(update={"thought": thought})
        elif name in MOBILE_NAMES or name == "long_press":
            raise ParseError("mobile_action", f"UI-TARS computer has no {name!r} (a phone's action)", raw)
        else:
            return super()._to_action(name, args, raw, thought, screen)
        return build_action(raw, **f)

    def _call(self, action: Action, screen: Screen) -> str:
        refuse_mobile(action, "UI-TARS computer")

        def pt(p: tuple[int, int] | None) -> str:
            assert p is not None
            return repr("({},{})".format(*screen.to_px(p)))

        kind = action.kind
        if kind == ActionKind.DOUBLE_CLICK:
            return f"left_double(start_box={pt(action.point)})"
        if kind == ActionKind.RIGHT_CLICK:
            return f"right_single(start_box={pt(action.point)})"
        if kind == ActionKind.HOVER:
            return f"hover(start_box={pt(action.point)})"
        if kind == ActionKind.DRAG:
            if action.point is None:
                raise UnsupportedAction("drag_without_start", "UI-TARS drags from a start point it names")
            return f"drag(start_box={pt(action.point)}, end_box={pt(action.to)})"
        if kind == ActionKind.SCROLL:
            at = f"start_box={pt(action.point)}, " if action.point is not None else ""
            return f"scroll({at}direction='{action.direction}')"
        if kind in (ActionKind.HOTKEY, ActionKind.PRESS):
            return f"hotkey(key={' '.join(hotkey_keys(action))!r})"
        return super()._call(action, screen)

    def represents(self, action: Action) -> bool:
        kind = action.kind
        if (
            action.intent is not None
            or not survives_markup(action.thought)
            or "Action: " in (action.text or "")
        ):
            return False
        if not desktop_states(action):
            return False
        if kind == ActionKind.DRAG:
            return action.point is not None
        if kind == ActionKind.SCROLL:
            return action.amount is None
        if kind == ActionKind.WAIT:
            return action.duration_ms is None
        return kind != ActionKind.ANSWER or bool(action.text)
