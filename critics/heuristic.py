"""Offline critics for the embedded default (GUI-Owl §6.3 labels, no model).

They see only what a critic on a real farm sees: each step's element tree and screenshot
hashes, the action, the query and the ground-truth path it was generated from. They never
read the verifier or the simulator's state.

- `HeuristicStepCritic`: GOOD when an action completes the next ground-truth move, NEUTRAL
  when it changes nothing on the path (scrolls, focus, typing, no-op taps), HARMFUL when
  it leaves the path (another element, a wrong value, a back while on the path, an early
  stop). A back that returns to the path is GOOD.
- `TextualTrajectoryCritic`: the step record against the path (all moves done, back on the
  path, a final `terminate(success)`).
- `VisualTrajectoryCritic`: the final screenshot against the frame the ground-truth path
  ends on, replayed in the simulator (the apps are specs, so the target frame is known).
- `consensus`: AND (GUI-Owl's rule), majority, or weighted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rollout.sim.device import Move, SimDevice
from rollout.sim.oracle import replay
from rollout.sim.render import FrameRenderer
from trajforge.actions import Action, ActionKind, Screen
from trajforge.appspec import AppSpec
from trajforge.domain import Observation, Query

Label = Literal["GOOD", "NEUTRAL", "HARMFUL"]


@dataclass(frozen=True)
class StepView:
    """One recorded step as a critic sees it."""

    action: dict[str, Any] | None
    parse_error: str | None
    before: str
    after: str
    elements: list[dict[str, Any]]
    width: int
    height: int

    @classmethod
    def observed(cls, action: Action, before: Observation, after: Observation) -> StepView:
        """The step an action made between two observations of a live environment."""
        return cls(
            action.model_dump(mode="json", exclude_none=True),
            None,
            before.screenshot,
            after.screenshot,
            before.elements or [],
            before.width,
            before.height,
        )


@dataclass(frozen=True)
class StepVerdict:
    label: Label
    reason: str  # snake_case, counted
    summary: str  # at most 30 words (GUI-Owl §6.3)


@dataclass
class _Track:
    gold: list[dict[str, Any]]
    pointer: int = 0
    off_path: int = 0  # screens away from the path
    typed: str | None = None
    done: bool = False
    success_claimed: bool = False
    verdicts: list[StepVerdict] = field(default_factory=list)


def hit_element(view: StepView, point: tuple[int, int]) -> dict[str, Any] | None:
    x, y = Screen(view.width, view.height).to_px(point)
    for e in view.elements:
        x1, y1, x2, y2 = e["bounds"]
        if x1 <= x <= x2 and y1 <= y <= y2:
            return e
    return None


def _matches(element: dict[str, Any], move: dict[str, Any], app: str) -> bool:
    if move["widget"] == "__open__":
        return bool(element.get("id") == f"app:{app}")
    if element.get("widget") != move["widget"]:
        return False
    return element.get("kind") != "list_item" or element.get("value") == move.get("value")


def describe(action: Action, view: StepView) -> str:
    """The action in words, as an intent a person would give."""
    if action.kind == ActionKind.CLICK and action.point is not None:
        target = hit_element(view, action.point)
        return f"Tap '{target.get('text') or target.get('id')}'" if target else "Tap an empty spot"
    if action.kind == ActionKind.SWIPE:
        return f"Swipe {action.swipe_direction()}"
    if action.kind == ActionKind.TYPE:
        return f"Type '{action.text}'"
    if action.kind == ActionKind.PRESS:
        return f"Press {action.key}"
    if action.kind == ActionKind.TERMINATE:
        return f"Finish the task ({action.status})"
    return action.kind.value.replace("_", " ").capitalize()


class HeuristicStepCritic:
    name, version = "heuristic_step", "1"

    def judge(self, query: Query, steps: list[StepView]) -> list[StepVerdict]:
        track = _Track(
            gold=[{"widget": "__open__", "value": query.app, "screen": "__launcher__"}, *query.path]
        )
        for view in steps:
            track.verdicts.append(self._step(query, view, track))
        return track.verdicts

    def _step(self, query: Query, view: StepView, t: _Track) -> StepVerdict:
        if view.action is None:
            return StepVerdict(
                "NEUTRAL", "unparseable_output", "The output could not be parsed; nothing happened."
            )
        action = Action.model_validate(view.action)
        changed = view.before != view.after
        move = t.gold[t.pointer] if t.pointer < len(t.gold) else None
        kind = action.kind
        if kind == ActionKind.TERMINATE:
            t.done = True
            t.success_claimed = action.status == "success"
            if t.success_claimed and move is None and not t.off_path:
                return StepVerdict("GOOD", "completes_task", "Declares success after every step of the task.")
            return StepVerdict("HARMFUL", "premature_stop", "Stops before the task is done.")
        if kind == ActionKind.PRESS and action.key == "back":
            if t.off_path:
                t.off_path -= 1
                return StepVerdict("GOOD", "returns_to_path", "Goes back towards the task's path.")
            if changed:
                self._step_back(t)
                return StepVerdict("HARMFUL", "leaves_path", "Goes back although the task was on track.")
            return StepVerdict("NEUTRAL", "no_change", "Back changed nothing.")
        if t.off_path:
            if changed and kind == ActionKind.CLICK:
                t.off_path += 1
                return StepVerdict("HARMFUL", "leaves_path", "Moves further away from the task's path.")
            return StepVerdict("NEUTRAL", "off_path", "Acts away from the task's path without changing it.")
        if kind == ActionKind.CLICK and action.point is not None and move is not None:
            element = hit_element(view, action.point)
            if element is not None and _matches(element, move, query.app):
                if element.get("kind") == "input":
                    t.typed = ""
                    return StepVerdict("NEUTRAL", "focuses_input", "Focuses the field the task needs.")
                t.pointer += 1
                return StepVerdict(
                    "GOOD", "follows_path", f"Taps {element.get('text') or element.get('id')}, the next step."
                )
            if element is None or not changed:
                return StepVerdict("NEUTRAL", "no_op_tap", "The tap hit nothing that changes the screen.")
            t.off_path += 1
            return StepVerdict(
                "HARMFUL", "leaves_path", f"Taps {element.get('text') or element.get('id')}, off the path."
            )
        if kind == ActionKind.TYPE and move is not None:
            if t.typed is not None and action.text == move.get("value"):
                t.typed = action.text
                return StepVerdict("NEUTRAL", "types_value", "Types the value the task asks for.")
            return StepVerdict(
                "HARMFUL" if t.typed is not None else "NEUTRAL",
                "wrong_text",
                "Types text the task does not ask for.",
            )
        if kind == ActionKind.PRESS and action.key == "enter" and t.typed and move is not None:
            t.pointer += 1
            t.typed = None
            return StepVerdict("GOOD", "submits_input", "Submits the value the task asks for.")
        if kind == ActionKind.SWIPE:
            return StepVerdict("NEUTRAL", "scrolls", "Scrolls to look for the next element.")
        return StepVerdict(
            "NEUTRAL", "no_change" if not changed else "other_action", "No progress on the path."
        )

    @staticmethod
    def _step_back(t: _Track) -> None:
        """A back on the path returns to the previous screen's first move."""
        if t.pointer <= 1:
            t.pointer = 0
            return
        previous = t.gold[t.pointer - 1]["screen"]
        t.pointer = next(i for i, m in enumerate(t.gold) if m["screen"] == previous)


@dataclass(frozen=True)
class ChannelVerdict:
    channel: str
    success: bool
    reason: str


class TextualTrajectoryCritic:
    """The step record against the ground-truth path (GUI-Owl's textual channel, offline)."""

    name, version = "heuristic_textual", "1"

    def judge(self, query: Query, steps: list[StepView], verdicts: list[StepVerdict]) -> ChannelVerdict:
        completed = sum(v.reason in ("follows_path", "submits_input") for v in verdicts)
        net_harm = sum(v.reason == "leaves_path" for v in verdicts) - sum(
            v.reason == "returns_to_path" for v in verdicts
        )
        last = verdicts[-1].reason if verdicts else "no_steps"
        if last != "completes_task":
            return ChannelVerdict("textual", False, "no_success_claim" if last != "premature_stop" else last)
        if net_harm > 0:
            return ChannelVerdict("textual", False, "off_path_at_end")
        if completed < len(query.path) + 1:
            return ChannelVerdict("textual", False, "steps_missing")
        return ChannelVerdict("textual", True, "path_completed")


class VisualTrajectoryCritic:
    """The final frame against the frame the ground-truth path ends on, replayed in the simulator."""

    name, version = "heuristic_visual", "1"

    def __init__(self, apps: list[AppSpec], renderer: FrameRenderer | None = None) -> None:
        self.device = SimDevice(apps)
        self.renderer = renderer or FrameRenderer()
        self._targets: dict[str, str] = {}

    def target_frame(self, query: Query) -> str:
        if query.uid not in self._targets:
            replay(self.device, query.app, [Move.from_json(m) for m in query.path])
            self._targets[query.uid] = self.renderer.frame(self.device)[1]
        return self._targets[query.uid]

    def judge(self, query: Query, steps: list[StepView]) -> ChannelVerdict:
        if not steps:
            return ChannelVerdict("visual", False, "no_steps")
        ok = steps[-1].after == self.target_frame(query)
        return ChannelVerdict("visual", ok, "ends_on_target_screen" if ok else "ends_elsewhere")


def consensus(
    verdicts: list[ChannelVerdict],
    rule: Literal["and", "majority", "weighted"] = "and",
    weights: dict[str, float] | None = None,
) -> bool:
    """A trajectory is correct when all channels agree (GUI-Owl §6.3), by majority, or by weighted vote
    (the weighted share of "correct" above one half; channels without a weight count 1)."""
    votes = [v.success for v in verdicts]
    if rule == "and":
        return all(votes)
    if rule == "majority":
        return sum(votes) * 2 > len(votes)
    w = weights or {}
    total = sum(w.get(v.channel, 1.0) for v in verdicts)
    return total > 0 and sum(w.get(v.channel, 1.0) for v in verdicts if v.success) * 2 > total
