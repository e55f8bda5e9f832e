"""The consensus composes the configured channels by the configured rule, and is composed again when
the model critics have voted; the learned critic's checkpoint of a round is stored."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from critics.consensus import compose_round
from storage.db import insert_ignore, transaction
from storage.models import Anchor, Judgment
from tests.support.spine import seed_episodes
from trajforge.settings import CriticSettings
from trajforge.verdicts import CONSENSUS

VOTES = {  # per episode: the channels' labels
    0: {"learned_trajectory": "correct", "heuristic_visual": "correct", "llm_multimodal": "incorrect"},
    1: {"learned_trajectory": "correct", "heuristic_visual": "abstain", "llm_multimodal": "unparsed"},
    2: {"learned_trajectory": "abstain", "heuristic_visual": "abstain"},
    3: {"learned_trajectory": "incorrect", "heuristic_visual": "correct", "llm_multimodal": "correct"},
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


def _anchored_votes(sessions: sessionmaker[Session], n: int, wrong: set[int]) -> dict[int, bool]:
    """`n` episodes, every second one a success by the verifier; the learned channel is always right
    and the model channel wrong on the episodes in `wrong`. Returns each episode's anchored outcome."""
    ids = seed_episodes(sessions, n)
    truth = {episode_id: i % 2 == 0 for i, episode_id in enumerate(ids)}
    rows = []
    for i, (episode_id, success) in enumerate(truth.items()):
        model_says = success != (i in wrong)
        for critic, says in (("learned_trajectory", success), ("llm_multimodal", model_says)):
            rows.append(
                {
                    "critic": critic,
                    "critic_version": "1",
                    "target": "episode",
                    "target_id": episode_id,
                    "label": "correct" if says else "incorrect",
                }
            )
    with transaction(sessions) as s:
        insert_ignore(s, Judgment, rows, ["critic", "critic_version", "target", "target_id"])
        s.add_all(
            Anchor(episode_id=e, source="verifier", label="success" if ok else "failure")
            for e, ok in truth.items()
        )
    return truth


def _accuracy(sessions: sessionmaker[Session], truth: dict[int, bool]) -> float:
    said = _consensus(sessions, list(truth))
    return sum((label == "correct") == truth[e] for e, label in zip(truth, said, strict=True)) / len(truth)


def test_the_calibrated_rule_never_lets_a_weaker_channel_pull_the_consensus_below_the_best(
    sessions: sessionmaker[Session],
) -> None:
    # the model channel is wrong on 30% of the episodes (12 of 40), 6 successes and 6 failures
    truth = _anchored_votes(sessions, 40, wrong=set(range(12)))
    compose_round(sessions, 1, CriticSettings(rule="and"))
    under_and = _accuracy(sessions, truth)
    assert under_and == 1 - 6 / 40  # AND: each wrong "incorrect" of the model vetoes a right "correct"
    compose_round(sessions, 1, CriticSettings())  # calibrated, each episode weighed without its own anchor
    assert _accuracy(sessions, truth) == 1.0
    with sessions() as s:
        row = s.scalars(
            select(Judgment).where(Judgment.critic == CONSENSUS[0], Judgment.target_id == 1)
        ).one()
    # episode 1: a success the model called a failure. Its terms, counted without it: the learned
    # channel log(20/21) - log(1/22), the model log(6/21) - log(15/22); the prior log(20/21)
    assert row.analysis.endswith("| log-odds +2.12 (learned_trajectory +3.04 llm_multimodal -0.87)")
    assert row.score == pytest.approx(1 / (1 + math.exp(-2.1237)), abs=1e-3)
    # too few anchored votes to weigh a channel: the rule is AND, as before any anchor
    compose_round(sessions, 1, CriticSettings(calibration_min_anchored=41))
    assert _accuracy(sessions, truth) == under_and
