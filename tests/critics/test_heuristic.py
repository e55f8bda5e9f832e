"""Offline critics against the labelled evaluation set from the simulated world."""

from __future__ import annotations

import pytest

from bench.evalset import build_eval_set, evaluate
from critics.heuristic import ChannelVerdict, consensus
from trajforge.appspec import builtin_app_names, load_app
from trajforge.world.route_check import RouteGoalCheck, RouteStepCheck

APPS = [load_app(n) for n in builtin_app_names()]


@pytest.fixture(scope="module")
def eval_set():
    return build_eval_set(APPS, per_app=6, noise_levels=(0.0, 0.1, 0.2), seed=1)


def test_trajectory_accuracy_meets_the_target(eval_set) -> None:
    report = evaluate(APPS, eval_set)
    assert report.episodes == 72
    assert 0 < sum(e.true_success for e in eval_set) < 72  # both outcomes are represented
    assert report.trajectory_accuracy >= 0.95, report.render()
    assert report.step_accuracy >= 0.85, report.render()
    opposite = report.step_confusion[("GOOD", "HARMFUL")] + report.step_confusion[("HARMFUL", "GOOD")]
    assert opposite < 0.01 * sum(report.step_confusion.values())  # GOOD and HARMFUL are almost never swapped
    assert "route check + visual channel (AND)" in report.render()


def test_perfect_episodes_are_all_good_or_neutral(eval_set) -> None:
    critic, textual = RouteStepCheck(APPS), RouteGoalCheck()
    for episode in (e for e in eval_set if e.noise == 0.0):
        trace = critic.follow(episode.query, episode.steps)
        verdicts = trace.verdicts
        assert {v.label for v in verdicts} <= {"GOOD", "NEUTRAL"}
        assert verdicts[-1].reason == "completes_task"
        assert textual.judge(trace, episode.steps).success
        assert all(len(v.summary.split()) <= 30 for v in verdicts)


def test_wrong_picks_and_early_stops_are_harmful(eval_set) -> None:
    critic = RouteStepCheck(APPS)
    reasons = set()
    for episode in (e for e in eval_set if not e.true_success):
        reasons |= {v.reason for v in critic.judge(episode.query, episode.steps) if v.label == "HARMFUL"}
    assert {"moves_away", "wrong_value", "premature_stop"} <= reasons


def test_consensus_rules() -> None:
    yes, no = ChannelVerdict("textual", True, "x"), ChannelVerdict("visual", False, "y")
    assert consensus([yes, yes]) and not consensus([yes, no])
    assert consensus([yes, yes, no], rule="majority") and not consensus([yes, no, no], rule="majority")
    assert consensus([yes, no], rule="weighted", weights={"textual": 2.0, "visual": 1.0})
    assert not consensus([yes, no], rule="weighted", weights={"textual": 1.0, "visual": 3.0})
