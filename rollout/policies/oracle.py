"""Built-in offline policies: a noisy oracle that follows the ground-truth path, and a random explorer.

Both see only what a real agent sees: the observation's element tree. The oracle looks
for the next move's element, scrolls when it is not visible, and presses back when it
has wandered off; its mistakes are seeded per episode.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

from pydantic import BaseModel, Field

from rollout.policies import keyboard
from rollout.policies.base import PolicyOutput, observed, on_desktop, say
from trajforge.actions import Action, ActionKind, get_codec
from trajforge.domain import Observation, Query
from trajforge.text import quoted

SCROLL_PROBES = 6  # swipes up before searching the other way, then giving up on the screen


class OracleNoise(BaseModel):
    """Per-step error rates of the noisy oracle (all 0: the oracle is perfect)."""

    mis_tap: float = Field(0.0, ge=0, le=1, description="Tap a point near, but off, the target.")
    wrong_value: float = Field(0.0, ge=0, le=1, description="Pick another visible row of the same list.")
    premature_terminate: float = Field(0.0, ge=0, le=1, description="Declare success before the end.")
    wander: float = Field(0.0, ge=0, le=1, description="Tap some other clickable element.")
    malformed: float = Field(0.0, ge=0, le=1, description="Cut the output off mid-way (a format error).")


def element_bounds(element: dict[str, Any]) -> tuple[int, int, int, int]:
    x1, y1, x2, y2 = (int(v) for v in element["bounds"])
    return (x1, y1, x2, y2)


def element_center(element: dict[str, Any]) -> tuple[int, int]:
    x1, y1, x2, y2 = element_bounds(element)
    return ((x1 + x2) // 2, (y1 + y2) // 2)


def box_overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> float:
    """Intersection over union of two boxes."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / max(union, 1)


class NoisyOracle:
    """Follows the query's ground-truth moves through the element tree, with seeded errors."""

    def __init__(
        self,
        noise: OracleNoise | None = None,
        fmt: str = "qwen",
        version: int = 0,
    ) -> None:
        self.name, self.version = "noisy-oracle", version
        self.noise = noise or OracleNoise()
        self.codec = get_codec(fmt)
        self._plan: deque[dict[str, Any]] = deque()
        self._queued: deque[Action] = deque()
        self._rng = random.Random(0)
        self._probes = 0
        self._query: Query | None = None

    def start(self, query: Query, seed: str, guidance: str | None = None, rollout: int = 0) -> None:
        self._query = query
        self._plan = deque([{"widget": "__open__", "value": query.app}, *query.path])
        self._queued.clear()
        self._rng = random.Random(seed)
        self._probes = 0

    async def act(self, observation: Observation) -> PolicyOutput:
        action = self._next(observation)
        text = self.codec.format(action, observed(observation))
        if self._rng.random() < self.noise.malformed:
            self._queued.appendleft(action)  # it meant this; it will say it properly next step
            text = text[: max(1, len(text) // 2)]
        return PolicyOutput(text, self.codec.name)

    def _next(self, obs: Observation) -> Action:
        if self._queued:
            return self._queued.popleft()
        if not self._plan:
            return Action(kind=ActionKind.TERMINATE, status="success")
        rng, noise = self._rng, self.noise
        if rng.random() < noise.premature_terminate:
            self._plan.clear()
            return Action(kind=ActionKind.TERMINATE, status="success")
        elements = obs.elements or []
        move = self._plan[0]
        target = self._find(elements, move)
        if target is None:
            return self._search()
        self._probes = 0
        clickable = [e for e in elements if e.get("kind") != "text"]
        if rng.random() < noise.wander and len(clickable) > 1:
            target = rng.choice([e for e in clickable if e is not target])
        elif target.get("kind") == "list_item" and rng.random() < noise.wrong_value:
            rows = [e for e in elements if e.get("widget") == target.get("widget") and e is not target]
            target = rng.choice(rows) if rows else target
        self._plan.popleft()
        x, y = element_center(target)
        if rng.random() < noise.mis_tap:
            _, top, _, bottom = element_bounds(target)
            y += rng.choice((-1, 1)) * (bottom - top)
            y = max(0, min(obs.height - 1, y))
        tap = Action(kind=ActionKind.CLICK, point=observed(obs).from_px(x, y))
        if target.get("kind") == "input":
            self._queued.extend(
                [
                    Action(kind=ActionKind.TYPE, text=str(move.get("value") or "")),
                    Action(kind=ActionKind.PRESS, key="enter"),
                ]
            )
        return tap

    @staticmethod
    def _find(elements: list[dict[str, Any]], move: dict[str, Any]) -> dict[str, Any] | None:
        if move["widget"] == "__open__":
            return next((e for e in elements if e.get("id") == f"app:{move['value']}"), None)
        for e in elements:
            if e.get("widget") == move["widget"] and (
                e.get("kind") != "list_item" or e.get("value") == move["value"]
            ):
                return e
        return None

    def _search(self) -> Action:
        """Not on screen: scroll down the content, then up, then go back a screen."""
        self._probes += 1
        if self._probes <= SCROLL_PROBES:
            return Action(kind=ActionKind.SWIPE, point=(500, 600), direction="up")
        if self._probes <= 2 * SCROLL_PROBES:
            return Action(kind=ActionKind.SWIPE, point=(500, 600), direction="down")
        self._probes = 0
        return Action(kind=ActionKind.PRESS, key="back")


class RandomExplorer:
    """Taps random clickable elements, sometimes scrolls or goes back; stops after `max_actions`.
    After tapping a text field that does not already show one of the instruction's quoted values
    (or words), it types one of them. An empty field shows its placeholder or label (a web form's
    "New task", the simulator's "Search"), so what a field shows cannot say it is empty. On a
    desktop, half of its free steps play a keyboard move instead (`keyboard.moves`)."""

    def __init__(self, fmt: str = "qwen", max_actions: int = 15, version: int = 0) -> None:
        self.name, self.version = "random-explorer", version
        self.codec = get_codec(fmt)
        self.max_actions = max_actions
        self._rng = random.Random(0)
        self._taken = 0

    def start(self, query: Query, seed: str, guidance: str | None = None, rollout: int = 0) -> None:
        self._rng, self._taken = random.Random(seed), 0
        self._phrases = phrases(query.instruction)
        self._field = False  # the last action tapped an empty text field
        self._moves = keyboard.moves(query.instruction)
        self._queued: deque[Action] = deque()  # the rest of a keyboard move

    async def act(self, observation: Observation) -> PolicyOutput:
        self._taken += 1
        rng = self._rng
        if self._taken <= self.max_actions and (self._queued or self._keyboard(observation)):
            self._field = False
            return say(self._queued.popleft(), self.codec, observation)
        clickable = [e for e in observation.elements or [] if e.get("kind") != "text"]
        target: dict[str, Any] = {}
        roll = rng.random()
        if self._taken > self.max_actions:
            action = Action(kind=ActionKind.TERMINATE, status="success")
        elif roll < 0.1:
            action = Action(kind=ActionKind.PRESS, key="back")
        elif roll < 0.25 or not clickable:
            action = Action(kind=ActionKind.SWIPE, point=(500, 600), direction=rng.choice(["up", "down"]))
        else:
            target = rng.choice(clickable)
            point = observed(observation).from_px(*element_center(target))
            action = Action(kind=ActionKind.CLICK, point=point)
        if self._field and self._phrases and action.kind != ActionKind.TERMINATE:
            action = Action(
                kind=ActionKind.TYPE, text=rng.choice(self._phrases)
            )  # into the field just tapped
        shown = str(target.get("text") or "").casefold()
        self._field = (
            action.kind == ActionKind.CLICK
            and target.get("kind") == "input"
            and not any(p.casefold() in shown for p in self._phrases)
        )
        return say(action, self.codec, observation)

    def _keyboard(self, observation: Observation) -> bool:
        """On a desktop, now and then: queue a keyboard move."""
        if not (on_desktop(observation) and self._moves and self._rng.random() < keyboard.KEYBOARD_SHARE):
            return False
        self._queued.extend(self._rng.choice(self._moves))
        return True


def phrases(instruction: str) -> list[str]:
    """What an explorer may type into an empty text field: the instruction's quoted values, else
    its single words (a task names what it wants typed)."""
    return quoted(instruction) or [
        w.strip(",.;:!?") for w in instruction.split() if len(w.strip(",.;:!?")) > 2
    ]
