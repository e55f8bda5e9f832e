"""The label-error rule (`critics.trust: error`): what the critics publish, taken together, is wrong at
most `critics.max_label_error` of the time at its upper bound; evidence is pooled across tasks; a task
whose own labels show the critic wrong is held back."""

from __future__ import annotations

import pytest

from critics.consensus import Anchored
from critics.error_control import Judged, ceiling, claimed_error, decide, judge_episodes, teaching_order


def _task(
    task: str, start: int, right: int, wrong: int, unlabelled: int, success: bool = False
) -> list[Judged]:
    out = [Judged(start + i, task, success, 0.95, True) for i in range(right)]
    out += [Judged(start + right + i, task, success, 0.95, False) for i in range(wrong)]
    out += [Judged(start + right + wrong + i, task, success, 0.95) for i in range(unlabelled)]
    return out


def test_evidence_pooled_across_tasks_decides_a_task_nobody_labelled() -> None:
    labelled = [j for t in range(8) for j in _task(f"t{t}", 100 * t, 40, 0, 0)]  # 320 right, 0 wrong
    new = _task("new", 10_000, 0, 0, 50)
    decision = decide(labelled + new, 0.02)
    assert decision.decided == {j.episode_id for j in new}
    assert decision.claimed is not None and decision.estimate is not None
    assert decision.estimate <= decision.claimed <= 0.02
    # with little evidence of the kind the same task is left to people: its error cannot be shown
    assert not decide([j for t in range(2) for j in _task(f"t{t}", 100 * t, 5, 0, 0)] + new, 0.02).decided


def test_a_task_whose_own_labels_show_the_critic_wrong_is_held_back() -> None:
    others = [j for t in range(8) for j in _task(f"t{t}", 100 * t, 40, 0, 10)]
    shown_wrong = _task("bad", 10_000, 2, 3, 30)
    decision = decide(others + shown_wrong, 0.05)
    bad = next(c for c in decision.cells.values() if c.key[0] == "bad")
    assert bad.held_back and not decision.decided & {j.episode_id for j in shown_wrong}
    assert {j.episode_id for j in others if j.right is None} <= decision.decided


def test_the_claimed_error_grows_with_what_is_decided_and_stays_under_the_target() -> None:
    judged = [j for t in range(6) for j in _task(f"t{t}", 100 * t, 30, t % 3, 20)]
    for target in (0.02, 0.05, 0.2):
        decision = decide(judged, target)
        chosen = [decision.cells[k] for k in decision.chosen]
        if decision.claimed is not None:
            assert decision.claimed == pytest.approx(claimed_error(chosen)[1]) and decision.claimed <= target
    assert decide(judged, 0.02).decided <= decide(judged, 0.2).decided


def test_the_label_queue_asks_first_where_a_label_could_decide_most_and_draws_at_random_within() -> None:
    judged = [j for t in range(4) for j in _task(f"t{t}", 100 * t, 3, 0, 30)]
    judged += _task("t0", 5_000, 0, 0, 4, success=True)  # a small cell of the same task
    order = teaching_order(judged, 0.02, seed=1)
    assert len(order) == len(set(order)) == sum(j.right is None for j in judged)
    assert {e // 100 for e in order[:4]} == {0, 1, 2, 3}  # one task at a time, round the tasks
    assert order[0] < 5_000  # the big cell of t0 before its small one
    assert order != teaching_order(judged, 0.02, seed=2)  # drawn at random within a cell


def test_a_labelled_episode_sits_in_the_cell_its_votes_give_and_the_ceiling_knows_the_truth() -> None:
    episodes = [
        Anchored(i, "a" if i < 40 else "b", {"x": i % 10 != 0, "y": i % 10 != 0}, i % 10 != 0)
        for i in range(80)
    ]
    episodes.append(Anchored(80, "b", {"x": True, "y": True}, False))  # both channels wrong once
    judged = judge_episodes(episodes, set(range(40)) | {80}, minimum=10)
    cells = {j.episode_id: j.cell for j in judged}
    assert cells[80] == cells[41]  # not moved to a surer band by leaving its own label out
    assert next(j for j in judged if j.episode_id == 80).right is False
    actual = {a.episode_id: a.actual for a in episodes}
    assert ceiling(judged, actual, 0.0)["pooled"] == sum(1 for j in judged if j.right is None)
