"""Complexity tiers of queries and the tier mix of a round's new queries (`querygen.complexity`)."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import ValidationError

from querygen.complexity import complexity, quotas
from querygen.pipeline import TIER_FULL, generate_queries
from trajforge.appspec import builtin_app_names, load_app
from trajforge.domain import TIERS
from trajforge.errors import ConfigError
from trajforge.settings import EvolveSettings


def _move(screen: str, widget: str, value: str | None = None) -> dict[str, str]:
    return {"screen": screen, "widget": widget, **({"value": value} if value else {})}


def test_a_route_the_instruction_names_step_by_step_is_localization() -> None:
    spec = load_app("settings")
    queries = generate_queries(spec, 40, seed=3).kept
    stepwise = [q for q in queries if q.instruction.startswith("Open Settings, then open")]
    assert stepwise and all(q.tier == "localization" for q in stepwise)
    for q in queries:
        assert q.tier == complexity(spec, q.instruction, q.path)


def test_unnamed_navigation_makes_a_query_functional_or_intent() -> None:
    spec = load_app("settings")
    first = spec.screens[spec.start].widgets[0]
    path = [_move(spec.start, first.id)]
    assert complexity(spec, f"Open {first.label}", path) == "localization"
    assert complexity(spec, "Make it so", path) == "intent"
    generated = [q for name in builtin_app_names() for q in generate_queries(load_app(name), 30, seed=5).kept]
    assert {q.tier for q in generated} <= set(TIERS)
    assert len({q.tier for q in generated}) == 3  # the built-in apps hold every tier


def test_quotas_split_a_round_by_the_mix() -> None:
    assert quotas(6, {"localization": 1, "functional": 1, "intent": 1}) == {
        "localization": 2,
        "functional": 2,
        "intent": 2,
    }
    assert quotas(5, {"localization": 0.5, "intent": 0.5}) == {
        "localization": 3,
        "functional": 0,
        "intent": 2,
    }
    assert sum(quotas(7, {"functional": 0.3, "intent": 0.7}).values()) == 7


@pytest.mark.parametrize(
    "mix",
    [{"easy": 1.0}, {"intent": -1.0, "functional": 2.0}, {"intent": 0.0}],
)
def test_a_bad_mix_is_one_clear_error(mix: dict[str, float]) -> None:
    with pytest.raises(ValidationError, match=r"evolve.tier_mix\[0\]: (unknown query tier|a tier mix needs)"):
        EvolveSettings(tier_mix=[mix])
    with pytest.raises(ConfigError, match="tier"):
        quotas(4, mix)


def test_generation_follows_the_mix_and_fills_a_dry_tier_from_the_others() -> None:
    spec = load_app("settings")
    natural = Counter(q.tier for q in generate_queries(spec, 12, seed=7).kept)
    wanted = {"localization": 0.25, "functional": 0.25, "intent": 0.5}
    report = generate_queries(spec, 12, seed=7, mix=wanted)
    assert report.mix == quotas(12, wanted)
    assert report.tiers() == report.mix != natural  # settings offers every tier: the mix is met exactly
    assert report.spilled == 0 and any(d.reason == TIER_FULL for d in report.dropped)
    assert "tiers: " in report.render(spec) and "wanted" in report.render(spec)
    takeout = load_app("takeout")  # nearly every takeout task names only part of its route
    only = generate_queries(takeout, 6, seed=7, mix={"localization": 1.0})
    assert len(only.kept) == 6
    assert only.spilled == 6 - only.tiers()["localization"] > 0


def test_a_round_reads_its_mix_from_the_schedule() -> None:
    ev = EvolveSettings(tier_mix=[{"localization": 1.0}, {"functional": 1.0, "intent": 1.0}])
    assert ev.mix_of(1) == {"localization": 1.0}
    assert ev.mix_of(2) == ev.mix_of(9) == {"functional": 1.0, "intent": 1.0}
    assert EvolveSettings().mix_of(3) is None
