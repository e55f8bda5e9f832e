"""The canonical action: one type for every format, coordinates normalised to 0-1000."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trajforge.errors import ConfigError, ParseError, UnsupportedAction

if sys.version_info >= (3, 11):  # noqa: UP036 (the exported reward library runs on 3.10 too)
    from enum import StrEnum
else:  # Python 3.10, verl's floor: an rl-verl export's reward library runs this module there
    from enum import Enum

    class StrEnum(str, Enum):  # noqa: UP042
        """enum.StrEnum of Python 3.11: members are their values, in str() and in f-strings."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)


Direction = Literal["up", "down", "left", "right"]
Key = Literal["back", "home", "enter", "menu"]
Status = Literal["success", "failure"]
Point = tuple[int, int]

DIRECTIONS: tuple[Direction, ...] = ("up", "down", "left", "right")
OPPOSITE: dict[Direction, Direction] = {
    "up": "down",
    "down": "up",
    "left": "right",
    "right": "left",
}
# A swipe given only by direction is drawn this far (in 0-1000 units) when a format needs
# two points; about a third of the screen, the distance android_world's scroll uses.
SWIPE_DISTANCE = 300
NORM = 1000


class ActionKind(StrEnum):
    CLICK = "click"
    LONG_PRESS = "long_press"
    SWIPE = "swipe"
    TYPE = "type"
    PRESS = "press"
    OPEN_APP = "open_app"
    WAIT = "wait"
    ANSWER = "answer"
    TERMINATE = "terminate"
    # a desktop's: a mouse and a keyboard
    DOUBLE_CLICK = "double_click"
    RIGHT_CLICK = "right_click"
    HOVER = "hover"
    DRAG = "drag"
    SCROLL = "scroll"
    HOTKEY = "hotkey"


# The kinds only a desktop has (a phone's codecs refuse them), and those only a phone has.
DESKTOP_KINDS = frozenset(
    {
        ActionKind.DOUBLE_CLICK,
        ActionKind.RIGHT_CLICK,
        ActionKind.HOVER,
        ActionKind.DRAG,
        ActionKind.SCROLL,
        ActionKind.HOTKEY,
    }
)
MOBILE_KEYS = frozenset({"back", "home", "menu"})
# The kinds that act at one point: checked by whether that point lands on the same element.
POINTED_KINDS = (
    ActionKind.CLICK,
    ActionKind.LONG_PRESS,
    ActionKind.DOUBLE_CLICK,
    ActionKind.RIGHT_CLICK,
    ActionKind.HOVER,
)
# A hotkey: key names joined by "+", lower case (`ctrl+s`, `ctrl+shift+t`, `f5`, `enter`).
HOTKEY = re.compile(r"^[a-z0-9_\[\];',./`=-]+(?:\+[a-z0-9_\[\];',./`=-]+)*$")
WHEEL_CLICKS = 5  # a scroll with no amount turns the wheel this far, as UI-TARS's pyautogui code does


# Which optional fields each kind requires (r) and allows (a).
_FIELDS: dict[ActionKind, tuple[set[str], set[str]]] = {
    ActionKind.CLICK: ({"point"}, set()),
    ActionKind.LONG_PRESS: ({"point"}, {"duration_ms"}),
    ActionKind.SWIPE: ({"point"}, {"to", "direction", "duration_ms"}),
    ActionKind.TYPE: ({"text"}, {"point"}),
    ActionKind.PRESS: ({"key"}, set()),
    ActionKind.OPEN_APP: ({"text"}, set()),
    ActionKind.WAIT: (set(), {"duration_ms"}),
    ActionKind.ANSWER: ({"text"}, set()),
    ActionKind.TERMINATE: ({"status"}, set()),
    ActionKind.DOUBLE_CLICK: ({"point"}, set()),
    ActionKind.RIGHT_CLICK: ({"point"}, set()),
    ActionKind.HOVER: ({"point"}, set()),
    ActionKind.DRAG: ({"to"}, {"point"}),
    ActionKind.SCROLL: ({"direction"}, {"point", "amount"}),
    ActionKind.HOTKEY: ({"text"}, set()),
}
_PAYLOAD = ("point", "to", "direction", "text", "key", "duration_ms", "status", "amount")


class Action(BaseModel):
    """One GUI action.

    `point`/`to` are (x, y) in 0-1000 with (0, 0) top-left. A swipe has a start
    `point` and either an end point `to` or a finger `direction` (the way the finger
    moves: "up" reveals content further down). A `type` may carry the `point` of the
    field to focus first. `thought` and `intent` are the reasoning and the
    natural-language action that formats such as Mobile-R1 carry beside the call.

    A desktop adds a mouse and a keyboard: `double_click`, `right_click` and `hover` (move the
    pointer) at a `point`; `drag` to `to` with the left button held, from `point` (default: where
    the pointer is); `scroll` turns the wheel `amount` clicks (default WHEEL_CLICKS) at `point`
    (default: where the pointer is), its `direction` the way the view moves ("down" shows what is
    further down: the wheel's sense, not a finger's); `hotkey` presses `text`, key names joined by
    "+" (`ctrl+s`); the enter key alone is `press` `enter`, never a hotkey.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ActionKind
    point: Point | None = None
    to: Point | None = None
    direction: Direction | None = None
    text: str | None = None
    key: Key | None = None
    duration_ms: int | None = Field(None, ge=0, le=600_000)
    status: Status | None = None
    amount: int | None = Field(None, ge=1, le=100)
    thought: str | None = None
    intent: str | None = None

    @model_validator(mode="after")
    def _check_fields(self) -> Action:
        required, allowed = _FIELDS[self.kind]
        present = {name for name in _PAYLOAD if getattr(self, name) is not None}
        missing = required - present
        if missing:
            raise ValueError(f"{self.kind} needs {', '.join(sorted(missing))}")
        extra = present - required - allowed
        if extra:
            raise ValueError(f"{self.kind} does not take {', '.join(sorted(extra))}")
        if self.kind == ActionKind.SWIPE and (self.to is None) == (self.direction is None):
            raise ValueError("swipe needs exactly one of 'to' (end point) or 'direction'")
        if self.kind == ActionKind.HOTKEY and not HOTKEY.match(self.text or ""):
            raise ValueError(f"hotkey {self.text!r}: write key names joined by '+', lower case, e.g. ctrl+s")
        if self.kind == ActionKind.HOTKEY and self.text in ("enter", "return"):
            raise ValueError("the enter key alone is kind 'press' with key 'enter', not a hotkey")
        for name in ("point", "to"):
            value = getattr(self, name)
            if value is not None and not all(0 <= c <= NORM for c in value):
                raise ValueError(f"{name} {value} is outside 0-{NORM}")
        return self

    def core(self) -> Action:
        """The action without thought/intent, for comparing what is done, not why."""
        return self.model_copy(update={"thought": None, "intent": None})

    def swipe_end(self) -> Point:
        """End point of a swipe, drawn SWIPE_DISTANCE along `direction` when only that is known."""
        assert self.kind == ActionKind.SWIPE and self.point is not None
        if self.to is not None:
            return self.to
        x, y = self.point
        dx, dy = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}[self.direction or "up"]
        return (_clamp(x + dx * SWIPE_DISTANCE), _clamp(y + dy * SWIPE_DISTANCE))

    def swipe_direction(self) -> Direction:
        """Finger direction of a swipe; for two points, the dominant axis of the move."""
        assert self.kind == ActionKind.SWIPE and self.point is not None
        if self.direction is not None:
            return self.direction
        assert self.to is not None
        dx, dy = self.to[0] - self.point[0], self.to[1] - self.point[1]
        if abs(dx) > abs(dy):
            return "right" if dx > 0 else "left"
        return "down" if dy > 0 else "up"

    def stored(self) -> dict[str, Any]:
        """The action as it is stored (a step's `action` column, a sample's target): its JSON
        fields, unset ones left out."""
        return self.model_dump(mode="json", exclude_none=True)

    def to_json(self) -> str:
        """Compact canonical JSON (the `canonical` format)."""
        return json.dumps(self.stored(), ensure_ascii=False, separators=(",", ":"))


def _clamp(value: int) -> int:
    return max(0, min(NORM, value))


def survives_markup(note: str | None) -> bool:
    """True when a thought/intent text comes back unchanged from a tagged format.

    Parsers strip surrounding whitespace and stop at the next tag, so a note with
    either does not round-trip exactly.
    """
    return note is None or (note != "" and note == note.strip() and "<" not in note and "Action:" not in note)


def refuse_desktop(action: Action, family: str) -> None:
    """A phone's format cannot state a desktop's action: UnsupportedAction naming it."""
    if action.kind in DESKTOP_KINDS:
        raise UnsupportedAction("desktop_action", f"{family} has no {action.kind} action (a desktop's)")


def build_action(raw: str, **fields: Any) -> Action:
    """Construct an Action from parsed fields; invalid combinations become a ParseError."""
    try:
        return Action(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = first["msg"].removeprefix("Value error, ")
        raise ParseError("invalid_action", f"{where + ': ' if where else ''}{msg}", raw) from exc


MAX_SCREEN_SIDE = 32_768  # an 8K display is 7680 wide; a phone's long side 3200


@dataclass(frozen=True)
class Screen:
    """A screen size in pixels, for formats that speak pixels."""

    width: int
    height: int

    def __post_init__(self) -> None:
        if self.width < 2 or self.height < 2:
            raise ConfigError(f"screen {self.width}x{self.height} is too small; give WxH in pixels")
        if max(self.width, self.height) > MAX_SCREEN_SIDE:
            raise ConfigError(
                f"screen {self.width}x{self.height} is over {MAX_SCREEN_SIDE} pixels on a side; "
                "give WxH in pixels"
            )

    @classmethod
    def parse(cls, text: str) -> Screen:
        """Parse 'WxH' (e.g. 1080x2400)."""
        match = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
        if not match:
            raise ConfigError(f"screen {text!r} is not WxH; write it like 1080x2400")
        return cls(int(match[1]), int(match[2]))

    # (W-1) scaling keeps 1000 on-screen and makes norm->px->norm exact when W >= 1001.
    def to_px(self, point: Point) -> Point:
        x, y = point
        return (round(x * (self.width - 1) / NORM), round(y * (self.height - 1) / NORM))

    def from_px(self, x: float, y: float, raw: str = "") -> Point:
        """Pixels to 0-1000; a point off the screen is a ParseError."""
        if not (0 <= x <= self.width and 0 <= y <= self.height):
            raise ParseError(
                "coordinate_out_of_screen",
                f"pixel ({x:g}, {y:g}) is outside the {self.width}x{self.height} screen",
                raw,
            )
        return (
            _clamp(round(x * NORM / (self.width - 1))),
            _clamp(round(y * NORM / (self.height - 1))),
        )


DEFAULT_SCREEN = Screen(1080, 2400)


def norm_point(value: Any, raw: str, name: str = "point") -> Point:
    """A [x, y] pair in 0-1000 from parsed JSON."""
    x, y = number_pair(value, raw, name)
    if not (0 <= x <= NORM and 0 <= y <= NORM):
        raise ParseError("coordinate_out_of_range", f"{name} ({x:g}, {y:g}) is outside 0-{NORM}", raw)
    return (round(x), round(y))


def number_pair(value: Any, raw: str, name: str) -> tuple[float, float]:
    """Two numbers from a parsed JSON list/tuple, or a ParseError naming the field."""
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        return (float(value[0]), float(value[1]))
    raise ParseError("bad_coordinate", f"{name} must be [x, y] numbers, got {value!r}", raw)


def load_json_object(text: str, raw: str) -> dict[str, Any]:
    """Parse a JSON object, forgiving surrounding whitespace and ``` fences."""
    body = text.strip()
    fence = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", body, re.S)
    if fence:
        body = fence[1]
    if not body:
        raise ParseError("empty_output", "no action text", raw)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ParseError("invalid_json", f"{exc.msg} at char {exc.pos}", raw) from exc
    if not isinstance(data, dict):
        raise ParseError("invalid_json", f"expected a JSON object, got {type(data).__name__}", raw)
    return data


def require_str(data: dict[str, Any], key: str, raw: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        reason = "missing_field" if value is None else "bad_value"
        raise ParseError(reason, f"{key!r} must be a string, got {value!r}", raw)
    return value
