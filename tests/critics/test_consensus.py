"""The consensus composes the configured channels by the configured rule, and is composed again when
the model critics have voted; the learned critic's checkpoint of a round is stored."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from critics.consensus import compose_round
from storage.db import insert_ignore, transaction
from storage.models import Judgment
from tests.support.spine import seed_episodes
from trajforge.settings import CriticSettings
from trajforge.verdicts import CONSENSUS

VOTES = {  # per episode: the channels' labels
    0: {"learned_trajectory": "correct", "heuristic_visual": "correct", "llm_textual": "incorrect"},
    1: {"learned_trajectory": "correct", "heuristic_visual": "abstain", "llm_textual": "unparsed"},
    2: {"learned_trajectory": "abstain", "heuristic_visual": "abstain"},
    3: {"learned_trajectory": "incorrect", "heuristic_visual": "correct", "llm_textual": "correct"},
}


def _seed(sessions: sessionmaker[Session]) -> list[int]:
    ids = seed_episodes(sessions, len(VOTES))
    rows = [
        {"critic": c, "critic_version": "1", "target": "episode", "target_id": ids[i], "label": label}
        for i, votes in VOTES.items()
        for c, label in votes.items()
    ]
    with transaction(sessions) as s:
        insert_ignore(s, Judgment, rows, ["critic", "critic_version", "target", "target_id"])
    return ids


def _consensus(sessions: sessionmaker[Session], ids: list[int]) -> list[str]:
    with sessions() as s:
        found = {
            j.target_id: j.label
            for j in s.scalars(
                select(Judgment).where(
                    Judgment.critic == CONSENSUS[0], Judgment.critic_version == CONSENSUS[1]
                )
            )
        }
    return [found[i] for i in ids]


def test_each_rule_over_the_channels_that_voted(sessions: sessionmaker[Session]) -> None:
    ids = _seed(sessions)
    assert compose_round(sessions, 1, CriticSettings()) == 1  # AND; abstain and unparsed do not vote
    assert _consensus(sessions, ids) == ["incorrect", "correct", "undecided", "incorrect"]
    compose_round(sessions, 1, CriticSettings(rule="majority"))  # rewritten, not added
    assert _consensus(sessions, ids) == ["correct", "correct", "undecided", "correct"]
    weighted = CriticSettings(rule="weighted", weights={"learned_trajectory": 3.0})
    compose_round(sessions, 1, weighted)
    assert _consensus(sessions, ids) == ["correct", "correct", "undecided", "incorrect"]
    only_learned = CriticSettings(channels=["learned_trajectory"])
    compose_round(sessions, 1, only_learned)
    assert _consensus(sessions, ids) == ["correct", "correct", "undecided", "incorrect"]
    with sessions() as s:
        rows = s.scalars(select(Judgment).where(Judgment.critic == CONSENSUS[0])).all()
    assert len(rows) == len(ids)  # one per episode whatever ran before
    assert {r.analysis for r in rows if r.target_id == ids[0]} == {"learned_trajectory:1=correct"}
