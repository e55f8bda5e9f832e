"""The model critics through the gateway, against the scripted OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from PIL import Image
from sqlalchemy import Engine, select

from critics.judge import judge_round_llm
from critics.llm import KNOWLEDGE
from storage.db import session_factory
from storage.keys import blob_key
from storage.models import Judgment
from storage.objectstore import open_object_store
from tests.support.scripted_llm import Recorded, Reply, ScriptedLLM
from tests.support.smoke import smoke_round
from trajforge.actions import Action, Screen
from trajforge.draw import mark_point
from trajforge.gateway import LLMGateway
from trajforge.settings import LLMSettings, load_settings


def responder(rec: Recorded) -> Reply:
    """The episode judge's reply: every step GOOD with its knowledge answers, the episode correct; an
    episode with a swipe gets a ramble instead of JSON, as a model sometimes answers."""
    if "Swipe" in rec.text:
        return Reply(content="I think this swipe was fine")
    steps = [
        {"step": n, "analysis": "moves on", "summary": "taps the next item", "label": "GOOD"}
        | {category: f"answer {n}" for category in KNOWLEDGE}
        for n in range(1, 33)
    ]
    return Reply(content=json.dumps({"steps": steps, "analysis": "ends on the goal", "verdict": "correct"}))


@pytest.fixture
def judged_round(engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch):
    """Round 1 of the main job (offline critics already run), its sessions and object store."""
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    smoke_round(settings, queries_per_app=1, rollouts=1)
    return session_factory(engine), open_object_store(settings)


def test_llm_critics_judge_a_round_and_reruns_are_free(judged_round, engine: Engine) -> None:
    sessions, store = judged_round
    with ScriptedLLM(responder=responder) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="critic-vl", concurrency=8))
        from storage.llm_cache import SqlResponseCache

        gateway.cache = SqlResponseCache(sessions)
        report = asyncio.run(judge_round_llm(sessions, 1, gateway, lambda sha: store.get(blob_key(sha))))
        paid = len(llm.requests)
        again = asyncio.run(judge_round_llm(sessions, 1, gateway, lambda sha: store.get(blob_key(sha))))
        assert len(llm.requests) == paid  # the rerun was answered from the cache
    assert report.episodes == again.episodes == 4
    with session_factory(engine)() as s:
        steps = s.scalars(select(Judgment).where(Judgment.critic == "llm_step")).all()
        # one request per window of 8 steps: its screens are one per step, then the last step's after
        windows = [
            min(8, len(st) - start) + 1 for st in _steps_by_episode(s) for start in range(0, len(st), 8)
        ]
        assert paid == len(windows) < len(steps) and sorted(r.images for r in llm.requests) == sorted(windows)
        unparsed = [j for j in steps if j.label == "unparsed"]
        assert unparsed and all(
            j.parse_error and j.raw_output == "I think this swipe was fine" for j in unparsed
        )
        parsed = [j for j in steps if j.label == "GOOD"]
        assert parsed and all(json.loads(j.raw_output)["state_summary"].startswith("answer") for j in parsed)
        assert {j.label for j in steps} <= {
            "GOOD",
            "NEUTRAL",
            "unparsed",
        }  # NEUTRAL: unparseable policy output, no call
        assert s.scalars(select(Judgment).where(Judgment.critic == "llm_consensus_and")).all()


def test_interaction_point_is_marked() -> None:
    png = io.BytesIO()
    Image.new("RGB", (100, 200), "white").save(png, format="PNG")
    marked = mark_point(png.getvalue(), Action(kind="click", point=(500, 500)), Screen(100, 200))
    with Image.open(io.BytesIO(marked)) as img:
        assert img.getpixel((50 + 11, 100)) == (255, 0, 0)  # on the circle's rim, right of the point
        assert img.getpixel((5, 5)) == (255, 255, 255)


def test_calibration_queues_unparsed_verdicts_for_review(judged_round) -> None:
    from critics.calibration import calibrate_round

    sessions, store = judged_round
    with ScriptedLLM(default=Reply(content="no idea")) as llm:  # every model verdict unparseable
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="m"))
        asyncio.run(judge_round_llm(sessions, 1, gateway, lambda sha: store.get(blob_key(sha))))
    report = calibrate_round(sessions, 1)
    assert len(report["review_queue"]) == 4 and all(r["unparsed"] for r in report["review_queue"])
    assert "llm_multimodal:2:m" in report["channels"]
    # four episodes train no learned critic and no model verdict parsed: the consensus never voted
    assert "consensus:5" not in report["channels"]


def _consensus_labels(sessions) -> list[str]:
    with sessions() as s:
        return [
            j.label for j in s.scalars(select(Judgment).where(Judgment.critic == "llm_consensus_and")).all()
        ]


def test_the_model_consensus_abstains_when_no_channel_parsed(judged_round) -> None:
    sessions, store = judged_round
    with ScriptedLLM(default=Reply(content="no idea")) as llm:  # every model verdict unparseable
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="m"))
        report = asyncio.run(judge_round_llm(sessions, 1, gateway, lambda sha: store.get(blob_key(sha))))
    assert _consensus_labels(sessions) == ["undecided"] * 4 and report.correct == 0


def test_a_step_the_reply_left_out_is_unparsed_and_the_verdict_still_counts(judged_round) -> None:
    sessions, store = judged_round

    def first_step_only(rec: Recorded) -> Reply:
        first = {"step": 1, "summary": "taps", "label": "GOOD"}
        return Reply(content=json.dumps({"steps": [first], "verdict": "correct"}))

    with ScriptedLLM(responder=first_step_only) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="m"))
        report = asyncio.run(judge_round_llm(sessions, 1, gateway, lambda sha: store.get(blob_key(sha))))
    assert _consensus_labels(sessions) == ["correct"] * 4 and report.correct == 4
    assert report.steps["GOOD"] == 4 and set(report.steps) <= {"GOOD", "NEUTRAL", "unparsed"}
    with sessions() as s:
        errors = {j.parse_error for j in s.scalars(select(Judgment).where(Judgment.label == "unparsed"))}
    assert errors <= {"no_verdict_for_step"}


def _steps_by_episode(s) -> list[list[int]]:
    from storage.models import Episode, Step

    out: dict[int, list[int]] = {}
    for episode_id, step_id in s.execute(
        select(Episode.id, Step.id).join(Step, Step.episode_id == Episode.id)
    ):
        out.setdefault(episode_id, []).append(step_id)
    return list(out.values())


def test_a_refused_request_is_not_promised_a_retry() -> None:
    """A 4xx (too many images for the server, say) fails again on a rerun: the report says so."""
    from collections import Counter

    from critics.judge import JudgeReport

    refused = JudgeReport(episodes=2, pending=Counter({"llm_refused": 2})).render()
    assert "run again" not in refused and "the endpoint refused 2 requests (4xx)" in refused
    mixed = JudgeReport(episodes=2, pending=Counter({"llm_error": 1, "llm_refused": 1})).render()
    assert "run again to retry only those" in mixed and "refused 1 requests" in mixed
