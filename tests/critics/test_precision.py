"""Trust earned per task, precision first (`critics.precision`): the other tasks are a prior as strong
as they have been shown to transfer, and each label of the task moves its estimate."""

from __future__ import annotations

import itertools

from critics.precision import MAX_STRENGTH, MIN_STRENGTH, Precision, Verdict, transfer_strength

ids = itertools.count(1)


def _task(app: str, right: int, wrong: int, confidence: float = 0.99) -> list[Verdict]:
    return [Verdict(next(ids), app, confidence, True) for _ in range(right)] + [
        Verdict(next(ids), app, confidence, False) for _ in range(wrong)
    ]


def test_tasks_that_agree_make_a_strong_prior_and_a_task_read_the_wrong_way_a_weak_one() -> None:
    alike = [v for app in "abcdef" for v in _task(app, 40, 0)]
    assert transfer_strength(alike) == MAX_STRENGTH
    inverted = alike + _task("g", 0, 40)  # a whole task read the wrong way
    assert MIN_STRENGTH <= transfer_strength(inverted) < 10
    assert transfer_strength(_task("a", 10, 0)) == MIN_STRENGTH  # one task says nothing of transfer


def test_with_no_label_of_a_task_only_what_transfers_at_the_target_is_decided() -> None:
    alike = Precision([v for app in "abcdef" for v in _task(app, 60, 0)])
    new = alike.estimate("new", 0.99)
    assert new.own == 0 and new.pooled == 360 and new.precision >= 0.98  # strong prior, all right
    assert alike.labels_needed("new", 0.98) == 0
    assert alike.estimate("new", 0.995).precision < 0.98  # nothing that confident was ever checked

    weak = Precision([v for app in "abcdef" for v in _task(app, 60, 0)] + _task("g", 0, 60))
    assert weak.estimate("new", 0.99).precision < 0.98  # transfer shown unreliable: it abstains


def test_each_agreeing_label_moves_the_task_to_its_own_record_and_one_disagreeing_pulls_it_down() -> None:
    base = [v for app in "abcdef" for v in _task(app, 60, 0)] + _task("g", 0, 60)
    needed = Precision(base).labels_needed("new", 0.95)
    assert needed is not None and 1 <= needed <= 16
    agreed = Precision(base + _task("new", needed, 0))
    assert agreed.estimate("new", 0.99).precision >= 0.95
    assert Precision(base + _task("new", needed - 1, 0)).estimate("new", 0.99).precision < 0.95
    disagreed = Precision(base + _task("new", needed, 1))
    assert disagreed.estimate("new", 0.99).precision < 0.95
    left_out = agreed.verdicts[-1].episode_id  # an anchored episode is judged without its own label
    assert agreed.estimate("new", 0.99, leave_out=left_out).own == needed - 1


def test_only_verdicts_at_least_as_confident_count() -> None:
    verdicts = (
        _task("a", 50, 0, confidence=0.999) + _task("b", 50, 0, confidence=0.999) + _task("a", 0, 20, 0.6)
    )
    precision = Precision(verdicts)
    assert precision.estimate("a", 0.99).own == 50 and precision.estimate("a", 0.5).own == 70
    assert precision.estimate("a", 0.99).precision > precision.estimate("a", 0.5).precision
