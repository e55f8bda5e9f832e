"""UI-TARS mobile actions: `Thought: …\nAction: click(start_box='(x,y)')`.

`uitars` speaks 0-1000 relative coordinates, as UI-TARS-1 and AgentCPM-GUI's evaluation
(seed 000 Table 9) use them; `uitars15` speaks pixels of the image the model sees, as
UI-TARS-1.5 does. `<|box_start|>(x,y)<|box_end|>` and four-number boxes (taken at their
centre) are accepted. `scroll(direction=…)` names where the content goes, so the
canonical finger direction is the opposite (seed 000 §B.2.2). Output always carries
`Action:`, which the official `ui-tars` parser requires; a bare call is still parsed.

UI-TARS-1.5's published action space (bytedance/UI-TARS, `codes/ui_tars/prompt.py`) writes points
as `point='<point>x y</point>'` and a drag as `start_point=`/`end_point=`; its parser
(`codes/ui_tars/action_parser.py`, `parse_action_to_structure_output`) reads them as `start_box`
and `end_box`, and so does this one. `finished(content='…')` submits the task with its answer:
the answer is recorded and the episode ends (`final_answer`), as the model was trained to expect.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from trajforge.actions.model import (
    DESKTOP_KINDS,
    NORM,
    OPPOSITE,
    Action,
    ActionKind,
    Direction,
    Screen,
    build_action,
    refuse_desktop,
    survives_markup,
)
from trajforge.errors import ParseError, UnsupportedAction

_ACTION_AT = re.compile(r"(?:^|(?<=\s))Action:")
_THOUGHT_PART = re.compile(r"^\s*Thought:\s*(.*?)\s*$", re.S)  # on the text before the action
_BARE_CALL = re.compile(r"^\s*[A-Za-z_]\w*\(")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_HOTKEYS = {"enter": "enter", "back": "back", "home": "home", "menu": "menu"}
# UI-TARS-1.5's point arguments, under the names its own parser turns them into.
_POINT_ALIASES = {"point": "start_box", "start_point": "start_box", "end_point": "end_box"}


def _action_part(text: str) -> tuple[int, str] | None:
    """(where, the call) of the `Action:` that starts the call. The thought, or a typed text,
    may say "Action:" too: the last one whose remainder is a call wins, else the first (which
    then fails to parse with the reason)."""
    found = [(m.start(), text[m.end() :].strip()) for m in _ACTION_AT.finditer(text)]
    for start, call in reversed(found):
        try:
            if isinstance(ast.parse(call, mode="eval").body, ast.Call):
                return start, call
        except (SyntaxError, ValueError):  # ValueError: null bytes, or bytes that were not UTF-8
            continue
    return found[0] if found else None


class UITarsCodec:
    notes: tuple[str, ...] = ("thought",)
    final_answer = True  # `finished(content=…)` answers and ends the episode in one action

    def __init__(self, name: str = "uitars", absolute: bool = False) -> None:
        self.name, self.absolute = name, absolute

    def parse(self, text: str, screen: Screen) -> Action:
        # A bare call may itself contain "Action:" inside a string argument.
        action_part = None if _BARE_CALL.match(text) else _action_part(text)
        call_text = (action_part[1] if action_part else text).strip()
        thought_match = _THOUGHT_PART.match(text[: action_part[0]]) if action_part else None
        thought = thought_match[1] if thought_match else None
        if not call_text:
            raise ParseError("empty_output", "no action call", text)
        try:
            tree = ast.parse(call_text, mode="eval").body
        except SyntaxError as exc:
            raise ParseError("invalid_call", f"not a function call: {exc.msg}", text) from exc
        except UnicodeEncodeError as exc:  # bytes that were not UTF-8, read as lone surrogates
            raise ParseError(
                "invalid_call", "not a function call: the text is not valid UTF-8", text
            ) from exc
        except ValueError as exc:  # a null byte
            raise ParseError("invalid_call", f"not a function call: {exc}", text) from exc
        if not isinstance(tree, ast.Call) or not isinstance(tree.func, ast.Name) or tree.args:
            raise ParseError("invalid_call", "expected name(key='value', ...)", text)
        args: dict[str, Any] = {}
        for kw in tree.keywords:
            if kw.arg is None or not isinstance(kw.value, ast.Constant):
                raise ParseError("invalid_call", "arguments must be key='literal'", text)
            args[_POINT_ALIASES.get(kw.arg, kw.arg)] = kw.value.value
        return self._to_action(tree.func.id, args, text, thought, screen)

    def _box(self, name: str, args: dict[str, Any], key: str, raw: str, screen: Screen) -> tuple[int, int]:
        """A point argument, per mille: "(x,y)" or a box's centre "(x1,y1,x2,y2)"."""
        if key not in args:
            raise ParseError("missing_field", f"{name} needs {key!r}", raw)
        nums = [float(n) for n in _NUMBER.findall(str(args[key]))]
        if len(nums) == 4:
            nums = [(nums[0] + nums[2]) / 2, (nums[1] + nums[3]) / 2]
        if len(nums) != 2:
            raise ParseError("bad_coordinate", f"{key}={args[key]!r} is not (x,y) or (x1,y1,x2,y2)", raw)
        if self.absolute:
            return screen.from_px(nums[0], nums[1], raw)
        if not all(0 <= n <= NORM for n in nums):
            raise ParseError("coordinate_out_of_range", f"{key}={args[key]!r} is outside 0-{NORM}", raw)
        return (round(nums[0]), round(nums[1]))

    def _to_action(
        self, name: str, args: dict[str, Any], raw: str, thought: str | None, screen: Screen
    ) -> Action:
        def box(key: str) -> tuple[int, int]:
            return self._box(name, args, key, raw, screen)

        def text_arg(key: str) -> str:
            value = args.get(key)
            if not isinstance(value, str):
                raise ParseError("missing_field", f"{name} needs {key}='…'", raw)
            return value

        f: dict[str, Any] = {"thought": thought}
        if name == "click":
            f.update(kind=ActionKind.CLICK, point=box("start_box"))
        elif name == "long_press":
            f.update(
                kind=ActionKind.LONG_PRESS, point=box("start_box"), duration_ms=_ms(args.get("time"), raw)
            )
        elif name == "type":
            f.update(kind=ActionKind.TYPE, text=text_arg("content"))
        elif name == "scroll":
            start = box("start_box") if "start_box" in args else (500, 500)
            f.update(kind=ActionKind.SWIPE, point=start, direction=_finger(args.get("direction"), raw))
        elif name == "drag":
            f.update(kind=ActionKind.SWIPE, point=box("start_box"), to=box("end_box"))
        elif name in ("press_back", "press_home"):
            f.update(kind=ActionKind.PRESS, key=name.removeprefix("press_"))
        elif name == "hotkey":
            key = _HOTKEYS.get(str(args.get("key", "")).lower())
            if key is None:
                raise ParseError("unsupported_key", f"hotkey {args.get('key')!r}", raw)
            f.update(kind=ActionKind.PRESS, key=key)
        elif name == "open_app":
            f.update(kind=ActionKind.OPEN_APP, text=text_arg("app_name"))
        elif name == "wait":
            f.update(kind=ActionKind.WAIT)
        elif name == "finished":
            content = args.get("content")
            if content:
                f.update(kind=ActionKind.ANSWER, text=str(content))
            else:
                f.update(kind=ActionKind.TERMINATE, status="success")
        elif name == "call_user":
            f.update(kind=ActionKind.TERMINATE, status="failure")
        else:
            raise ParseError("unknown_action", f"UI-TARS action {name!r}", raw)
        return build_action(raw, **f)

    def format(self, action: Action, screen: Screen) -> str:
        call = self._call(action, screen)
        thought = f"Thought: {action.thought}\n" if action.thought is not None else ""
        return f"{thought}Action: {call}"

    def _call(self, action: Action, screen: Screen) -> str:
        refuse_desktop(action, "UI-TARS mobile")

        def pt(p: tuple[int, int] | None) -> str:
            assert p is not None
            x, y = screen.to_px(p) if self.absolute else p
            return repr(f"({x},{y})")

        kind = action.kind
        if kind == ActionKind.CLICK:
            return f"click(start_box={pt(action.point)})"
        if kind == ActionKind.LONG_PRESS:
            time = f", time='{action.duration_ms}'" if action.duration_ms is not None else ""
            return f"long_press(start_box={pt(action.point)}{time})"
        if kind == ActionKind.SWIPE:
            if action.to is not None:
                return f"drag(start_box={pt(action.point)}, end_box={pt(action.to)})"
            content_dir = OPPOSITE[action.swipe_direction()]
            return f"scroll(start_box={pt(action.point)}, direction='{content_dir}')"
        if kind == ActionKind.TYPE:
            return f"type(content={action.text!r})"
        if kind == ActionKind.PRESS:
            if action.key not in ("back", "home"):  # hotkey() is desktop-only in UI-TARS
                raise UnsupportedAction("unsupported_action", f"UI-TARS mobile has no {action.key} key")
            return f"press_{action.key}()"
        if kind == ActionKind.OPEN_APP:
            return f"open_app(app_name={action.text!r})"
        if kind == ActionKind.WAIT:
            return "wait()"
        if kind == ActionKind.ANSWER:
            return f"finished(content={action.text!r})"
        return "finished()" if action.status == "success" else "call_user()"

    def represents(self, action: Action) -> bool:
        if action.intent is not None or not survives_markup(action.thought):
            return False
        if "Action: " in (action.text or "") or action.kind in DESKTOP_KINDS:  # the parser splits on it
            return False
        if action.kind == ActionKind.PRESS:
            return action.key in ("back", "home")
        if action.kind == ActionKind.WAIT:
            return action.duration_ms is None
        if action.kind == ActionKind.ANSWER:
            return bool(action.text)
        if action.kind == ActionKind.SWIPE:
            return action.duration_ms is None
        return not (action.kind == ActionKind.TYPE and action.point is not None)


def _ms(time: Any, raw: str) -> int | None:
    """A long press's `time` argument in milliseconds (None: not given)."""
    if time in (None, ""):
        return None
    try:
        return int(float(str(time)))
    except ValueError as exc:
        raise ParseError("bad_value", f"time={time!r} is not milliseconds", raw) from exc


def _finger(direction: Any, raw: str) -> Direction:
    """The way the finger moves for a scroll of the content toward `direction`."""
    content_dir = str(direction or "").lower()
    if content_dir not in OPPOSITE:
        raise ParseError("bad_value", f"scroll direction {direction!r}", raw)
    finger: Direction = OPPOSITE[content_dir]
    return finger
