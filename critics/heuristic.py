"""Offline critics for the embedded default (GUI-Owl §6.3 labels, no model).

They see only what a critic on a real farm sees: each step's element tree and screenshot
hashes, the action, the query's goal and the app's spec (its navigation DAG). They never
read the verifier, the device's state or the sampled path, and never run the simulator, so
they judge sim, web and spec'd Android episodes alike, and credit any valid route.

- `HeuristicStepCritic`: follows the episode on the DAG (`critics.appmodel.Tracker`) and
  counts the actions left to the goal by any route: GOOD when an action lowers it, HARMFUL
  when it raises it (a wrong pick, leaving the route, a back while on it) or stops early,
  NEUTRAL otherwise (scrolls, focus, typing, taps that change nothing).
- `TextualTrajectoryCritic`: a goal check from the step record and the final element tree:
  the goal's screen reached with every goal slot set to its value, and the run ended by its
  own success claim (as the verifier's anchor requires; a goal reached but never ended fails
  with reason `goal_reached_unclaimed`).
- `VisualTrajectoryCritic`: from screenshots only: the final frame against the end frames of
  recorded successful episodes of the same goal (equal, or a near-equal difference hash
  without the status bar); it abstains when there is none.
- `consensus`: AND (GUI-Owl's rule), majority, or weighted, over the channels that voted.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from PIL import Image

from critics.appmodel import AppModel, Goal, Tracker
from trajforge.actions import Action, ActionKind
from trajforge.appspec import AppSpec
from trajforge.domain import Query, StepVerdict, StepView, describe, goal_key, hit_element

BAR_SHARE = 0.05  # top and bottom share of a screenshot the visual channel ignores (status, navigation)
SIGNATURE_SIDE = 16  # the visual signature is SIDE x SIDE difference bits


@dataclass
class Trace:
    """The step critic's walk through one episode: a verdict per step and the state it ended in."""

    verdicts: list[StepVerdict]
    end: Tracker | None  # None: no spec for the app or no goal on the query


_GOOD = {"submitted": "submits_input", "back": "returns_to_route", "home": "returns_to_route"}
_NEUTRAL = {
    "focused": "focuses_input",
    "typed": "types_text",
    "keyboard_closed": "closes_keyboard",
    "no_change": "no_change",
    "tap_missed": "no_op_tap",
    "tap_other": "no_op_tap",
}


class HeuristicStepCritic:
    """Progress toward the goal on the app's DAG, by any valid route."""

    name, version = "heuristic_step", "2"

    def __init__(self, apps: list[AppSpec]) -> None:
        self.models = {a.name: AppModel(a) for a in apps}

    def judge(self, query: Query, steps: list[StepView]) -> list[StepVerdict]:
        return self.follow(query, steps).verdicts

    def follow(self, query: Query, steps: list[StepView]) -> Trace:
        goal, model = Goal.of(query.goal), self.models.get(query.app)
        if goal is None or model is None:
            why = "no_goal" if goal is None else "no_app_model"
            verdict = StepVerdict("NEUTRAL", why, "The critic has no map of this app or task.")
            return Trace([verdict for _ in steps], None)
        tracker = Tracker.start(model, goal)
        verdicts = []
        for i, view in enumerate(steps):
            verdicts.append(self._step(tracker, view))
            if i + 1 < len(steps):
                tracker.observe(steps[i + 1].elements)
        return Trace(verdicts, tracker)

    @staticmethod
    def _step(t: Tracker, view: StepView) -> StepVerdict:
        if view.action is None:
            return StepVerdict(
                "NEUTRAL", "unparseable_output", "The output could not be parsed; nothing happened."
            )
        action = Action.model_validate(view.action)
        before = t.remaining()
        if action.kind == ActionKind.TERMINATE:
            if action.status == "success" and t.at_goal():
                return StepVerdict("GOOD", "completes_task", "Declares success with the goal reached.")
            if action.status == "success":
                return StepVerdict("HARMFUL", "premature_stop", "Declares success before the goal.")
            return StepVerdict("HARMFUL", "gives_up", "Gives up on a task that can still be done.")
        hit = hit_element(view, action.point) if action.point is not None else None
        values = dict(t.values)
        event = t.advance(action, hit, view.before != view.after)
        wrong = any(t.values.get(k) not in (values.get(k), v) for k, v in t.goal.state)
        after = t.remaining()
        what = describe(action, view)
        if after < before:
            return StepVerdict("GOOD", _GOOD.get(event, "makes_progress"), f"{what}: closer to the goal.")
        if after > before:
            reason = "wrong_value" if wrong else "moves_away"
            return StepVerdict("HARMFUL", reason, f"{what}: further from the goal.")
        if action.kind == ActionKind.SWIPE and event != "no_change":
            return StepVerdict("NEUTRAL", "scrolls", "Scrolls to look for the next element.")
        return StepVerdict("NEUTRAL", _NEUTRAL.get(event, "no_progress"), f"{what}: no progress.")


@dataclass(frozen=True)
class ChannelVerdict:
    channel: str
    success: bool | None  # None: the channel abstains
    reason: str


class TextualTrajectoryCritic:
    """A route-agnostic goal check from the step record (GUI-Owl's textual channel, offline)."""

    name, version = "heuristic_textual", "3"

    def judge(self, trace: Trace, steps: list[StepView]) -> ChannelVerdict:
        """Success is the goal reached *and* claimed, as the verifier's anchor reads it: a run that
        ends on the goal without ending itself (it ran out of steps) did not succeed, and neither
        did a success claim elsewhere."""
        if not steps:
            return ChannelVerdict("textual", False, "no_steps")
        end = trace.end
        if end is None:
            return ChannelVerdict("textual", None, trace.verdicts[0].reason)
        last = Action.model_validate(steps[-1].action) if steps[-1].action else None
        claimed = last is not None and last.kind == ActionKind.TERMINATE and last.status == "success"
        if end.app != end.goal.app or end.screen != end.goal.screen:
            return ChannelVerdict("textual", False, "wrong_screen" if claimed else "no_success_claim")
        if len(end.goal.satisfied(end.values)) < len(end.goal.state):
            return ChannelVerdict("textual", False, "wrong_values" if claimed else "no_success_claim")
        return ChannelVerdict("textual", claimed, "goal_reached" if claimed else "goal_reached_unclaimed")


def frame_signature(png: bytes) -> int:
    """A 256-bit difference hash of a screenshot without its status and navigation bars (a clock,
    a battery level or a notification icon must not make two screens differ)."""
    with Image.open(io.BytesIO(png)) as img:
        grey = img.convert("L")
        w, h = grey.size
        body = grey.crop((0, round(h * BAR_SHARE), w, round(h * (1 - BAR_SHARE))))
        cells = body.resize((SIGNATURE_SIDE + 1, SIGNATURE_SIDE), Image.Resampling.BILINEAR).load()
    bits = 0
    for y in range(SIGNATURE_SIDE):
        for x in range(SIGNATURE_SIDE):
            bits = (bits << 1) | int(cells[x, y] > cells[x + 1, y])  # type: ignore[index,operator]
    return bits


class VisualTrajectoryCritic:
    """The final frame against the end frames of recorded successful episodes of the same goal.

    `references` maps a goal key to {end frame hash: uids of the queries of successful episodes
    ending there}; an episode's own query is never its reference (the channel is judged out of
    sample). Without a reference the channel abstains.
    Frames match when their hashes are equal or, given `frames` (bytes by hash), when their
    signatures (`frame_signature`) differ in at most `tolerance` of their bits. It abstains on a
    suite's task (MiniWoB++ covers the page once it has ended the episode: every end looks alike).
    """

    name, version = "heuristic_visual", "4"

    def __init__(
        self,
        references: dict[str, dict[str, set[str]]] | None = None,
        frames: Callable[[str], bytes] | None = None,
        tolerance: float = 0.01,  # 2 of 256 bits: measured, other screens of an app differ by 3+
    ) -> None:
        self.references = references or {}
        self.frames = frames
        self.tolerance = tolerance
        self._signatures: dict[str, int] = {}

    def _signature(self, sha: str) -> int:
        if sha not in self._signatures:
            assert self.frames is not None
            self._signatures[sha] = frame_signature(self.frames(sha))
        return self._signatures[sha]

    def _matches(self, frame: str, references: set[str]) -> bool:
        if frame in references:
            return True
        if self.frames is None:
            return False
        limit = self.tolerance * SIGNATURE_SIDE * SIGNATURE_SIDE
        mine = self._signature(frame)
        return any((mine ^ self._signature(r)).bit_count() <= limit for r in references)

    def judge(self, query: Query, steps: list[StepView], backend: str = "") -> ChannelVerdict:
        if not steps:
            return ChannelVerdict("visual", False, "no_steps")
        if query.source == "environment":  # a page that ends its own episode covers its end state
            return ChannelVerdict("visual", None, "environment_task")
        references = self.references.get(goal_key(query.goal, backend), {})
        frames = {frame for frame, uids in references.items() if uids - {query.uid}}
        if not frames:
            return ChannelVerdict("visual", None, "no_reference")
        ok = self._matches(steps[-1].after, frames)
        return ChannelVerdict("visual", ok, "matches_a_successful_end" if ok else "ends_elsewhere")


def consensus(
    verdicts: list[ChannelVerdict],
    rule: Literal["and", "majority", "weighted"] = "and",
    weights: dict[str, float] | None = None,
) -> bool | None:
    """A trajectory is correct when all channels agree (GUI-Owl §6.3), by majority, or by weighted vote
    (the weighted share of "correct" above one half; channels without a weight count 1).

    Abstaining channels do not vote; with no vote at all the consensus is None (undecided).
    """
    voting = [v for v in verdicts if v.success is not None]
    if not voting:
        return None
    votes = [bool(v.success) for v in voting]
    if rule == "and":
        return all(votes)
    if rule == "majority":
        return sum(votes) * 2 > len(votes)
    w = weights or {}
    total = sum(w.get(v.channel, 1.0) for v in voting)
    return total > 0 and sum(w.get(v.channel, 1.0) for v in voting if v.success) * 2 > total
