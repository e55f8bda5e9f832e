"""The policy protocol: given the task and what the device shows, say the next action as text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from trajforge.actions import Action, ActionCodec, ActionKind, Screen, get_codec
from trajforge.actions.model import OPPOSITE
from trajforge.domain import Observation, Query

# The format the built-in policies speak on a desktop: a phone's format cannot state a desktop's
# actions (a scroll, a hotkey), and the runner parses what a policy says in the format it names.
DESKTOP_FORMAT = "pyautogui"


def observed(observation: Observation) -> Screen:
    """The screen an observation shows. A policy formats its action for this screen, because the
    runner parses it for this screen: a web page or a device need not be the default 1080x2400."""
    return Screen(observation.width, observation.height)


@dataclass(frozen=True)
class PolicyOutput:
    """The model's raw words; the runner parses them with `format` and keeps both."""

    text: str
    format: str  # a codec name: qwen, agentcpm, uitars, mobiler1, androidworld, canonical
    prompt_tokens: int = 0
    completion_tokens: int = 0
    sampling: dict[str, Any] | None = None  # temperature, top_p, seed of a sampled model call
    # The pixel space the text's coordinates live in (a model's smart-resized image); None: the
    # observation's own screen, which the built-in policies format for.
    screen: Screen | None = None


def on_desktop(observation: Observation) -> bool:
    return observation.meta.get("backend") == "desktop"


def desktop_form(action: Action) -> Action:
    """A built-in policy's phone action as a desktop does it: back and home are Escape, a swipe is the
    wheel (a finger up shows what is further down) or a drag, a long press the context menu's right
    click; a desktop launches no app, so that is a wait."""
    kind, notes = action.kind, {"thought": action.thought, "intent": action.intent}
    if kind == ActionKind.PRESS and action.key in ("back", "home", "menu"):
        return Action(kind=ActionKind.HOTKEY, text="escape", **notes)
    if kind == ActionKind.SWIPE and action.to is not None:
        return Action(kind=ActionKind.DRAG, point=action.point, to=action.to, **notes)
    if kind == ActionKind.SWIPE:
        return Action(
            kind=ActionKind.SCROLL, point=action.point, direction=OPPOSITE[action.swipe_direction()], **notes
        )
    if kind == ActionKind.LONG_PRESS:
        return Action(kind=ActionKind.RIGHT_CLICK, point=action.point, **notes)
    if kind == ActionKind.OPEN_APP:
        return Action(kind=ActionKind.WAIT, **notes)
    return action


def say(action: Action, codec: ActionCodec, observation: Observation) -> PolicyOutput:
    """A built-in policy's action as text: in its own format, or on a desktop in the desktop format."""
    if on_desktop(observation):
        codec, action = get_codec(DESKTOP_FORMAT), desktop_form(action)
    return PolicyOutput(codec.format(action, observed(observation)), codec.name)


class Policy(Protocol):
    """A versioned policy. `start` begins an episode; `act` is called once per step."""

    name: str
    version: int

    def start(self, query: Query, seed: str, guidance: str | None = None, rollout: int = 0) -> None:
        """Begin an episode: `seed` makes its randomness repeatable, `rollout` is k of K for the query."""
        ...

    async def act(self, observation: Observation) -> PolicyOutput: ...
