"""Agreement figures: kappa is undefined, not perfect, where only one class was seen; precision and
recall print as "-", not 0.0%, where nothing was said or there was nothing to find."""

from __future__ import annotations

import pytest

from trajforge.metrics import ChannelStats, channel_row, kappa_text, rate_text


def _stats(pairs: list[tuple[bool, bool]]) -> ChannelStats:
    st = ChannelStats()
    for predicted, actual in pairs:
        st.add(predicted, actual)
    return st


def test_kappa_of_one_class_only_is_undefined_not_one() -> None:
    no_success = _stats([(False, False)] * 12)  # a task nobody solved, a critic that says so
    assert no_success.summary()["accuracy"] == 1.0 and no_success.kappa() is None
    assert kappa_text(no_success.kappa()) == "undefined" and ChannelStats().kappa() is None


def test_kappa_where_both_classes_appear() -> None:
    assert _stats([(True, True), (False, False)]).kappa() == 1.0
    assert _stats([(True, False), (False, True)]).kappa() == pytest.approx(-1.0)
    always_yes = _stats([(True, True), (True, False)])  # chance explains it all: kappa 0
    assert always_yes.kappa() == pytest.approx(0.0) and kappa_text(always_yes.kappa()) == "0.00"


def test_pooled_adds_every_count_and_a_removal_takes_one_back() -> None:
    summaries = [_stats([(True, True), (False, True)]).summary(), None, _stats([(True, False)]).summary()]
    pooled = ChannelStats.pooled(st for st in summaries)  # a generator: read once per count
    assert (pooled.tp, pooled.fp, pooled.tn, pooled.fn, pooled.n) == (1, 1, 0, 1, 3)
    pooled.remove(True, True)
    assert (pooled.tp, pooled.n) == (0, 2)


def test_precision_of_a_critic_that_never_says_success_is_undefined_not_zero() -> None:
    never_yes = _stats([(False, True), (False, False), (False, False)]).summary()
    assert rate_text(never_yes, "precision") == "-" and rate_text(never_yes, "recall") == "0.0%"
    no_success = _stats([(True, False), (False, False)]).summary()  # the truth has nothing to find
    assert rate_text(no_success, "precision") == "0.0%" and rate_text(no_success, "recall") == "-"
    assert rate_text(_stats([(True, True), (True, False)]).summary(), "precision", 0) == "50%"
    row = channel_row("learned", never_yes)
    assert row.split() == ["learned", "3", "66.7%", "-", "0.0%"]
