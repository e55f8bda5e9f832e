"""The spec's route check: an episode followed on the app's navigation DAG (`trajforge.world.route`).

It reads the spec's widget ids and the query's goal, so it is a programmatic check beside the
verifier, not a critic: it is never a trajectory channel of the consensus and never counts in
critic accuracy. Its step labels (GUI-Owl §6.3's GOOD / NEUTRAL / HARMFUL) are what curation
reads where no model step critic has judged:

- `RouteStepCheck`: counts the actions left to the goal by any route: GOOD when an action
  lowers it, HARMFUL when it raises it (a wrong pick, leaving the route, a back while on it)
  or stops early, NEUTRAL otherwise (scrolls, focus, typing, taps that change nothing). On an
  app without a spec, or a query without a goal (a suite's task), every step is NEUTRAL.
- `RouteGoalCheck`: the goal's screen reached with every goal slot set and the run ended by
  its own success claim, on the route the step check followed.
"""

from __future__ import annotations

from dataclasses import dataclass

from trajforge.actions.model import ActionKind
from trajforge.appspec import AppSpec
from trajforge.domain import Query, StepVerdict, StepView, describe, hit_element
from trajforge.world.route import AppModel, Tracker
from trajforge.world.verify import Goal


@dataclass(frozen=True)
class GoalVerdict:
    success: bool | None  # None: no spec or no goal to check against
    reason: str


@dataclass
class Trace:
    """The route check's walk through one episode: a verdict per step and the state it ended in."""

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


class RouteStepCheck:
    """Progress toward the goal on the app's DAG, by any valid route."""

    name, version = "route_check", "1"

    def __init__(self, apps: list[AppSpec]) -> None:
        self.models = {a.name: AppModel(a) for a in apps}

    def judge(self, query: Query, steps: list[StepView]) -> list[StepVerdict]:
        return self.follow(query, steps).verdicts

    def follow(self, query: Query, steps: list[StepView]) -> Trace:
        goal, model = Goal.of(query.goal), self.models.get(query.app)
        if goal is None or model is None:
            why = "no_goal" if goal is None else "no_app_model"
            verdict = StepVerdict("NEUTRAL", why, "There is no map of this app or task to check against.")
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
        if (action := view.act) is None:
            return StepVerdict(
                "NEUTRAL", "unparseable_output", "The output could not be parsed; nothing happened."
            )
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
        wrong = any(t.values.get(k) not in (values.get(k), v) for k, v in t.goal.state.items())
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


class RouteGoalCheck:
    """The goal check on the route the step check followed: the goal's screen with every goal slot set."""

    name, version = "route_goal_check", "1"

    def judge(self, trace: Trace, steps: list[StepView]) -> GoalVerdict:
        """Success is the goal reached *and* claimed, as the verifier's anchor reads it: a run that
        ends on the goal without ending itself (it ran out of steps) did not succeed, and neither
        did a success claim elsewhere."""
        if not steps:
            return GoalVerdict(False, "no_steps")
        end = trace.end
        if end is None:
            return GoalVerdict(None, trace.verdicts[0].reason)
        last = steps[-1].act
        claimed = last is not None and last.kind == ActionKind.TERMINATE and last.status == "success"
        if end.app != end.goal.app or end.screen != end.goal.screen:
            return GoalVerdict(False, "wrong_screen" if claimed else "no_success_claim")
        if len(end.goal.satisfied(end.values)) < len(end.goal.state):
            return GoalVerdict(False, "wrong_values" if claimed else "no_success_claim")
        return GoalVerdict(claimed, "goal_reached" if claimed else "goal_reached_unclaimed")
