"""The held-out set and the promotion gate: one fixed set per app that no round samples again,
evaluated without storing episodes, and a candidate that does worse on it is not promoted."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from evolve import heldout
from evolve.spine import open_spine
from rollout import stages as rollouts
from rollout.versions import policy_factory
from storage.db import transaction
from storage.models import Episode, Policy
from storage.models import Query as QueryRow
from storage.policies import register_policy
from tests.support.evolve import stage
from trajforge.errors import ConfigError
from trajforge.settings import Settings

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def _policies(settings: Settings) -> tuple[int, int]:
    """(the perfect demonstrator, the random explorer)."""
    with transaction(open_spine(settings).sessions) as s:
        return register_policy(s, *rollouts.GUIDED), register_policy(
            s, *rollouts.EXPLORER, meta={"max_actions": 12}
        )


def test_the_heldout_set_is_sampled_once_and_no_round_samples_it_again(evolve_settings: Settings) -> None:
    settings = evolve_settings.model_copy(deep=True)
    settings.evolve.queries_per_app = 8
    spine = open_spine(settings)
    held = heldout.heldout_queries(spine)
    assert len(held) == len(spine.apps) and heldout.heldout_queries(spine) == held
    with spine.sessions() as s:
        rows = s.scalars(select(QueryRow).where(QueryRow.uid.in_([q.uid for q in held]))).all()
    assert all(r.round_id is None and r.meta["heldout"] is True for r in rows)
    stage(settings, "start", 1)
    rounds = rollouts.load_queries(spine, stage(settings, "queries", 1))
    assert len(rounds) == 8 * len(spine.apps)
    assert not {q.instruction for q in rounds} & {q.instruction for q in held}
    assert not {q.uid for q in rounds} & {q.uid for q in held}


def test_evaluation_stores_no_episode_and_is_run_once_per_policy(
    evolve_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    spine = open_spine(evolve_settings)
    stage(evolve_settings, "start", 1)  # the round the stages record their reports in
    stage(evolve_settings, "devices", 1)
    demonstrator, _ = _policies(evolve_settings)
    held = heldout.heldout_queries(spine)
    figures = heldout.evaluate_policy(spine, demonstrator, held)
    n = len(held) * evolve_settings.evolve.heldout_rollouts
    assert figures["episodes"] == figures["successes"] == n and figures["success_rate"] == 1.0
    assert sum(t for _, t in figures["per_app"].values()) == n
    with spine.sessions() as s:
        assert s.scalar(select(func.count()).select_from(Episode)) == 0
        row = s.get(Policy, demonstrator)
        assert row is not None and row.meta["heldout"] == figures

    def not_again(*_: object) -> None:
        raise AssertionError("evaluated twice")

    monkeypatch.setattr(heldout.EpisodeRunner, "evaluate", not_again)
    assert heldout.evaluate_policy(spine, demonstrator, held) == figures


def test_a_candidate_that_does_worse_on_the_heldout_set_is_not_promoted(evolve_settings: Settings) -> None:
    spine = open_spine(evolve_settings)
    stage(evolve_settings, "start", 1)  # the round the stages record their reports in
    stage(evolve_settings, "devices", 1)
    demonstrator, explorer = _policies(evolve_settings)
    worse = heldout.gate(spine, incumbent_id=demonstrator, candidate_id=explorer)
    assert worse["promoted"] is False and worse["reason"] == "heldout_regression"
    assert worse["candidate"]["success_rate"] < worse["current"]["success_rate"]
    better = heldout.gate(spine, incumbent_id=explorer, candidate_id=demonstrator)
    assert better["promoted"] is True and better["reason"] == "heldout_not_worse"
    line = heldout.heldout_line({"heldout": better["current"], "promotion": worse})
    assert "kept the current policy (heldout_regression)" in line


def test_without_a_verdict_or_with_promote_always_every_candidate_is_promoted(
    evolve_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    spine = open_spine(evolve_settings)
    demonstrator, explorer = _policies(evolve_settings)
    unverified: dict[str, object] = {
        "episodes": 4,
        "successes": 0,
        "unknown": 4,
        "success_rate": None,
        "per_app": {},
    }
    monkeypatch.setattr(heldout, "evaluate_policy", lambda *_: unverified)
    assert heldout.gate(spine, demonstrator, explorer)["reason"] == "unverifiable"
    spine.settings.evolve.promote = "always"
    assert heldout.gate(spine, demonstrator, explorer) == {"promoted": True, "reason": "promote_always"}


def test_a_candidate_that_gives_up_on_one_app_is_not_promoted_whatever_the_overall_rate(
    evolve_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4/16 to 0/16 on one app is refused though the overall rate rose; 2 episodes lost is within
    the default margin (2 episodes or 10 points, the larger)."""
    spine = open_spine(evolve_settings)
    spine.settings.evolve.route_lost_apps = False  # the candidate alone (the tests below hand tasks over)
    current = {"episodes": 48, "successes": 20, "unknown": 0, "success_rate": 20 / 48,
               "per_app": {"takeout": [4, 16], "shopping": [8, 16], "ridehail": [8, 16]}}  # fmt: skip

    def figures(*per_app: list[int]) -> dict[str, object]:
        won = sum(p[0] for p in per_app)
        return {"episodes": 48, "successes": won, "unknown": 0, "success_rate": won / 48,
                "per_app": dict(zip(("takeout", "shopping", "ridehail"), per_app, strict=True))}  # fmt: skip

    by_id: dict[int, dict[str, object]] = {1: current}
    monkeypatch.setattr(heldout, "evaluate_policy", lambda _s, pid, _q: by_id[pid])
    for candidate, promoted in (
        (figures([0, 16], [14, 16], [12, 16]), False),  # takeout lost 4: refused, overall 26 > 20
        (figures([2, 16], [14, 16], [12, 16]), True),  # lost 2: within the margin
    ):
        by_id[2] = candidate
        decision = heldout.gate(spine, incumbent_id=1, candidate_id=2)
        assert decision["promoted"] is promoted
        if not promoted:
            assert decision["reason"] == "heldout_app_regression"
            assert decision["apps_lost"] == {"takeout": [4, 0, 16]}
            line = heldout.heldout_line({"promotion": decision})
            assert "kept the current policy (heldout_app_regression: takeout 4->0/16)" in line
    spine.settings.evolve.gate_app_margin = (5, 10.0)  # a wider margin lets the first one through
    by_id[2] = figures([0, 16], [14, 16], [12, 16])
    assert heldout.gate(spine, incumbent_id=1, candidate_id=2)["promoted"] is True


def test_no_candidate_is_promoted_below_round_1s_policy_on_any_app(
    evolve_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each promotion may lose up to the margin against its incumbent; losses add up, so the gate also
    holds every candidate to round 1's policy (the random explorer) app by app."""
    spine = open_spine(evolve_settings)
    spine.settings.evolve.route_lost_apps = False  # the candidate alone (the tests below hand tasks over)

    def figures(takeout: int, shopping: int) -> dict[str, object]:
        return {"episodes": 32, "successes": takeout + shopping, "unknown": 0,
                "success_rate": (takeout + shopping) / 32,
                "per_app": {"takeout": [takeout, 16], "shopping": [shopping, 16]}}  # fmt: skip

    by_id = {1: figures(4, 0), 2: figures(2, 8), 3: figures(0, 12)}  # explorer, incumbent, candidate
    monkeypatch.setattr(heldout, "evaluate_policy", lambda _s, pid, _q: by_id[pid])
    monkeypatch.setattr(heldout, "first_policy", lambda _s: 1)
    decision = heldout.gate(spine, incumbent_id=2, candidate_id=3)  # within the margin of the incumbent
    assert decision["promoted"] is False and decision["reason"] == "below_round_1_policy"
    assert decision["apps_lost"] == {"takeout": [4, 0, 16]}
    by_id[3] = figures(2, 12)  # 4 -> 2 on takeout: within the margin, promoted, and said
    promoted = heldout.gate(spine, incumbent_id=2, candidate_id=3)
    assert promoted["promoted"] is True and promoted["below_round_1"] == {"takeout": [4, 2, 16]}
    line = heldout.heldout_line({"promotion": promoted})
    assert "promoted (heldout_not_worse; below round 1 within the margin: takeout 4->2/16)" in line
    assert heldout.gate(spine, incumbent_id=1, candidate_id=3)["below_round_1"] == {"takeout": [4, 2, 16]}
    by_id[3] = figures(4, 12)
    assert "below_round_1" not in heldout.gate(spine, incumbent_id=2, candidate_id=3)


def _perfect_on(settings: Settings, apps: list[str], name: str) -> int:
    """A policy that is the demonstrator on `apps` and the random explorer elsewhere."""
    demonstrator, explorer = _policies(settings)
    with transaction(open_spine(settings).sessions) as s:
        routes = {"base": explorer, "apps": dict.fromkeys(apps, demonstrator)}
        return register_policy(s, name, 0, {"routes": routes})


def test_a_promoted_candidate_below_round_1_on_an_app_hands_that_app_to_round_1s_policy(
    evolve_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured, not assumed: the candidate registered again with the app it lost handed to round 1's
    policy is rolled out on the held-out set, and plays round 1's policy's episodes there (the same
    seeds) and the candidate's elsewhere; it is the policy promoted."""
    spine = open_spine(evolve_settings)
    stage(evolve_settings, "start", 1)  # the round the stages record their reports in
    stage(evolve_settings, "devices", 1)
    held = heldout.heldout_queries(spine)
    first_app = sorted({q.app for q in held})[0]
    first = _perfect_on(evolve_settings, [first_app], "round-one")  # round 1's policy
    _, explorer = _policies(evolve_settings)
    with transaction(spine.sessions) as s:
        again = register_policy(s, rollouts.EXPLORER[0], 1, {"max_actions": 12})  # a candidate no worse
    monkeypatch.setattr(heldout, "first_policy", lambda _s: first)
    spine.settings.evolve.gate_app_margin = (100, 100.0)  # every loss within the margin
    decision = heldout.gate(spine, incumbent_id=explorer, candidate_id=again)
    assert decision["promoted"] is True and list(decision["below_round_1"]) == [first_app]
    routed = decision["routed"]
    demonstrator = _policies(evolve_settings)[0]
    assert routed["apps"] == {first_app: "guided-demo@0"}  # round 1's own routes, followed: none nest
    floor, plain = heldout.evaluate_policy(spine, first, held), decision["candidate"]
    assert floor["per_app"][first_app][0] > plain["per_app"][first_app][0]
    for app, tally in routed["figures"]["per_app"].items():
        assert tally == (floor if app == first_app else plain)["per_app"][app]
    with spine.sessions() as s:
        row = s.get(Policy, routed["policy_id"])
        assert row is not None and (row.name, row.version) == ("random-explorer+routed", 1)
        assert row.meta["routes"] == {"base": again, "apps": {first_app: demonstrator}}
    line = heldout.heldout_line({"promotion": decision})
    assert f"; handed to guided-demo@0: {first_app}: " in line
    spine.settings.evolve.route_lost_apps = False
    assert "routed" not in heldout.gate(spine, incumbent_id=explorer, candidate_id=again)


def test_a_candidate_that_lost_an_app_rolls_out_with_that_app_handed_to_the_current_policy(
    evolve_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Better on two apps, it gave up one the current policy solved: refused alone (the margin),
    it rolls out with that app left to the current policy, and the loop does not stall on it."""
    spine = open_spine(evolve_settings)
    stage(evolve_settings, "start", 1)  # the round the stages record their reports in
    stage(evolve_settings, "devices", 1)
    apps = sorted({q.app for q in heldout.heldout_queries(spine)})
    incumbent = _perfect_on(evolve_settings, apps[:1], "incumbent")
    candidate = _perfect_on(evolve_settings, apps[1:3], "candidate")
    _, explorer = _policies(evolve_settings)
    monkeypatch.setattr(heldout, "first_policy", lambda _s: explorer)
    spine.settings.evolve.gate_app_margin = (0, 0.0)  # one query per app here: any loss is beyond it
    decision = heldout.gate(spine, incumbent_id=incumbent, candidate_id=candidate)
    assert decision["promoted"] is True and list(decision["apps_lost"]) == apps[:1]
    assert decision["routed"]["apps"] == {apps[0]: "guided-demo@0"}  # the incumbent's, on that app
    assert "the candidate lost " in heldout.heldout_line({"promotion": decision})
    with spine.sessions() as s:
        row = s.get(Policy, decision["routed"]["policy_id"])
        assert row is not None and row.name == "candidate+routed"
    n = decision["current"]["per_app"][apps[0]][1]
    assert [decision["routed"]["figures"]["per_app"][a] for a in apps[:3]] == [[n, n]] * 3
    spine.settings.evolve.route_lost_apps = False
    assert heldout.gate(spine, incumbent, candidate)["reason"] == "heldout_app_regression"
    # worse overall, yet better on one task: that task is what it brings
    spine.settings.evolve.route_lost_apps = True
    two = _perfect_on(evolve_settings, [apps[0], apps[2]], "two")
    one = _perfect_on(evolve_settings, [apps[1]], "one")
    decision = heldout.gate(spine, incumbent_id=two, candidate_id=one)
    assert decision["candidate"]["success_rate"] < decision["current"]["success_rate"]
    handed_to = dict.fromkeys([apps[0], apps[2]], "guided-demo@0")
    assert decision["promoted"] is True and decision["routed"]["apps"] == handed_to
    assert "heldout_not_worse; the candidate lost " in heldout.heldout_line({"promotion": decision})


def test_a_routed_policy_loads_a_handed_policy_only_when_one_of_its_tasks_comes_up(
    evolve_settings: Settings,
) -> None:
    """A knn version a routed policy hands one app to loads its memory at that app's first episode,
    not when the routed policy is made: an older version nobody's task comes up for costs nothing."""
    spine = open_spine(evolve_settings)
    held = heldout.heldout_queries(spine)
    apps = sorted({q.app for q in held})
    _, explorer = _policies(evolve_settings)
    with transaction(spine.sessions) as s:
        gone = register_policy(s, "knn", 7, checkpoint_uri="store:policies/knn/7/")  # never uploaded
        routed = register_policy(s, "knn+routed", 8, {"routes": {"base": explorer, "apps": {apps[0]: gone}}})
    make = policy_factory(spine, routed)
    other = next(q for q in held if q.app != apps[0])
    make().start(other, "s")  # the base acts; the handed version is not loaded
    with pytest.raises(ConfigError, match="is not in the object store"):
        make().start(next(q for q in held if q.app == apps[0]), "s")
