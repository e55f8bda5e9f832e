"""Pass-rate labels and the zero-pass hold-out on a real curated round (`curation.curriculum`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from critics.outcomes import round_outcomes
from curation.curriculum import HELD, ZERO_PASS, label_and_hold, tier_of
from curation.pipeline import curate_round
from curation.rollouts import Rollout, by_query, load_rollouts
from evolve.spine import open_spine
from publish.shards import PublishConfig, selected_rows
from rollout.sim.env import demonstrator
from storage.db import session_factory, transaction
from storage.models import Episode, QueryPassRate, Round, Sample
from storage.models import Query as QueryRow
from tests.support.evolve import roll_out, stage, tiny_config
from tests.support.smoke import smoke_round
from trajforge.settings import CurationSettings, load_settings


@pytest.fixture
def curated(tmp_path: Path, db_url: str, engine: Engine):
    """Round 1 of the loop, random explorer only (no guided demonstrations): 4 queries, 4 rollouts, curated."""
    settings = load_settings(tiny_config(tmp_path / "evolve.yaml", db_url, guided_fraction=0, rollouts=4))
    stage(settings, "start", 1)
    uids = stage(settings, "queries", 1)
    stage(settings, "devices", 1)
    roll_out(settings, 1, uids)
    stage(settings, "judge", 1)
    stage(settings, "calibrate", 1)
    spine = open_spine(settings)
    report = curate_round(
        spine.sessions,
        1,
        spine.store,
        settings.curate,
        demonstrator(spine.apps, spine.store),
        round_outcomes(spine.sessions, 1, settings.critics),
    )
    return settings, spine.sessions, report


def _action_samples(sessions, query_id: int) -> list[Sample]:
    with sessions() as s:
        rows = s.scalars(
            select(Sample).join(Episode, Episode.id == Sample.episode_id).where(Episode.query_id == query_id)
        ).all()
    return [r for r in rows if r.payload.get("action") is not None]


def test_every_query_is_labelled_and_unsolved_ones_are_held_out_of_publishing(curated) -> None:
    settings, sessions, report = curated
    with sessions() as s:
        labels = s.scalars(select(QueryPassRate)).all()
        queries = s.scalars(select(QueryRow)).all()
    assert {lab.query_id for lab in labels} == {q.id for q in queries}
    assert sum(report.curriculum.tiers.values()) == len(queries) == 4
    held = 0
    for lab in labels:
        assert lab.rollouts == 4 and 0 <= lab.successes <= 4
        assert lab.tier == tier_of(lab.successes / lab.rollouts, lab.solved, settings.curate)
        samples = _action_samples(sessions, lab.query_id)
        if lab.solved:
            assert all(x.status != HELD for x in samples)
        else:
            assert lab.tier == "unsolved"
            assert all(x.status != "kept" for x in samples)
            held += sum(x.status == HELD and x.reason == ZERO_PASS for x in samples)
    assert held == report.curriculum.held
    assert report.samples[ZERO_PASS] == held
    published = {row["uid"] for row in selected_rows(sessions, PublishConfig(rounds=(1,)))}
    with sessions() as s:
        held_uids = set(s.scalars(select(Sample.uid).where(Sample.status == HELD)))
    assert held_uids and not published & held_uids
    unfiltered = PublishConfig(rounds=(1,), statuses=("kept", "dropped", HELD))
    assert held_uids <= {row["uid"] for row in selected_rows(sessions, unfiltered)}


def test_a_later_success_releases_the_held_samples_of_its_query(curated) -> None:
    settings, sessions, report = curated
    assert report.curriculum.held > 0
    with sessions() as s:
        first = s.scalars(select(Round).where(Round.number == 1)).one()
        unsolved = s.scalars(select(QueryPassRate).where(QueryPassRate.tier == "unsolved")).first()
        assert unsolved is not None
        query = s.get(QueryRow, unsolved.query_id)
        assert query is not None
        domain = query.to_domain("any")
    held_before = [x.uid for x in _action_samples(sessions, unsolved.query_id) if x.status == HELD]
    assert held_before
    with transaction(sessions) as s:
        later = Round(number=2, policy_id=first.policy_id, seed=2, config_hash=first.config_hash)
        s.add(later)
        s.flush()
        later_id = later.id
    # round 2 solves it (a revisit's success: an episode not of round 2's own policy counts as solved)
    solved = {
        domain.uid: [Rollout(episode_id=-1, uid="revisit", query=domain, steps=[], labels=[], success=True)]
    }
    again = label_and_hold(sessions, later_id, solved, settings.curate)
    assert again.released == len(held_before) and again.held == 0
    assert again.tiers == {"hard": 1}  # solved, but no rollout of round 2's own policy
    for x in _action_samples(sessions, unsolved.query_id):
        if x.uid in held_before:
            assert x.status == "kept" and x.reason is None
            assert x.provenance["released_in_round"] == 2
    assert label_and_hold(sessions, later_id, solved, settings.curate).released == 0  # a rerun: nothing more


def test_the_hold_out_can_be_turned_off(engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    monkeypatch.setenv("TRAJFORGE_CURATE_HOLD_ZERO_PASS", "false")
    settings = load_settings()
    report = smoke_round(settings, queries_per_app=1, rollouts=2).curation
    sessions = session_factory(engine)
    assert report.curriculum.held == 0
    with sessions() as s:
        assert not s.scalars(select(Sample).where(Sample.status == HELD)).first()
        assert len(s.scalars(select(QueryPassRate)).all()) == 4  # the labels are kept all the same
    rollouts = load_rollouts(sessions, 1, round_outcomes(sessions, 1, settings.critics))
    assert sum(label_and_hold(sessions, 1, by_query(rollouts), settings.curate).tiers.values()) == 4


@pytest.mark.parametrize(
    ("rate", "solved", "tier"),
    [
        (0.0, False, "unsolved"),
        (0.0, True, "hard"),
        (0.25, True, "hard"),
        (0.5, True, "medium"),
        (1.0, True, "easy"),
    ],
)
def test_tiers_follow_the_curation_thresholds(rate: float, solved: bool, tier: str) -> None:
    assert tier_of(rate, solved, CurationSettings()) == tier
