"""The smoke round end to end (the main job), on every database and object store."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select

from critics.learned import Checkpoint
from evolve.smoke import run_smoke_round
from storage.db import session_factory
from storage.keys import blob_key
from storage.models import Anchor, Episode, Exclusion, Judgment, Query, Round, Step
from storage.objectstore import open_object_store
from trajforge.settings import S3Settings, load_settings


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "s3":
        s3: S3Settings = request.getfixturevalue("s3_settings")
        monkeypatch.setenv("TRAJFORGE_STORE_BACKEND", "s3")
        monkeypatch.setenv("TRAJFORGE_S3_ENDPOINT", s3.endpoint)
        monkeypatch.setenv("TRAJFORGE_S3_BUCKET", s3.bucket)
        monkeypatch.setenv("TRAJFORGE_S3_ACCESS_KEY", "testing")
        monkeypatch.setenv("TRAJFORGE_S3_SECRET_KEY", "testing")
    return str(request.param)


def test_smoke_rounds_write_the_spine(
    engine: Engine, db_url: str, store_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    first = run_smoke_round(settings, queries_per_app=2, rollouts=1)
    assert first.round_number == 1
    assert (
        dict(first.queries)
        == dict(first.episodes)
        == {"ridehail": 2, "settings": 2, "shopping": 2, "takeout": 2}
    )
    assert first.frames_written > 0
    second = run_smoke_round(settings, queries_per_app=2, rollouts=1)
    assert second.round_number == 2 and second.frames_deduped > 0  # the launcher, home screens: stored once
    assert first.rollout.completed == 8 and first.rollout.requested == 8
    # 8 anchored episodes fit no learned critic on other queries: round 1's consensus never votes;
    # in round 2 it has 16 anchors, and every round-2 episode is judged by a model fitted without its query
    assert first.calibration == {} and second.calibration["n"] == 8

    sessions = session_factory(engine)
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Query)) == 16  # new queries each round
        assert s.scalar(select(func.count()).select_from(Episode)) == 16
        steps = s.scalar(select(func.count()).select_from(Step))
        assert steps == first.rollout.steps + second.rollout.steps
        # per step the route check and the learned step critic, then per episode: learned channel,
        # visual channel, consensus
        assert s.scalar(select(func.count()).select_from(Judgment)) == 2 * steps + 3 * 16
        assert s.scalar(select(func.count()).select_from(Anchor)) == 16
        broken = s.scalars(select(Step).where(Step.parse_error.is_not(None))).all()
        reasons = s.scalars(select(Exclusion.reason).where(Exclusion.item_type == "step")).all()
        assert len(broken) == len(reasons) == first.reasons["invalid_json"] + second.reasons["invalid_json"]
        assert all(b.action is None and b.raw_output.startswith("<tool_call>") for b in broken)
        for episode in s.scalars(select(Episode)):
            anchor = s.scalars(select(Anchor).where(Anchor.episode_id == episode.id)).one()
            assert anchor.label == episode.outcome  # the goal reached and the episode ended by the policy
            assert anchor.meta["success"] == episode.verifier_success  # the state check itself
            if episode.outcome == "failure":
                assert episode.reason  # the failed constraint, or the policy gave up
        rounds = s.scalars(select(Round).order_by(Round.number)).all()
        assert [r.status for r in rounds] == ["done", "done"]
        fitted = [r.stats["learned_critic"] for r in rounds]  # fitted on every anchor so far, stored
        assert [f["anchored"] for f in fitted] == [8, 16]
        checkpoint = open_object_store(settings).get(fitted[1]["key"])
        assert Checkpoint.from_json(checkpoint).version == fitted[1]["version"]
        shot = s.scalars(select(Step.screenshot)).first()
    assert shot is not None and open_object_store(settings).exists(blob_key(shot))
