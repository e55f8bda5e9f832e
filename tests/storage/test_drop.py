"""Rolling rounds back (`trajforge rounds drop`): every row made from the rounds goes, in one
transaction, on SQLite and PostgreSQL; a round a sealed version holds is refused, nothing deleted."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select

from publish.versions import PublishConfig, publish
from storage.db import session_factory
from storage.drop import drop_rounds
from storage.models import Base, Episode, Judgment, Round, Sample, Step
from storage.objectstore import open_object_store
from tests.support.smoke import smoke_round
from trajforge.errors import ConfigError
from trajforge.settings import load_settings


def _counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            t.name: conn.scalar(select(func.count()).select_from(t)) or 0 for t in Base.metadata.sorted_tables
        }


def test_a_dropped_round_leaves_no_row_and_a_sealed_one_is_kept(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    sessions = session_factory(engine)
    smoke_round(settings, queries_per_app=1, rollouts=1)
    publish(sessions, open_object_store(settings), "gui", PublishConfig(chunk_rows=64))
    one = _counts(engine)
    smoke_round(settings, queries_per_app=1, rollouts=1)
    with sessions() as s:
        second = s.scalar(select(Round.id).where(Round.number == 2))
        made = {
            "episode": s.scalar(select(func.count()).select_from(Episode).where(Episode.round_id == second))
            or 0,
            "sample": s.scalar(select(func.count()).select_from(Sample).where(Sample.round_id == second))
            or 0,
        }
    assert all(made.values()) and _counts(engine)["judgment"] > one["judgment"]

    with pytest.raises(ConfigError, match=r"round 1 has rows in dataset gui v1, a sealed version"):
        drop_rounds(sessions, 1)  # and round 2 with it: neither goes
    assert _counts(engine)["round"] == 2
    with pytest.raises(ConfigError, match="no round 3 in the database"):
        drop_rounds(sessions, 3)

    dropped, deleted = drop_rounds(sessions, 2)
    assert dropped == [2] and deleted["episode"] == made["episode"] and deleted["sample"] >= made["sample"]
    after = _counts(engine)  # every table as it was before round 2, but the screens' features: a cache
    assert after.pop("screen_feature") >= one.pop("screen_feature") and after == one  # by content
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Step)) and s.scalar(
            select(func.count()).select_from(Judgment)
        )
