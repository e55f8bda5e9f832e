"""Query generation: sampling, synthesis, validation, dedup, storage, and the LLM path."""

from __future__ import annotations

import random
import re

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from querygen.dedup import QueryDeduper
from querygen.pipeline import generate_queries, load_history, store_generation
from querygen.sampling import MAX_ACTIONS, Coverage, finishing_screens, sample_path
from querygen.synthesis import missing_values
from storage.models import Exclusion
from storage.models import Query as QueryRow
from tests.support.scripted_llm import ScriptedLLM, querygen_responder
from trajforge.appspec import builtin_app_names, load_app
from trajforge.gateway import LLMGateway
from trajforge.settings import LLMSettings
from trajforge.world import Goal, Move, SimDevice, verify
from trajforge.world.oracle import replay

APPS = builtin_app_names()


@pytest.fixture(scope="module")
def generated() -> dict:
    return {name: generate_queries(load_app(name), 500, seed=11) for name in APPS}


@pytest.mark.parametrize("name", APPS)
def test_500_queries_replay_to_verifier_success(generated: dict, name: str) -> None:
    spec, report = load_app(name), generated[name]
    assert len(report.kept) == 500
    device = SimDevice([spec])
    for query in report.kept:
        actions = replay(device, name, [Move.from_json(m) for m in query.path])
        assert spec.min_actions <= len(actions) <= MAX_ACTIONS
        result = verify(Goal.model_validate(query.goal), device)
        assert result.success, (query.instruction, result)
        assert missing_values(query.instruction, Goal.model_validate(query.goal)) == []
    assert len({q.uid for q in report.kept}) == 500
    assert {q.difficulty for q in report.kept} <= {"easy", "medium", "hard"}
    assert all(d.reason in ("duplicate_exact", "duplicate_near") for d in report.dropped)


@pytest.mark.parametrize("name", APPS)
def test_wrong_paths_fail_with_the_constraint_named(generated: dict, name: str) -> None:
    spec, kept = load_app(name), generated[name].kept
    device = SimDevice([spec])
    rng = random.Random(5)
    failures = set()
    for query in rng.sample(kept, 40):
        other = rng.choice([q for q in kept if q.goal != query.goal])
        replay(device, name, [Move.from_json(m) for m in other.path])
        result = verify(Goal.model_validate(query.goal), device)
        assert not result.success and result.failed is not None and result.detail
        assert re.fullmatch(r"screen|slot:\w+", result.failed)
        failures.add(result.failed.split(":")[0])
    assert "slot" in failures
    # a random tapper from the launcher never satisfies a multi-constraint goal
    device.reset()
    for _ in range(8):
        device.act(
            __import__("trajforge.actions", fromlist=["Action"]).Action(
                kind="click", point=(rng.randrange(1001), rng.randrange(1001))
            )
        )
    hard = next(q for q in kept if len(q.goal["state"]) >= 2)
    assert not verify(Goal.model_validate(hard.goal), device).success


def test_sampling_is_seeded_and_prefers_uncovered_edges() -> None:
    spec = load_app("shopping")
    finishing = finishing_screens(spec)
    assert "cart" not in finishing  # a dead end: the sampler never walks into it

    def paths(seed: int, coverage: Coverage) -> list:
        rng = random.Random(seed)
        return [sample_path(spec, rng, coverage, {"cart": "empty"}, finishing) for _ in range(50)]

    assert paths(1, Coverage()) == paths(1, Coverage())
    biased = Coverage()
    for _ in range(200):
        biased.edges["home.categories"] += 1  # earlier rounds browsed categories a lot
    first = [p.moves[0].widget for p in paths(2, biased) if not isinstance(p, str)]
    assert first.count("search_box") > first.count("categories")


def test_dedup_exact_near_and_different_values() -> None:
    goal = Goal(app="a", screen="s", state={"dish": "Fries"})
    dedup = QueryDeduper()
    assert dedup.check("1", "Order Fries from Burger Barn", goal) is None
    exact = dedup.check("2", "order fries, from burger barn!", goal)
    assert exact is not None and (exact.reason, exact.of) == ("duplicate_exact", "1")
    near = dedup.check("3", "Order Fries from Burger Barn now", goal)
    assert near is not None and near.reason == "duplicate_near" and near.similarity >= 0.8
    other_goal = Goal(app="a", screen="s", state={"dish": "Salad"})
    assert dedup.check("4", "Order Fries from Burger Barns", other_goal) is None  # another task


def test_store_and_rerun_add_nothing_twice(sessions: sessionmaker[Session]) -> None:
    spec = load_app("ridehail")
    report = generate_queries(spec, 60, seed=4)
    store_generation(sessions, spec, report)
    store_generation(sessions, spec, report)  # a rerun after a crash
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(QueryRow)) == 60
        dropped = s.scalar(select(func.count()).select_from(Exclusion).where(Exclusion.stage == "querygen"))
        assert dropped == len(report.dropped)  # the report's "N dropped" is what `exclusion` keeps
        row = s.scalars(select(QueryRow)).first()
        assert row is not None and row.path and row.goal["app"] == "ridehail" and row.difficulty
    coverage, dedup = load_history(sessions, "ridehail")
    assert sum(coverage.edges.values()) > 0
    again = generate_queries(spec, 60, seed=4, coverage=coverage, deduper=dedup)
    assert not {q.uid for q in again.kept} & {q.uid for q in report.kept}
    store_generation(sessions, spec, again)
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(QueryRow)) == 120


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ({}, None),
        ({"synth": "malformed"}, "synthesis_malformed"),
        ({"refine": "lossy"}, "refinement_lost_constraint"),
    ],
)
def test_llm_synthesis_and_refinement(mode: dict[str, str], reason: str | None) -> None:
    spec = load_app("takeout")
    with ScriptedLLM(responder=querygen_responder(mode)) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="scripted"))
        report = generate_queries(spec, 5, seed=2, gateway=gateway, batch=5)
        prompts = [r.text for r in llm.requests]
    assert any("Menu of the chosen restaurant" in p for p in prompts)  # screen descriptions reach the model
    assert any("Order me takeout" in p for p in prompts) == (mode.get("synth") != "malformed")  # few-shot
    if reason is None:
        assert len(report.kept) == 5 and {q.source for q in report.kept} == {"llm"}
        assert all(q.instruction.startswith("Please: ") for q in report.kept)
        return
    # a path that fixes no value (takeout's "reorder") loses nothing, whatever the wording
    assert all(q.goal["state"] == {} for q in report.kept)
    assert reason in {d.reason for d in report.dropped}
    assert {d.reason for d in report.dropped} <= {reason, "duplicate_exact"}
    raw = report.dropped[0].detail["raw"]
    assert raw["synthesize"]  # the model's own words are kept with the drop
    if reason == "synthesis_malformed":
        assert report.dropped[0].detail["why"].startswith("invalid_json")


def test_generation_stops_when_the_task_space_is_exhausted() -> None:
    spec = load_app("ridehail")  # about a thousand distinct queries
    report = generate_queries(spec, 5000, seed=1)
    assert report.exhausted and 500 < len(report.kept) < 5000
    assert "stopped early: no new task in the last 2000 candidates" in report.render(spec)


ONE_TAP = {  # open the app, tap the one button: two actions, below the default min_actions of 3
    "name": "onetap",
    "title": "One Tap",
    "start": "home",
    "screens": {
        "home": {"title": "Home", "description": "start", "widgets": [
            {"id": "go", "kind": "button", "label": "Go", "goto": "done"},
            {"id": "stay", "kind": "button", "label": "Stay", "goto": "stayed"},
        ]},
        "done": {"title": "Done", "description": "went", "terminal": True, "widgets": []},
        "stayed": {"title": "Stayed", "description": "stayed", "terminal": True, "widgets": []},
    },
}  # fmt: skip


def test_a_spec_of_short_tasks_says_why_and_min_actions_allows_them() -> None:
    from trajforge.appspec import parse_spec

    short = parse_spec(ONE_TAP, "onetap.yaml")
    report = generate_queries(short, 5, seed=1)
    assert report.kept == [] and report.unsampled["path_shorter_than_min_actions"] > 0
    text = report.render(short)
    assert "no path: path_shorter_than_min_actions=" in text
    assert "set `min_actions:` lower in the spec to allow them" in text
    allowed = parse_spec({**ONE_TAP, "min_actions": 1}, "onetap.yaml")
    kept = generate_queries(allowed, 2, seed=1).kept
    assert sorted(q.goal["screen"] for q in kept) == ["done", "stayed"]


def test_a_move_is_chosen_as_rng_choices_would_from_every_move_spelt_out() -> None:
    """The sampler weighs a list's values as one group (a 200,000-value list is one option), and
    still picks exactly what `rng.choices` over one move per value picks with the same draw, so
    seeds give the paths they gave before."""
    from querygen.sampling import _choose, _options

    for name in builtin_app_names():
        spec = load_app(name)
        finishing = finishing_screens(spec)
        coverage = Coverage()
        rng = random.Random(name)
        for _ in range(40):  # uneven weights, as after some rounds
            if not isinstance(
                path := sample_path(spec, rng, coverage, spec.initial_values(), finishing), str
            ):
                coverage.add(path)
        for screen in spec.screens:
            options = _options(spec, screen, set(), {screen}, finishing)
            no_value: list[str | None] = [None]
            spelt = [
                (Move(m.screen, m.widget, v), t) for m, t, values in options for v in (values or no_value)
            ]
            weights = [coverage.weight(m, t) for m, t in spelt]
            for seed in range(30):
                if options:
                    want = random.Random(seed).choices(spelt, weights=weights)[0]
                    assert _choose(options, coverage, random.Random(seed)) == want, (name, screen, seed)


def test_an_input_with_200000_typed_values_samples_queries() -> None:
    from trajforge.appspec import parse_spec

    values = [f"order {i:06d}" for i in range(200_000)]
    spec = parse_spec(
        {
            "name": "lookup",
            "title": "Lookup",
            "start": "home",
            "min_actions": 2,
            "slots": {"order": values},
            "screens": {
                "home": {"title": "Home", "description": "search", "widgets": [
                    {"id": "q", "kind": "input", "slot": "order", "goto": "found", "phrase": "look up {value}"}
                ]},
                "found": {"title": "{order}", "description": "the order", "terminal": True,
                          "intents": ["Look up {order}"]},
            },
        },
        "lookup.yaml",
    )  # fmt: skip
    kept = generate_queries(spec, 20, seed=3).kept
    assert len(kept) == 20 and len({q.goal["state"]["order"] for q in kept}) == 20
    assert {q.goal["state"]["order"] for q in kept} <= set(values)
