"""GUI-Owl / Qwen `mobile_use` tool calls (seed 002 Table 9) and Mobile-R1 (seed 004).

A call is written as the Qwen2.5-VL chat template renders a tool call,
`<tool_call>\n{"name": "mobile_use", "arguments": {"action": "click", "coordinate": [x, y]}}\n</tool_call>`,
with pixel coordinates (of the image the model sees) and durations in seconds. Mobile-R1 wraps
the same call as `<think>…</think>\n<action>…</action>\n<tool_call>…</tool_call>`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from trajforge.actions.model import (
    DESKTOP_KINDS,
    Action,
    ActionKind,
    Screen,
    build_action,
    load_json_object,
    number_pair,
    refuse_desktop,
    require_str,
    survives_markup,
)
from trajforge.errors import ParseError

TOOL_NAME = "mobile_use"
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_BUTTONS = {"back": "back", "home": "home", "menu": "menu", "enter": "enter"}
_KEYCODES = {
    "KEYCODE_BACK": "back",
    "KEYCODE_HOME": "home",
    "KEYCODE_MENU": "menu",
    "KEYCODE_ENTER": "enter",
}
_STATUSES = {"success": "success", "failure": "failure", "fail": "failure"}


def tool_call_body(text: str) -> str | None:
    """The JSON of the first `<tool_call>` block: the whole object where it decodes (a typed text may
    itself hold `</tool_call>`), else up to the closing tag; None without the block."""
    match = _TOOL_CALL.search(text)
    if match is None:
        return None
    start = match.start(1)
    try:
        _, end = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError:
        return match[1]
    return text[start:end]


def _seconds_to_ms(value: Any, raw: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise ParseError("bad_value", f"'time' must be seconds >= 0, got {value!r}", raw)
    return round(value * 1000)


def _ms_to_seconds(ms: int) -> int | float:
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


def tool_arguments(body: str, tool: str, raw: str) -> dict[str, Any]:
    """The `arguments` object of one tool-call JSON body, checked to be a call of `tool`."""
    call = load_json_object(body, raw)
    name = call.get("name")
    if name != tool:
        raise ParseError("unknown_tool", f"tool {name!r}; expected {tool!r}", raw)
    args = call.get("arguments")
    if isinstance(args, str):  # some servers send arguments as a JSON string
        args = load_json_object(args, raw)
    if not isinstance(args, dict):
        raise ParseError("missing_field", "'arguments' must be an object", raw)
    return args


def parse_tool_call(body: str, screen: Screen, raw: str, **extra: str | None) -> Action:
    """The canonical action of one `mobile_use` tool-call JSON body."""
    args = tool_arguments(body, TOOL_NAME, raw)
    action = args.get("action")

    def point(key: str) -> tuple[int, int]:
        if key not in args:
            raise ParseError("missing_field", f"{action} needs {key!r}", raw)
        x, y = number_pair(args[key], raw, key)
        return screen.from_px(x, y, raw)

    fields: dict[str, Any] = dict(extra)
    if action == "click":
        fields.update(kind=ActionKind.CLICK, point=point("coordinate"))
    elif action == "long_press":
        fields.update(
            kind=ActionKind.LONG_PRESS,
            point=point("coordinate"),
            duration_ms=_seconds_to_ms(args.get("time"), raw),
        )
    elif action == "swipe":
        fields.update(kind=ActionKind.SWIPE, point=point("coordinate"), to=point("coordinate2"))
    elif action == "type":
        fields.update(kind=ActionKind.TYPE, text=require_str(args, "text", raw))
    elif action == "system_button":
        button = _BUTTONS.get(require_str(args, "button", raw).lower())
        if button is None:
            raise ParseError(
                "unsupported_key", f"button {args['button']!r}; known: Back, Home, Menu, Enter", raw
            )
        fields.update(kind=ActionKind.PRESS, key=button)
    elif action == "key":
        key = _KEYCODES.get(require_str(args, "text", raw).upper())
        if key is None:
            raise ParseError("unsupported_key", f"key {args['text']!r}; known: {', '.join(_KEYCODES)}", raw)
        fields.update(kind=ActionKind.PRESS, key=key)
    elif action == "open":
        fields.update(kind=ActionKind.OPEN_APP, text=require_str(args, "text", raw))
    elif action == "wait":
        fields.update(kind=ActionKind.WAIT, duration_ms=_seconds_to_ms(args.get("time"), raw))
    elif action == "answer":
        fields.update(kind=ActionKind.ANSWER, text=require_str(args, "text", raw))
    elif action == "terminate":
        status = _STATUSES.get(require_str(args, "status", raw).lower())
        if status is None:
            raise ParseError(
                "bad_value", f"terminate status {args['status']!r}; known: success, failure", raw
            )
        fields.update(kind=ActionKind.TERMINATE, status=status)
    else:
        raise ParseError("unknown_action", f"mobile_use action {action!r}", raw)
    return build_action(raw, **fields)


def format_tool_call(action: Action, screen: Screen) -> str:
    """The `mobile_use` tool-call JSON body of a canonical action, spaced as the chat template's `tojson`."""
    refuse_desktop(action, "Qwen2.5-VL mobile_use")
    kind = action.kind
    args: dict[str, Any] = {"action": ""}
    if kind in (ActionKind.CLICK, ActionKind.LONG_PRESS, ActionKind.SWIPE):
        assert action.point is not None
        args["action"] = str(kind)
        args["coordinate"] = list(screen.to_px(action.point))
        if kind == ActionKind.SWIPE:
            args["coordinate2"] = list(screen.to_px(action.swipe_end()))
        elif kind == ActionKind.LONG_PRESS and action.duration_ms is not None:
            args["time"] = _ms_to_seconds(action.duration_ms)
    elif kind == ActionKind.TYPE:
        args.update(action="type", text=action.text)
    elif kind == ActionKind.PRESS:
        args.update(action="system_button", button=(action.key or "").capitalize())
    elif kind == ActionKind.OPEN_APP:
        args.update(action="open", text=action.text)
    elif kind == ActionKind.WAIT:
        args["action"] = "wait"
        if action.duration_ms is not None:
            args["time"] = _ms_to_seconds(action.duration_ms)
    elif kind == ActionKind.ANSWER:
        args.update(action="answer", text=action.text)
    else:
        args.update(action="terminate", status=action.status)
    return json.dumps({"name": TOOL_NAME, "arguments": args}, ensure_ascii=False)


def tool_call_block(action: Action, screen: Screen) -> str:
    """`<tool_call>` block with the newlines of the Qwen2.5-VL chat template."""
    return f"<tool_call>\n{format_tool_call(action, screen)}\n</tool_call>"


def _tool_call_represents(action: Action) -> bool:
    if "</tool_call>" in (action.text or "") or action.kind in DESKTOP_KINDS:  # the block would end inside
        return False
    if action.kind == ActionKind.SWIPE:
        return action.to is not None and action.duration_ms is None
    return not (action.kind == ActionKind.TYPE and action.point is not None)


class QwenCodec:
    """GUI-Owl / Qwen2.5-VL `mobile_use`; an optional <think>/<thinking> block is the thought."""

    name = "qwen"
    notes: tuple[str, ...] = ("thought",)
    _THINK = re.compile(r"<think(?:ing)?>(.*?)</?think(?:ing)?>", re.S)

    def parse(self, text: str, screen: Screen) -> Action:
        body = tool_call_body(text)
        body = text if body is None else body
        think = self._THINK.search(text)
        return parse_tool_call(body, screen, text, thought=think[1].strip() if think else None)

    def format(self, action: Action, screen: Screen) -> str:
        think = f"<think>{action.thought}</think>\n" if action.thought is not None else ""
        return think + tool_call_block(action, screen)

    def represents(self, action: Action) -> bool:
        return action.intent is None and survives_markup(action.thought) and _tool_call_represents(action)


class GUIOwlCodec(QwenCodec):
    """GUI-Owl (Mobile-Agent-v3): `<thinking>`, the `mobile_use` call, then `<conclusion>`, each block on
    lines of its own, as X-PLUG/MobileAgent's `android_world_v3/.../agents/gui_owl.py` splits its answer
    (`'<thinking>\n'`, `'}}\n'`, `'<conclusion>\n'`); the conclusion is the step's intent, the history
    GUI-Owl is shown next."""

    name = "guiowl"
    notes: tuple[str, ...] = ("thought", "intent")
    _CONCLUSION = re.compile(r"<conclusion>\s*(.*?)\s*</conclusion>", re.S)

    def parse(self, text: str, screen: Screen) -> Action:
        action = super().parse(text, screen)
        found = self._CONCLUSION.search(text)
        return action.model_copy(update={"intent": found[1]}) if found else action

    def format(self, action: Action, screen: Screen) -> str:
        think = f"<thinking>\n{action.thought}\n</thinking>\n" if action.thought is not None else ""
        said = f"\n<conclusion>\n{action.intent}\n</conclusion>" if action.intent is not None else ""
        return think + tool_call_block(action, screen) + said

    def represents(self, action: Action) -> bool:
        return (
            survives_markup(action.thought)
            and survives_markup(action.intent)
            and _tool_call_represents(action)
        )


class MobileR1Codec:
    """Mobile-R1: `<think>…</think><action>…</action><tool_call>…</tool_call>`."""

    name = "mobiler1"
    notes: tuple[str, ...] = ("thought", "intent")
    required_notes = ("thought", "intent")  # the paper's three-part answer needs both
    # The paper's own example closes <think> with <think>; accept both.
    _THINK = re.compile(r"<think>(.*?)</?think>", re.S)
    _ACTION = re.compile(r"<action>(.*?)</action>", re.S)

    def parse(self, text: str, screen: Screen) -> Action:
        body = tool_call_body(text)
        if body is None:
            raise ParseError("missing_tag", "no <tool_call>…</tool_call> block", text)
        think, intent = self._THINK.search(text), self._ACTION.search(text)
        return parse_tool_call(
            body,
            screen,
            text,
            thought=think[1].strip() if think else None,
            intent=intent[1].strip() if intent else None,
        )

    def format(self, action: Action, screen: Screen) -> str:
        return (
            f"<think>{action.thought or ''}</think>\n<action>{action.intent or ''}</action>\n"
            + tool_call_block(action, screen)
        )

    def represents(self, action: Action) -> bool:
        notes = (action.thought, action.intent)
        return all(n is not None and survives_markup(n) for n in notes) and _tool_call_represents(action)
