"""`curate_round` on a real round: dedup drops with their evidence, recovery from escapes
observed on a device, guidance for hard queries, balancing, and reruns that change nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select
from typer.testing import CliRunner

from critics.outcomes import round_outcomes
from curation.guidance import load_guidance
from curation.pipeline import curate_round
from curation.rollouts import load_rollouts
from flows.cli import app as cli
from rollout.pool import DevicePool
from rollout.recovery import device_prober
from rollout.sim.env import demonstrator
from rollout.sim.farm import SimFarm
from storage.db import session_factory
from storage.keys import blob_key
from storage.models import Episode, Exclusion, Guidance, Sample, ScreenFeature, Step
from storage.objectstore import open_object_store
from storage.samples import CATEGORIES
from tests.support.smoke import smoke_round
from trajforge.appspec import builtin_app_names, load_app
from trajforge.recovery import PROBE_REASONS
from trajforge.settings import CriticSettings, load_settings

APPS = [load_app(n) for n in builtin_app_names()]


@pytest.fixture
def curated(engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch):
    """Round 1 of the main job: 1 query per app, 4 rollouts each, judged, extracted and curated."""
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    monkeypatch.setenv("TRAJFORGE_CURATE_GUIDANCE_PASS_RATE", "1.0")  # every query gets guidance
    settings = load_settings()
    report = smoke_round(settings, queries_per_app=1, rollouts=4)
    return settings, session_factory(engine), report.curation


def _counts(sessions) -> dict[str, int]:
    with sessions() as s:
        return {
            t.__tablename__: s.scalar(select(func.count()).select_from(t)) or 0
            for t in (Sample, Exclusion, Guidance, ScreenFeature)
        }


def test_dedup_drops_carry_the_retained_duplicate_and_its_similarity(curated) -> None:
    _, sessions, report = curated
    assert report.dedup.total == 16 and 0 < report.dedup.kept < 16
    with sessions() as s:
        drops = s.scalars(select(Exclusion).where(Exclusion.stage == "dedup")).all()
        assert len(drops) == 16 - report.dedup.kept == sum(report.dedup.reasons.values())
        dropped = {d.item_key for d in drops}
        for d in drops:
            assert d.detail["duplicate_of"] not in dropped  # compared with a retained trajectory
            assert d.detail["similarity"] > report.threshold
            mine, theirs = (
                s.scalars(select(Episode).where(Episode.uid == uid)).one()
                for uid in (d.item_key, d.detail["duplicate_of"])
            )
            assert mine.query_id == theirs.query_id  # within one query group
            samples = s.scalars(select(Sample).where(Sample.episode_id == mine.id)).all()
            assert all(x.status == "dropped" for x in samples if x.category in CATEGORIES)
    assert sum(kept for kept, _ in report.dedup.groups.values()) == report.dedup.kept
    assert report.cache.computed == report.cache.unique < report.cache.requested


def test_a_rerun_writes_nothing_and_featurises_nothing(curated) -> None:
    settings, sessions, first = curated
    before = _counts(sessions)
    with sessions() as s:
        states = sorted(s.execute(select(Sample.uid, Sample.status, Sample.reason, Sample.weight)).all())
    store = open_object_store(settings)
    farm = SimFarm(store=store)  # the smoke round registered its devices in the pool
    prober = device_prober(DevicePool(sessions), farm, farm.backend)
    again = curate_round(
        sessions,
        1,
        store,
        settings.curate,
        demonstrator(APPS, store),
        round_outcomes(sessions, 1, settings.critics),
        prober=prober,
    )
    assert _counts(sessions) == before
    with sessions() as s:
        assert (
            sorted(s.execute(select(Sample.uid, Sample.status, Sample.reason, Sample.weight)).all()) == states
        )
    assert again.cache.computed == 0 and again.cache.cached == first.cache.unique
    assert again.samples == first.samples


def test_recovery_samples_come_from_escapes_observed_on_a_device(curated) -> None:
    settings, sessions, report = curated
    store = open_object_store(settings)
    rec = report.recovery
    with sessions() as s:
        escapes = s.scalars(select(Sample).where(Sample.category == "error_escape")).all()
        tracks = s.scalars(select(Sample).where(Sample.category == "back_on_track")).all()
        assert escapes and len(tracks) == len(escapes) == rec.samples["error_escape"]
        assert rec.probed == len(escapes) + sum(rec.skipped[r] for r in PROBE_REASONS)
        skipped = s.scalars(select(Exclusion).where(Exclusion.stage == "recovery")).all()
        assert len(skipped) == sum(rec.skipped.values())  # each kept with its reason
        for esc in escapes:
            prov = esc.provenance
            seen = prov["observed"]
            step = s.scalars(
                select(Step)
                .join(Episode)
                .where(Episode.uid == prov["reference"], Step.index == prov["steps"][0])
            ).one()
            wrong = s.scalars(select(Step).join(Episode).where(Episode.uid == prov["episode"])).all()
            assert any(w.action and w.action.kind == prov["wrong_action"]["kind"] for w in wrong)
            # The device was back on the reference's screen before the wrong action, and after the escape.
            assert seen["before"] == seen["back"] == step.screenshot != seen["error"]
            assert esc.payload["images"] == [seen["error"]] and store.exists(blob_key(seen["error"]))
            assert esc.payload["action"] == prov["escape"]
            track = next(t for t in tracks if t.provenance == prov)
            assert track.payload["images"] == [seen["back"]]
            assert step.action is not None and track.payload["action"] == step.action.core().stored()
    assert "the pixel-coincidence method would pair" in rec.render()


def test_hard_queries_get_guidance_for_their_next_rollouts(curated) -> None:
    _, sessions, report = curated
    assert report.guidance.queries == 4 and sum(report.guidance.written.values()) == 4
    with sessions() as s:
        rows = s.scalars(select(Guidance)).all()
        outcomes = dict(s.execute(select(Episode.uid, Episode.outcome)).all())
    for g in rows:
        assert g.source == "template" and g.text.startswith("To ") and "1. Tap" in g.text
        assert g.reference == "replay" or outcomes[g.reference] == "success"
        kept = [st for st in g.steps if st["kept"]]
        assert kept and all(st["reason"] for st in g.steps if not st["kept"])
    rollouts = load_rollouts(sessions, 1, round_outcomes(sessions, 1, CriticSettings()))
    assert set(load_guidance(sessions, [r.query.uid for r in rollouts])) == {g.query_uid for g in rows}


def test_balancing_reasons_are_counted_and_kept(curated) -> None:
    _, sessions, report = curated
    with sessions() as s:
        balanced = s.execute(
            select(Sample.reason, func.count())
            .where(Sample.reason.in_(("task_downsampled", "class_balance")))
            .group_by(Sample.reason)
        ).all()
        excluded = s.scalar(select(func.count()).select_from(Exclusion).where(Exclusion.stage == "balance"))
    assert dict(balanced) == dict(report.balance.dropped) and excluded == sum(report.balance.dropped.values())
    assert sum(report.balance.composition.values()) == report.samples["kept"]


def test_cli_curates_a_round_and_prints_counts_by_reason(engine: Engine, db_url: str, monkeypatch) -> None:
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    smoke_round(load_settings(), queries_per_app=1, rollouts=2)
    result = CliRunner().invoke(cli, ["curate", "--round", "1"])
    assert result.exit_code == 0, result.output
    assert "round 1" in result.output and "dedup: kept" in result.output
    assert "samples retained:" in result.output and "dropped by reason:" in result.output
