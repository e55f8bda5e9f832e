"""Model critics that answer wrongly at a known rate: calibration measures that rate, and the trust
gate lets the consensus of those channels decide outcomes only for apps above `trust_accuracy`."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from critics.calibration import calibrate_round
from critics.consensus import compose_round
from critics.judge import judge_round_llm
from critics.outcomes import decide_outcomes, measure_trust
from storage.anchors import episode_apps
from storage.db import session_factory
from storage.models import Anchor, Episode
from storage.models import Query as QueryRow
from storage.objectstore import frame_reader, open_object_store
from tests.support.scripted_llm import Recorded, Reply, ScriptedLLM
from tests.support.smoke import smoke_round
from trajforge.gateway import LLMGateway
from trajforge.settings import CriticSettings, LLMSettings, load_settings

WRONG_SHARE = 0.25
MODEL_ONLY = ["llm_multimodal"]


def _judged_by_a_scripted_model(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch, wrong_share: float, settings: CriticSettings
) -> sessionmaker[Session]:
    """A smoke round of 20 episodes, judged by a model critic that answers wrongly on exactly
    `wrong_share` of them, composed by `settings`."""
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    loaded = load_settings()
    smoke_round(loaded, queries_per_app=5, rollouts=1)
    sessions = session_factory(engine)
    with sessions() as s:
        rows = s.execute(
            select(QueryRow.instruction, Anchor.label)
            .join(Episode, Episode.query_id == QueryRow.id)
            .join(Anchor, Anchor.episode_id == Episode.id)
        ).all()
    truth = {instruction: label == "success" for instruction, label in rows}
    assert len(truth) == len(rows) == 20  # one episode per instruction: the answer is the episode's
    ranked = sorted(truth, key=lambda i: hashlib.sha256(i.encode()).hexdigest())
    wrong = set(ranked[: round(wrong_share * len(ranked))])

    def responder(rec: Recorded) -> Reply:
        steps = [{"step": n, "summary": "a step", "label": "NEUTRAL"} for n in range(1, 9)]
        instruction = re.search(r"Task: (.*)", rec.text)
        assert instruction is not None
        right = truth[instruction.group(1).strip()]
        says = right != (instruction.group(1).strip() in wrong)
        verdict = "correct" if says else "incorrect"
        return Reply(content=json.dumps({"steps": steps, "analysis": "-", "verdict": verdict}))

    with ScriptedLLM(responder=responder) as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, model="m", concurrency=8))
        store = open_object_store(loaded)
        asyncio.run(judge_round_llm(sessions, 1, gateway, frame_reader(store), settings=settings))
    return sessions


def test_a_model_critic_wrong_at_a_known_rate_is_measured_so_and_trusted_only_above_the_bar(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    only_models = CriticSettings(channels=MODEL_ONLY)
    sessions = _judged_by_a_scripted_model(engine, db_url, monkeypatch, WRONG_SHARE, only_models)
    report = calibrate_round(sessions, 1)
    for channel in ("llm_multimodal:2:m", "consensus:5"):
        measured = report["channels"][channel]
        assert measured["n"] == 20 and abs(measured["accuracy"] - (1 - WRONG_SHARE)) <= 0.03, measured

    with sessions() as s:
        trust = measure_trust(s, 1)
        apps = episode_apps(s)
        for bar in (0.9, 0.7):
            outcomes = decide_outcomes(
                s, 1, CriticSettings(outcome="critic", trust="gate", trust_accuracy=bar, trust_min_anchored=1)
            )
            decided = {apps[e] for e, o in outcomes.items() if o.source == "critic"}
            assert decided == {app for app, t in trust.items() if t.accuracy >= bar}, (bar, trust)
            assert all(o.source == "critic_untrusted" for e, o in outcomes.items() if apps[e] not in decided)
    assert {app for app, t in trust.items() if t.accuracy >= 0.9} != set(trust)  # the bar held some back


def test_a_model_critic_wrong_on_30_percent_does_not_pull_the_consensus_below_the_best_channel(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default channels and rule (`calibrated`) with a model critic wrong on 30% of the
    episodes: the consensus is at least as accurate as the best channel; AND is not."""
    sessions = _judged_by_a_scripted_model(engine, db_url, monkeypatch, 0.3, CriticSettings())
    channels = calibrate_round(sessions, 1)["channels"]
    consensus = channels.pop("consensus:5")
    best = max(channels.values(), key=lambda st: st["accuracy"])
    assert channels["llm_multimodal:2:m"]["accuracy"] == pytest.approx(0.7)
    assert best["n"] == consensus["n"] == 20 and consensus["accuracy"] >= best["accuracy"], channels
    compose_round(sessions, 1, CriticSettings(rule="and"))
    under_and = calibrate_round(sessions, 1)["channels"]["consensus:5"]
    assert under_and["accuracy"] < best["accuracy"], under_and
