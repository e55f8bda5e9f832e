"""The offline critics judge by the app's DAG and the step record alone: any valid route is
credited, a user's own app is judged like a built-in one, and the visual channel works from
screenshots of earlier successes only."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

from critics.heuristic import ChannelVerdict, VisualTrajectoryCritic, consensus
from rollout.sim.env import SimEnv
from trajforge.actions import Action, ActionKind
from trajforge.appspec import load_app
from trajforge.domain import Query, StepView, goal_key
from trajforge.world.model import Move
from trajforge.world.oracle import actions_for
from trajforge.world.route_check import GoalVerdict, RouteGoalCheck, RouteStepCheck

TAKEOUT = load_app("takeout")
PANTRY = load_app(str(Path(__file__).resolve().parents[2] / "docs/examples/pantry.yaml"))
DONE = Action(kind=ActionKind.TERMINATE, status="success")


def _play(
    spec, query: Query, moves: list[Move], extra: tuple[Action, ...] = ()
) -> tuple[list[StepView], bool]:
    """Play moves (the oracle's taps, scrolls and typing), then `extra`, then terminate; the verifier's verdict."""
    env = SimEnv([spec])
    obs = env.reset(query)
    steps = []
    for action in itertools.chain(actions_for(env.device, spec.name, moves), extra, [DONE]):  # lazily
        after = env.step(action)
        steps.append(StepView.observed(action, obs, after))
        obs = after
    return steps, env.verify().success


def _query(app: str, path: list[Move], goal: dict) -> Query:
    return Query(
        uid=f"q-{len(path)}-{goal['screen']}",
        app=app,
        instruction="do it",
        path=[m.to_json() for m in path],
        goal={"app": app, **goal},
    )


SAMPLED = [  # the route querygen sampled: home -> store -> dish -> ... -> placed
    Move("home", "stores", "Burger Barn"),
    Move("store", "dishes", "Cheeseburger"),
    Move("dish", "qty", "1"),
    Move("options", "spice", "mild"),
    Move("address", "addresses", "Home"),
    Move("checkout", "place", None),
]
REORDER = [Move("home", "orders", None), Move("orders", "reorder", None), Move("checkout", "place", None)]
GOAL = {"screen": "placed", "state": {"store": "Burger Barn", "dish": "Cheeseburger", "quantity": "1"}}


def test_another_valid_route_is_credited_step_by_step_and_as_a_trajectory() -> None:
    query = _query("takeout", SAMPLED, GOAL)
    steps, verified = _play(TAKEOUT, query, REORDER)  # the last order already is the goal's
    assert verified
    trace = RouteStepCheck([TAKEOUT]).follow(query, steps)
    assert {v.label for v in trace.verdicts} == {"GOOD"}, [v.reason for v in trace.verdicts]
    assert trace.verdicts[-1].reason == "completes_task"
    assert RouteGoalCheck().judge(trace, steps) == GoalVerdict(True, "goal_reached")
    unended = steps[:-1]  # the goal reached, but the run never ended itself (it ran out of steps)
    assert steps[-1].action is not None and steps[-1].action["kind"] == "terminate"
    trace = RouteStepCheck([TAKEOUT]).follow(query, unended)
    assert RouteGoalCheck().judge(trace, unended) == GoalVerdict(False, "goal_reached_unclaimed")


def test_a_wrong_pick_is_harmful_and_fails_the_goal_check() -> None:
    wrong = [*SAMPLED[:1], Move("store", "dishes", "Fries"), *SAMPLED[2:]]
    query = _query("takeout", SAMPLED, GOAL)
    steps, verified = _play(TAKEOUT, query, wrong)
    assert not verified
    trace = RouteStepCheck([TAKEOUT]).follow(query, steps)
    assert "wrong_value" in [v.reason for v in trace.verdicts]
    assert trace.verdicts[-1].reason == "premature_stop"
    assert RouteGoalCheck().judge(trace, steps).reason == "wrong_values"


def test_a_detour_and_back_is_harmful_then_good() -> None:
    query = _query("takeout", SAMPLED, GOAL)
    detour = [SAMPLED[0], Move("store", "dishes", "Fries")]  # the wrong dish, then back to the store
    env_steps, _ = _play(TAKEOUT, query, detour, (Action(kind=ActionKind.PRESS, key="back"),))
    labels = [v.label for v in RouteStepCheck([TAKEOUT]).judge(query, env_steps)]
    assert labels[-3:] == ["HARMFUL", "GOOD", "HARMFUL"]  # Fries, back, a premature success claim


def test_a_users_own_app_is_judged_by_its_spec() -> None:
    path = [Move(**m) for m in _pantry_path()]
    screen = PANTRY.widget(path[-1].screen, path[-1].widget).goto
    query = _query("pantry", path, {"screen": screen, "state": {}})
    steps, verified = _play(PANTRY, query, path)
    trace = RouteStepCheck([PANTRY]).follow(query, steps)
    assert verified and RouteGoalCheck().judge(trace, steps).success
    unknown = RouteStepCheck([TAKEOUT]).follow(query, steps)  # no spec: no opinion, never a guess
    assert {v.reason for v in unknown.verdicts} == {"no_app_model"}
    assert RouteGoalCheck().judge(unknown, steps).success is None


def _pantry_path() -> list[dict]:
    """The first route to a terminal screen by buttons and list picks, read from the spec."""
    screen: str = PANTRY.start
    out: list[dict] = []
    for _ in range(10):
        if PANTRY.screens[screen].terminal and out:
            return out
        widget = next(w for w in PANTRY.screens[screen].widgets if w.goto and w.kind in ("button", "list"))
        value = PANTRY.slots[widget.slot][0] if widget.kind == "list" and widget.slot else None
        out.append({"screen": screen, "widget": widget.id, "value": value})
        assert widget.goto is not None
        screen = widget.goto
    raise AssertionError("no terminal screen within 10 moves")


def test_visual_channel_abstains_without_a_reference_and_never_uses_its_own_query() -> None:
    query = _query("takeout", SAMPLED, GOAL)
    steps, _ = _play(TAKEOUT, query, SAMPLED)
    end = steps[-1].after
    own = VisualTrajectoryCritic({goal_key(query.goal): {end: {query.uid}}})
    assert own.judge(query, steps).success is None  # a success of its own query is no reference
    visual = VisualTrajectoryCritic({goal_key(query.goal): {end: {query.uid, "q-other"}}})
    assert visual.judge(query, steps) == ChannelVerdict("visual", True, "matches_a_successful_end")
    elsewhere = VisualTrajectoryCritic({goal_key(query.goal): {"f" * 64: {"q-other"}}})
    assert elsewhere.judge(query, steps).success is False
    abstain, yes, no = (
        ChannelVerdict("visual", None, "x"),
        ChannelVerdict("t", True, "y"),
        ChannelVerdict("t", False, "z"),
    )
    assert consensus([yes, abstain]) is True and consensus([no, abstain]) is False
    assert consensus([abstain]) is None


def test_visual_channel_matches_a_near_equal_end_frame_but_not_another_screen() -> None:
    from PIL import Image, ImageDraw

    def frame(clock: str, body: str) -> bytes:
        img = Image.new("RGB", (540, 1200), "white")
        draw = ImageDraw.Draw(img)
        draw.text((20, 10), clock, fill="black")  # the status bar: ignored
        draw.rectangle((40, 200, 500, 320 if body == "placed" else 900), fill="navy")
        out = io.BytesIO()
        img.save(out, format="PNG")
        return out.getvalue()

    shots = {
        "ref": frame("09:41", "placed"),
        "now": frame("10:02", "placed"),
        "other": frame("10:02", "list"),
    }
    query = _query("takeout", SAMPLED, GOAL)
    visual = VisualTrajectoryCritic({goal_key(query.goal): {"ref": {"q-other"}}}, shots.__getitem__)
    end = StepView(DONE.model_dump(mode="json"), None, "now", "now", [], 540, 1200)
    assert visual.judge(query, [end]).success is True  # only the clock differs
    other = StepView(DONE.model_dump(mode="json"), None, "other", "other", [], 540, 1200)
    assert visual.judge(query, [other]).success is False
    assert (
        VisualTrajectoryCritic({goal_key(query.goal): {"ref": {"q-other"}}}).judge(query, [end]).success
        is False
    )
