"""Verifier-free operation: where no anchor exists the calibrated consensus decides, only for apps
whose measured accuracy clears `trust_accuracy`; the rest waits for a human, with a reason."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from annotation.queue import review_queue
from critics.csrs import extract_round
from evolve.smoke import run_smoke_round
from storage.db import session_factory
from storage.models import Anchor, Episode, Exclusion, Sample
from storage.outcomes import UNTRUSTED, decide_outcomes, measure_trust
from storage.samples import OUTCOME_STAGE
from trajforge.settings import AnnotationSettings, CriticSettings, load_settings


@pytest.fixture
def hidden(
    engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[sessionmaker[Session], dict[int, bool]]:
    """A judged round whose even episodes lost their verifier anchor (a farm with no verifier
    for them); returns the hidden verdicts of those episodes."""
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    run_smoke_round(load_settings(), queries_per_app=2, rollouts=2)
    sessions = session_factory(engine)
    with sessions.begin() as s:
        episodes = s.execute(select(Episode.id, Episode.outcome).order_by(Episode.id)).all()
        hidden = {eid: outcome == "success" for eid, outcome in episodes[::2]}
        s.execute(delete(Anchor).where(Anchor.episode_id.in_(list(hidden))))
        s.execute(delete(Sample))  # extraction runs again below, under the new outcomes
    return sessions, hidden


def test_a_trusted_critic_decides_unanchored_episodes_and_agrees_with_the_hidden_verifier(hidden) -> None:
    sessions, truth = hidden
    settings = CriticSettings(trust_accuracy=0.9, trust_min_anchored=2)
    with sessions() as s:
        trust = measure_trust(s, 1)
        outcomes = decide_outcomes(s, 1, settings)
    trusted = {app for app, t in trust.items() if t.anchored >= 2 and t.accuracy >= 0.9}
    assert trusted, trust
    by_critic = {eid: o for eid, o in outcomes.items() if o.source == "critic"}
    assert by_critic and set(by_critic) <= set(truth)
    agree = sum(o.success == truth[eid] for eid, o in by_critic.items())
    assert agree / len(by_critic) >= 0.95, (agree, len(by_critic))
    assert all(o.accuracy is not None and o.accuracy >= 0.9 for o in by_critic.values())
    assert all(outcomes[eid].source == "verifier" for eid in outcomes if eid not in truth)

    report = extract_round(sessions, 1, settings=settings)
    with sessions() as s:
        sources = {
            p["anchor"]["source"]
            for p in s.scalars(select(Sample.provenance).where(Sample.episode_id.in_(list(by_critic))))
        }
        accuracy = s.scalars(select(Sample.provenance).where(Sample.episode_id.in_(list(by_critic)))).first()
    assert (
        sources == {"critic"}
        and accuracy["anchor"]["accuracy"] >= 0.9
        and accuracy["anchor"]["anchored"] >= 2
    )
    assert sum(report.kept.values()) > 0


def test_an_untrusted_critic_leaves_episodes_to_humans_with_a_reason(hidden) -> None:
    sessions, truth = hidden
    settings = CriticSettings(trust_min_anchored=10_000)  # no app has been measured enough
    report = extract_round(sessions, 1, settings=settings)
    assert report.undecided == {UNTRUSTED: len(truth)}
    with sessions() as s:
        assert not s.scalars(select(Sample).where(Sample.episode_id.in_(list(truth)))).all()
        queued = {c.episode_id: c.reasons for c in review_queue(s, 1, AnnotationSettings())}
        kept = s.scalars(select(Exclusion.reason).where(Exclusion.stage == OUTCOME_STAGE)).all()
    assert set(kept) == {UNTRUSTED} and len(kept) == len(truth)
    assert all("no_outcome" in queued[eid] for eid in truth)
    with sessions() as s:  # anchors only: the same episodes stay undecided, none is guessed
        anchored = decide_outcomes(s, 1, CriticSettings(outcome="anchor"))
    assert {anchored[eid].source for eid in truth} == {"none"}
    assert all(anchored[eid].success is None for eid in truth)


def test_critic_mode_lets_the_verifier_only_calibrate(hidden) -> None:
    sessions, _ = hidden
    with sessions() as s:
        outcomes = decide_outcomes(
            s, 1, CriticSettings(outcome="critic", trust_accuracy=0.5, trust_min_anchored=1)
        )
    assert "verifier" not in {o.source for o in outcomes.values()}
