"""Where error recovery probes: the steps where a query's rollouts part from a successful one."""

from __future__ import annotations

from typing import Any

from curation.recovery import RecoveryReport, recovery_sites
from curation.rollouts import Rollout
from trajforge.actions import Action, ActionKind
from trajforge.domain import Query, StepView

ELEMENTS = [
    {"text": "Open", "kind": "button", "bounds": [0, 0, 500, 100]},
    {"text": "Pay", "kind": "button", "bounds": [0, 200, 500, 300]},
]
QUERY = Query(uid="q1", app="shop", instruction="Pay", path=[], goal={})


def _tap(x: int, y: int) -> dict[str, Any]:
    return {"kind": "click", "point": [x, y]}


OPEN, OPEN_AGAIN, PAY, EMPTY = _tap(100, 20), _tap(300, 40), _tap(100, 250), _tap(900, 900)
DONE = {"kind": "terminate", "status": "success"}


def _rollout(uid: str, actions: list[dict[str, Any] | None], labels: list[str], success: bool) -> Rollout:
    views = [
        StepView(a, None if a else "no_json", f"{uid}{i}", f"{uid}{i + 1}", ELEMENTS, 1000, 1000)
        for i, a in enumerate(actions)
    ]
    return Rollout(0, uid, QUERY, views, labels, success)


def _sites(*others: Rollout) -> tuple[list, RecoveryReport]:
    reference = _rollout("ref", [OPEN, PAY, DONE], ["GOOD"] * 3, True)
    report = RecoveryReport()
    return recovery_sites({"q1": [reference, *others]}, report), report


def test_a_failed_rollout_parts_where_it_first_acts_otherwise_with_unparsed_steps_left_out() -> None:
    # The same element tapped at another point is the same move; an unparsed output did nothing.
    failed = _rollout(
        "bad", [OPEN_AGAIN, None, EMPTY, DONE], ["GOOD", "NEUTRAL", "NEUTRAL", "HARMFUL"], False
    )
    (site,), _ = _sites(failed)
    assert (site.index, site.step, site.source, site.episode) == (1, 1, "diverged", "bad")
    assert Action.model_validate(EMPTY) == site.wrong and site.correct == Action.model_validate(PAY)
    assert site.prefix == [Action.model_validate(OPEN)]


def test_another_way_to_succeed_is_no_site_unless_the_step_critic_calls_it_harmful() -> None:
    other_way = _rollout("alt", [OPEN, EMPTY, PAY, DONE], ["GOOD", "NEUTRAL", "GOOD", "GOOD"], True)
    assert _sites(other_way)[0] == []
    harmful = _rollout("harm", [OPEN, EMPTY, PAY, DONE], ["GOOD", "HARMFUL", "GOOD", "GOOD"], True)
    (site,), _ = _sites(harmful)
    assert site.source == "harmful" and site.index == 1


def test_one_site_per_wrong_action_and_an_early_finish_is_counted_not_probed() -> None:
    twice = [_rollout(u, [OPEN, EMPTY, DONE], ["GOOD", "HARMFUL", "HARMFUL"], False) for u in ("a", "b")]
    quits = _rollout("quit", [OPEN, {"kind": "terminate", "status": "failure"}], ["GOOD", "HARMFUL"], False)
    sites, report = _sites(*twice, quits)
    assert len(sites) == 1 and report.skipped["wrong_action_finishes"] == 1
    assert sites[0].wrong.kind == ActionKind.CLICK
