"""CSRS extraction: seven categories, selective learning, critic filtering, provenance."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from bench.evalset import build_eval_set
from critics.csrs import extract, extract_round
from storage.db import session_factory
from storage.models import Exclusion, Sample
from storage.samples import CATEGORIES
from tests.support.smoke import smoke_round
from trajforge.appspec import builtin_app_names, load_app
from trajforge.domain import PLACEHOLDERS, StepVerdict
from trajforge.settings import load_settings
from trajforge.world.route_check import RouteStepCheck

APPS = [load_app(n) for n in builtin_app_names()]
ANCHOR = {"source": "verifier", "label": "success"}


@pytest.fixture(scope="module")
def episodes():
    return build_eval_set(APPS, per_app=3, noise_levels=(0.0, 0.2), seed=2)


def _samples(ep, success: bool, verdicts=None):
    verdicts = verdicts or RouteStepCheck(APPS).judge(ep.query, ep.steps)
    return extract(ep.query, "ep-1", success, ANCHOR, ep.steps, verdicts)


def test_success_yields_all_seven_failure_keeps_no_actions(episodes) -> None:
    for ep in episodes:
        drafts = _samples(ep, ep.true_success)
        categories = {d.category for d in drafts}
        if ep.true_success:
            assert categories == set(CATEGORIES)
        else:
            kept = {d.category for d in drafts if d.reason is None}
            assert kept <= set(CATEGORIES[:6]) and "self_reflection" in kept
            actions = [d for d in drafts if d.category == "action_prediction"]
            assert actions and all(d.reason == "trajectory_failed" for d in actions)
        assert all(d.provenance["episode"] == "ep-1" and d.provenance["anchor"] == ANCHOR for d in drafts)
        for d in drafts:  # the structured polarity balancing reads, beside the template's words
            if d.category == "state_verification":
                assert d.payload["polarity"] == (d.payload["response"] == "yes")
            if d.category == "self_reflection" and not d.payload["response"].startswith("NEUTRAL"):
                assert d.payload["polarity"] == d.payload["response"].startswith("GOOD")


def test_critic_threshold_and_thought_consistency_drop_with_reasons(episodes) -> None:
    ep = next(e for e in episodes if e.true_success and e.noise == 0.0)
    verdicts = RouteStepCheck(APPS).judge(ep.query, ep.steps)
    verdicts[0] = StepVerdict("HARMFUL", "leaves_path", "forced for the test")
    drafts = _samples(ep, True, verdicts)
    first = next(d for d in drafts if d.category == "action_prediction" and d.step_index == 0)
    assert first.reason == "critic_below_threshold"
    assert sum(d.reason not in (None, "empty_answer") for d in drafts) == 1
    tap = dict(ep.steps[0].action or {})
    tap["thought"] = "I will open the calendar"  # not what the tap does
    steps = [dataclasses.replace(ep.steps[0], action=tap), *ep.steps[1:]]
    drafts = extract(ep.query, "ep-1", True, ANCHOR, steps, RouteStepCheck(APPS).judge(ep.query, steps))
    assert next(d for d in drafts if d.category == "action_prediction" and d.step_index == 0).reason == (
        "thought_action_mismatch"
    )


def test_a_screen_with_no_text_gives_no_summary_and_no_prediction(episodes) -> None:
    """A blank or placeholder answer teaches nothing: dropped with `empty_answer`, never kept."""
    ep = next(e for e in episodes if e.true_success and e.noise == 0.0 and len(e.steps) > 1)
    steps = [ep.steps[0], dataclasses.replace(ep.steps[1], elements=[]), *ep.steps[2:]]
    drafts = extract(ep.query, "ep-1", True, ANCHOR, steps, RouteStepCheck(APPS).judge(ep.query, steps))
    empty = {(d.category, d.step_index) for d in drafts if d.reason == "empty_answer"}
    assert ("state_summary", 1) in empty and ("state_summary", 0) not in empty
    if steps[0].after != steps[0].before:  # step 0's effect is step 1's screen, which has no text
        assert ("effect_prediction", 0) in empty
    last = len(steps) - 1
    if steps[last].action is not None and steps[last].after != steps[last].before:
        assert ("effect_prediction", last) in empty  # no screen after the last step was read
    kept = [d for d in drafts if d.reason is None]
    assert kept and not any(d.payload["response"].strip() in PLACEHOLDERS for d in kept)


def test_extract_round_is_idempotent(engine, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    report = smoke_round(load_settings(), queries_per_app=1, rollouts=1)  # extracts once
    sessions: sessionmaker[Session] = session_factory(engine)
    csrs = Sample.category.in_(CATEGORIES)  # the round was curated too: those samples are not CSRS's
    with sessions() as s:
        before = s.scalar(select(func.count()).select_from(Sample).where(csrs))
    again = extract_round(sessions, 1)
    with sessions() as s:
        assert (
            s.scalar(select(func.count()).select_from(Sample).where(csrs))
            == before
            == sum(report.samples.kept.values()) + sum(report.samples.dropped.values())
        )
        dropped = s.scalars(select(Sample).where(Sample.status == "dropped")).all()  # by CSRS or curation
        assert sum(report.samples.dropped.values()) == s.scalar(
            select(func.count()).select_from(Exclusion).where(Exclusion.stage == "csrs")
        )
        assert all(d.reason for d in dropped)
    assert again.kept == report.samples.kept


def test_model_writes_knowledge_samples_through_the_gateway(
    engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from storage.keys import blob_key
    from storage.llm_cache import SqlResponseCache
    from storage.objectstore import open_object_store
    from tests.support.scripted_llm import Recorded, Reply, ScriptedLLM
    from trajforge.gateway import LLMGateway
    from trajforge.settings import LLMSettings

    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    smoke_round(settings, queries_per_app=1, rollouts=1)  # offline samples first
    sessions: sessionmaker[Session] = session_factory(engine)
    store = open_object_store(settings)

    def answer(rec: Recorded) -> Reply:
        """One reply per step: a JSON object answering each `## category` question the request asks."""
        asked = re.findall(r"^## (\w+)$", rec.text, re.M)
        complete = "the task is complete." in rec.text
        said = {
            "effect_prediction": "",  # left empty
            "self_reflection": "GOOD: fine.",  # a model that finds every step good
            "state_verification": "yes, it is" if complete else "no, not yet",  # one that follows the anchor
        }
        return Reply(content=json.dumps({c: said.get(c, f"Thinking: {rec.images} images") for c in asked}))

    with ScriptedLLM(responder=answer) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="thinker"), SqlResponseCache(sessions))
        with sessions() as s:
            s.query(Sample).delete()
            s.query(Exclusion).filter(Exclusion.stage == "csrs").delete()
            s.commit()
        report = extract_round(sessions, 1, gateway, lambda sha: store.get(blob_key(sha)))
        calls = len(llm.requests)
        extract_round(sessions, 1, gateway, lambda sha: store.get(blob_key(sha)))
        assert len(llm.requests) == calls  # a rerun pays for nothing
    assert report.dropped.get("llm_empty_response", 0) > 0  # effect predictions the model left empty
    # every model prompt carries its anchor; a verdict against it is dropped with its reason
    prompts = [r.text for r in llm.requests]
    assert prompts and all("Facts established for this trajectory" in p for p in prompts)
    assert all("- the task ended in " in p and "- this step was judged " in p for p in prompts)
    # one call per step: no two requests ask about the same step, and each asks every category it writes
    asked = [tuple(re.findall(r"^## (\w+)$", p, re.M)) for p in prompts]
    assert all(len(a) == len(set(a)) for a in asked) and max(len(a) for a in asked) > 1
    with sessions() as s:
        written = s.scalar(
            select(func.count(func.distinct(Sample.provenance["prompt_hash"].as_string()))).where(
                Sample.provenance["prompt_hash"].is_not(None)
            )
        )
    assert written == calls
    assert report.dropped.get("llm_contradicts_anchor", 0) > 0
    with sessions() as s:
        reflections = s.scalars(select(Sample).where(Sample.category == "self_reflection")).all()
        verified = s.scalars(select(Sample).where(Sample.category == "state_verification")).all()
        contradicted = s.scalars(select(Exclusion).where(Exclusion.reason == "llm_contradicts_anchor")).all()
    kept = [r.payload["reference"] for r in reflections if r.status == "kept"]
    assert kept and all(ref.startswith("GOOD") for ref in kept)  # it agreed with these anchors only
    assert verified and all(v.reason != "llm_contradicts_anchor" for v in verified)  # it followed the anchor
    assert contradicted
    with sessions() as s:
        summary = s.scalars(select(Sample).where(Sample.category == "state_summary")).first()
        action = s.scalars(select(Sample).where(Sample.category == "intent_execution")).first()
    assert summary is not None and summary.payload["response"] == "Thinking: 2 images"  # before and after
    assert summary.payload["reference"] and summary.provenance["model"] == "thinker"
    assert len(summary.provenance["prompt_hash"]) == 64
    assert action is not None and "reference" not in action.payload  # recorded actions are not rewritten


def test_the_model_writes_a_stable_share_of_steps() -> None:
    """`critics.csrs_model_share`: the steps a model writes are chosen by a hash of the step, so a rerun
    chooses the same ones, and the share chosen is the share asked for."""
    from critics.csrs_writer import chosen

    steps = [(f"episode-{e}", i) for e in range(100) for i in range(10)]
    half = [s for s in steps if chosen(s, 0.5)]
    assert half == [s for s in steps if chosen(s, 0.5)]
    assert 430 < len(half) < 570
    assert all(chosen(s, 1.0) for s in steps) and not any(chosen(s, 0.0) for s in steps)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_reply_that_answers_nothing_leaves_the_template_answers(
    engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer whose reply is no JSON object (a small model's garbage) changes no answer: each sample
    keeps its template answer, and its provenance says why the model's was not used."""
    from storage.keys import blob_key
    from storage.objectstore import open_object_store
    from tests.support.scripted_llm import Reply, ScriptedLLM
    from trajforge.gateway import LLMGateway
    from trajforge.settings import LLMSettings

    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    smoke_round(settings, queries_per_app=1, rollouts=1)
    sessions: sessionmaker[Session] = session_factory(engine)
    store = open_object_store(settings)
    with sessions() as s:
        before = {x.uid: (x.status, x.payload["response"]) for x in s.scalars(select(Sample))}
        s.query(Sample).delete()
        s.query(Exclusion).filter(Exclusion.stage == "csrs").delete()
        s.commit()
    with ScriptedLLM(default=Reply(content="garbage, not JSON")) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="tiny"))
        extract_round(sessions, 1, gateway, lambda sha: store.get(blob_key(sha)))
    assert llm.requests
    with sessions() as s:
        after = {x.uid: (x.status, x.payload["response"], x.provenance) for x in s.scalars(select(Sample))}
    written = [p for _, _, p in after.values() if "writer_error" in p]
    assert written and all(p["writer_error"].startswith("invalid_json") for p in written)
    same = [uid for uid in after if uid in before]
    assert same and all(after[uid][1] == before[uid][1] for uid in same)  # every answer the template's


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_writer_takes_the_model_critics_answers_without_asking_again(
    engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Critics and writer on one endpoint and model: the episode judge's request answered each step's
    knowledge questions, so extraction sends no request and the samples carry those answers, held
    to the anchor all the same (a self-reflection calling every step GOOD is dropped where the
    step's label is not)."""
    from critics.judge import judge_round_llm
    from critics.llm import KNOWLEDGE
    from storage.keys import blob_key
    from storage.objectstore import open_object_store
    from tests.support.scripted_llm import Reply, ScriptedLLM
    from trajforge.gateway import LLMGateway, closing
    from trajforge.settings import LLMSettings

    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    smoke_round(settings, queries_per_app=1, rollouts=1)
    sessions: sessionmaker[Session] = session_factory(engine)
    store = open_object_store(settings)
    said = {c: f"judge says {c}" for c in KNOWLEDGE} | {"self_reflection": "GOOD: it helps."}
    steps = [{"step": n, "label": "GOOD", "summary": "s"} | said for n in range(1, 33)]
    with ScriptedLLM(default=Reply(content=json.dumps({"steps": steps, "verdict": "correct"}))) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="one"))
        frames = lambda sha: store.get(blob_key(sha))  # noqa: E731
        asyncio.run(closing(gateway, judge_round_llm(sessions, 1, gateway, frames)))
        judged = len(llm.requests)
        with sessions() as s:
            s.query(Sample).delete()
            s.query(Exclusion).filter(Exclusion.stage == "csrs").delete()
            s.commit()
        report = extract_round(sessions, 1, gateway, frames, judge_writes=True)
        assert len(llm.requests) == judged  # no request of the writer's own
    with sessions() as s:
        written = [x for x in s.scalars(select(Sample)) if x.provenance.get("judgment") == "2:one"]
    assert {x.category for x in written} == set(KNOWLEDGE)
    assert all(x.payload["response"] == said[x.category] and x.provenance["model"] == "one" for x in written)
    assert sum(report.kept.values()) and "writer_error" not in str([x.provenance for x in written])
