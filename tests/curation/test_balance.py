"""Balancing (GUI-Owl §2.2.3): task re-weighting, positive/negative balance, category mix."""

from __future__ import annotations

from collections import Counter

from curation.balance import Item, balance
from trajforge.settings import CurationSettings


def items(category: str, n: int, query: str, response: str = "x") -> list[Item]:
    return [Item(f"{category}-{query}-{response}-{i}", category, query, response) for i in range(n)]


def test_easy_tasks_are_downsampled_and_hard_ones_upweighted() -> None:
    pool = items("action_prediction", 200, "easy") + items("action_prediction", 10, "hard")
    pool += items("action_prediction", 10, "never")
    decided, report = balance(pool, {"easy": 1.0, "hard": 0.25, "never": 0.0}, CurationSettings())
    easy = [decided[i.uid] for i in pool if i.query == "easy"]
    kept = sum(reason is None for reason, _ in easy)
    assert 70 < kept < 130 and {r for r, _ in easy} == {None, "task_downsampled"}
    assert all(decided[i.uid] == (None, 2.0) for i in pool if i.query == "hard")
    assert all(decided[i.uid] == (None, 1.0) for i in pool if i.query == "never")
    assert report.upweighted == 10 and report.weight["action_prediction"] == kept + 20 + 10
    again, _ = balance(pool, {"easy": 1.0, "hard": 0.25, "never": 0.0}, CurationSettings())
    assert again == decided  # seeded: a rerun decides the same


def test_positive_and_negative_judging_samples_end_equal() -> None:
    pool = items("self_reflection", 30, "q", "GOOD: fine") + items(
        "self_reflection", 6, "q", "HARMFUL: wrong"
    )
    pool += items("self_reflection", 5, "q", "NEUTRAL: nothing") + items("state_verification", 9, "q", "no")
    decided, report = balance(pool, {}, CurationSettings())
    kept = Counter(i.response for i in pool if decided[i.uid][0] is None)
    assert kept == {"GOOD: fine": 6, "HARMFUL: wrong": 6, "NEUTRAL: nothing": 5, "no": 9}
    assert report.dropped == {"class_balance": 24} and report.unbalanced == ["state_verification"]


def test_category_mix_follows_the_configured_shares() -> None:
    pool = (
        items("action_prediction", 100, "q") + items("reasoning", 30, "q") + items("state_summary", 50, "q")
    )
    settings = CurationSettings(category_weights={"action_prediction": 0.5, "reasoning": 0.5})
    _, report = balance(pool, {}, settings)
    assert report.composition == {"action_prediction": 30, "reasoning": 30, "state_summary": 50}
    assert report.dropped == {"category_mix": 70}


def test_balance_reads_the_structured_label_not_a_models_wording() -> None:
    """A model rewrote the answers ("The step is correct…", "Yes, the task is done."): the
    polarity the sample was derived from still decides the balance."""
    good = [
        Item(f"g{i}", "self_reflection", "q", "The step is correct: it opened Wi-Fi.", True)
        for i in range(20)
    ]
    bad = [Item(f"b{i}", "self_reflection", "q", "This tap hurt progress.", False) for i in range(4)]
    done = [Item(f"y{i}", "state_verification", "q", "Yes, the task is done.", True) for i in range(3)]
    open_ = [
        Item(f"n{i}", "state_verification", "q", "Not yet: the form is unsaved.", False) for i in range(9)
    ]
    decided, report = balance(good + bad + done + open_, {}, CurationSettings())
    kept = Counter(i.uid[0] for i in good + bad + done + open_ if decided[i.uid][0] is None)
    assert kept == {"g": 4, "b": 4, "y": 3, "n": 3}
    assert report.dropped == {"class_balance": 22}
