"""OSWorld's `pyautogui` action space: one step is Python code of pyautogui calls, or `WAIT`, `DONE`, `FAIL`.

OSWorld (xlang-ai/OSWorld, `mm_agents/prompts.py`, the `pyautogui` action space) runs the code a model
writes; trajforge never runs it. The parser reads the code's syntax tree and accepts only calls of
`pyautogui` functions with literal arguments (plus `import` lines and `time.sleep`), so a step is
an action, never a program: a call it does not know, a variable, or two actions in one step are a
ParseError with its reason. `moveTo(a)` then `dragTo(b)` is one drag, as UI-TARS's own converter to
OSWorld writes it (bytedance/UI-TARS `codes/ui_tars/action_parser.py`,
`parsing_response_to_pyautogui_code`). Coordinates are pixels of the screenshot as given.

Formatted, a click is `pyautogui.click(x, y)`, a double click `pyautogui.doubleClick(x, y)`, a right
click `pyautogui.rightClick(x, y)`, a hover `pyautogui.moveTo(x, y)`, a scroll `pyautogui.scroll(n)`
(positive up; `hscroll` positive right), typing `pyautogui.write('…')`, a hotkey
`pyautogui.hotkey('ctrl', 's')` and the enter key `pyautogui.press('enter')`.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from trajforge.actions.computer import desktop_states, hotkey, hotkey_keys, refuse_mobile
from trajforge.actions.model import WHEEL_CLICKS, Action, ActionKind, Screen, build_action
from trajforge.errors import ParseError, UnsupportedAction

_FENCE = re.compile(r"```(?:python|py)?\s*\n?(.*?)```", re.S)
_SPECIAL: dict[str, dict[str, Any]] = {
    "WAIT": {"kind": ActionKind.WAIT},
    "DONE": {"kind": ActionKind.TERMINATE, "status": "success"},
    "FAIL": {"kind": ActionKind.TERMINATE, "status": "failure"},
}
_POINT_CALLS = {
    "click": ActionKind.CLICK,
    "leftClick": ActionKind.CLICK,
    "doubleClick": ActionKind.DOUBLE_CLICK,
    "rightClick": ActionKind.RIGHT_CLICK,
    "moveTo": ActionKind.HOVER,
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _literal(node: ast.expr, raw: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError as exc:
        raise ParseError("invalid_call", "pyautogui arguments must be literals", raw) from exc


def _calls(code: str, raw: str) -> list[tuple[str, list[Any], dict[str, Any]]]:
    """(function, args, kwargs) of each `pyautogui.f(...)` statement; imports and sleeps skipped."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError) as exc:
        raise ParseError("invalid_call", f"not Python code: {exc}", raw) from exc
    out = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            continue
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
            raise ParseError("invalid_call", "a step is pyautogui calls only", raw)
        owner = call.func.value
        module = owner.id if isinstance(owner, ast.Name) else ""
        if module == "time" and call.func.attr == "sleep":
            continue
        if module != "pyautogui":
            raise ParseError(
                "unknown_action", f"{module or '?'}.{call.func.attr} is not a pyautogui call", raw
            )
        kwargs = {kw.arg: _literal(kw.value, raw) for kw in call.keywords if kw.arg is not None}
        out.append((call.func.attr, [_literal(a, raw) for a in call.args], kwargs))
    return out


class PyAutoGUICodec:
    """OSWorld's `pyautogui` action space (pixels of the screenshot as given)."""

    name = "pyautogui"
    notes: tuple[str, ...] = ()

    def parse(self, text: str, screen: Screen) -> Action:
        fenced = _FENCE.search(text)
        code = (fenced[1] if fenced else text).strip()
        if code in _SPECIAL:
            return build_action(text, **_SPECIAL[code])
        if not code:
            raise ParseError("empty_output", "no code", text)
        calls = _calls(code, text)
        if [c[0] for c in calls[:2]] == ["moveTo", "dragTo"] and len(calls) == 2:
            start = self._point(calls[0], screen, text)
            return build_action(
                text, kind=ActionKind.DRAG, point=start, to=self._point(calls[1], screen, text)
            )
        if len(calls) != 1:
            raise ParseError("multiple_actions", f"{len(calls)} pyautogui calls; a step is one action", text)
        return self._action(calls[0], screen, text)

    def _point(
        self, call: tuple[str, list[Any], dict[str, Any]], screen: Screen, raw: str
    ) -> tuple[int, int]:
        name, args, kwargs = call
        if len(args) == 1 and isinstance(args[0], list | tuple):
            args = list(args[0])
        x: Any = args[0] if len(args) > 0 else kwargs.get("x")
        y: Any = args[1] if len(args) > 1 else kwargs.get("y")
        if not (_number(x) and _number(y)):
            raise ParseError("missing_field", f"pyautogui.{name} needs x and y", raw)
        return screen.from_px(x, y, raw)

    def _action(self, call: tuple[str, list[Any], dict[str, Any]], screen: Screen, raw: str) -> Action:
        name, args, kwargs = call
        if name in _POINT_CALLS:
            kind = _POINT_CALLS[name]
            if name == "click" and kwargs.get("button") == "right":
                kind = ActionKind.RIGHT_CLICK
            elif name == "click" and kwargs.get("clicks") == 2:
                kind = ActionKind.DOUBLE_CLICK
            return build_action(raw, kind=kind, point=self._point(call, screen, raw))
        if name == "dragTo":
            return build_action(raw, kind=ActionKind.DRAG, to=self._point(call, screen, raw))
        if name in ("scroll", "hscroll"):
            clicks = args[0] if args else kwargs.get("clicks")
            if not isinstance(clicks, int | float) or isinstance(clicks, bool) or round(clicks) == 0:
                raise ParseError("bad_value", f"pyautogui.{name} needs a non-zero number of clicks", raw)
            ways = ("up", "down") if name == "scroll" else ("right", "left")
            at = (
                self._point((name, args[1:], kwargs), screen, raw) if "x" in kwargs or len(args) > 2 else None
            )
            direction = ways[0] if clicks > 0 else ways[1]
            return build_action(
                raw,
                kind=ActionKind.SCROLL,
                direction=direction,
                amount=min(100, abs(round(clicks))),
                point=at,
            )
        if name in ("write", "typewrite"):
            text = args[0] if args else kwargs.get("message")
            if not isinstance(text, str):
                raise ParseError("missing_field", f"pyautogui.{name} needs the text", raw)
            return build_action(raw, kind=ActionKind.TYPE, text=text)
        if name in ("press", "hotkey"):
            keys = args[0] if name == "press" and args and isinstance(args[0], list) else args
            if not keys or not all(isinstance(k, str) for k in keys):
                raise ParseError("missing_field", f"pyautogui.{name} needs key names", raw)
            return hotkey(list(keys), raw)
        raise ParseError("unknown_action", f"pyautogui.{name} is not an action trajforge records", raw)

    def format(self, action: Action, screen: Screen) -> str:
        refuse_mobile(action, "pyautogui")
        kind = action.kind

        def xy(point: tuple[int, int] | None) -> str:
            assert point is not None
            return "{}, {}".format(*screen.to_px(point))

        names = {v: k for k, v in _POINT_CALLS.items() if k != "leftClick"}
        if kind in names:
            return f"pyautogui.{names[kind]}({xy(action.point)})"
        if kind == ActionKind.DRAG:
            drag = f"pyautogui.dragTo({xy(action.to)}, duration=1.0)"
            return f"pyautogui.moveTo({xy(action.point)})\n{drag}" if action.point is not None else drag
        if kind == ActionKind.SCROLL:
            clicks = action.amount or WHEEL_CLICKS
            sign = 1 if action.direction in ("up", "right") else -1
            name = "scroll" if action.direction in ("up", "down") else "hscroll"
            at = ", x={}, y={}".format(*screen.to_px(action.point)) if action.point is not None else ""
            return f"pyautogui.{name}({sign * clicks}{at})"
        if kind == ActionKind.TYPE:
            return f"pyautogui.write({action.text!r})"
        if kind in (ActionKind.HOTKEY, ActionKind.PRESS):
            keys = hotkey_keys(action)
            return (
                f"pyautogui.press({keys[0]!r})"
                if len(keys) == 1
                else f"pyautogui.hotkey({', '.join(map(repr, keys))})"
            )
        if kind == ActionKind.WAIT:
            return "WAIT"
        if kind == ActionKind.TERMINATE:
            return "DONE" if action.status == "success" else "FAIL"
        raise UnsupportedAction("unsupported_action", f"pyautogui has no {kind} action")

    def represents(self, action: Action) -> bool:
        kind = action.kind
        if action.thought is not None or action.intent is not None or kind == ActionKind.ANSWER:
            return False
        if kind == ActionKind.SCROLL:
            return action.amount is not None
        if kind == ActionKind.WAIT:
            return action.duration_ms is None
        return desktop_states(action)
