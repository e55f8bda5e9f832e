"""Schema, migrations and bulk writes, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, func, inspect, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from storage.db import create_db_engine, current_revision, insert_ignore, transaction, upgrade
from storage.models import Base, Exclusion, Judgment, Step
from tests.support.spine import seed_episodes, step_rows
from trajforge.errors import ConfigError, StorageError


def test_upgrade_is_idempotent_and_matches_models(engine: Engine) -> None:
    upgrade(engine)  # second time: nothing to do
    assert current_revision(engine) == "0014"
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        tables = set(inspect(conn).get_table_names())
    expected = {
        "app",
        "query",
        "policy",
        "round",
        "episode",
        "step",
        "judgment",
        "anchor",
        "sample",
        "dataset",
        "dataset_version",
        "shard",
        "version_shard",
        "llm_call",
        "exclusion",
    }
    assert expected <= tables


def test_naming_convention_applied(engine: Engine) -> None:
    with engine.connect() as conn:
        uniques = {u["name"] for u in inspect(conn).get_unique_constraints("step")}
        pk = inspect(conn).get_pk_constraint("step")["name"]
    assert "uq_step_episode_id_index" in uniques
    if engine.dialect.name == "postgresql":  # SQLite does not keep PK names
        assert pk == "pk_step"


def test_bulk_insert_is_idempotent(sessions: sessionmaker[Session]) -> None:
    ep = seed_episodes(sessions)[0]
    rows = step_rows(ep, 500)
    with transaction(sessions) as s:
        assert insert_ignore(s, Step, rows, ["episode_id", "index"], count=True) == 500
    with transaction(sessions) as s:
        assert (
            insert_ignore(s, Step, rows[:10] + step_rows(ep, 510)[500:], ["episode_id", "index"], count=True)
            == 10
        )
    with transaction(sessions) as s:  # the fast path writes the same, and reports nothing
        assert insert_ignore(s, Step, rows, ["episode_id", "index"]) is None
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Step)) == 510
        step = s.scalars(select(Step).where(Step.index == 7)).one()
        assert step.action is not None and step.action.stored() == {"kind": "click", "point": [7, 49]}


def test_unique_keys_protect_reruns(sessions: sessionmaker[Session]) -> None:
    ep = seed_episodes(sessions)[0]
    judgment = {
        "critic": "step",
        "critic_version": "1",
        "target": "step",
        "target_id": ep,
        "label": "GOOD",
    }
    with transaction(sessions) as s:
        insert_ignore(s, Judgment, [judgment, judgment], ["critic", "critic_version", "target", "target_id"])
    with pytest.raises(IntegrityError), transaction(sessions) as s:
        s.add(Exclusion(stage="rollout", item_type="step", item_key="e1:0", reason="invalid_json"))
        s.add(Exclusion(stage="rollout", item_type="step", item_key="e1:0", reason="invalid_json"))
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Judgment)) == 1
        assert s.scalar(select(func.count()).select_from(Exclusion)) == 0  # rolled back whole


def test_foreign_keys_enforced(sessions: sessionmaker[Session]) -> None:
    with pytest.raises(IntegrityError), transaction(sessions) as s:
        s.add(Step(episode_id=999_999, index=0, screenshot="a" * 64, width=1, height=1))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "is malformed; set TRAJFORGE_DB_URL like"),
        ("mysql://root@localhost/x", "'mysql' is not supported"),
        ("postgresql+nodriver://u@h/d", "unknown driver"),
    ],
)
def test_bad_urls_are_config_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        create_db_engine(url)


def test_unreachable_database_is_storage_error_with_redacted_password() -> None:
    engine = create_db_engine("postgresql+psycopg://u:hunter2@127.0.0.1:1/db", connect_timeout_s=1)
    with pytest.raises(StorageError) as info:
        upgrade(engine)
    assert "cannot connect to database postgresql+psycopg://u:***@127.0.0.1:1/db" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_old_stage_marks_become_the_runners_reports(tmp_path) -> None:
    """Migrations 0011 and 0014: a round's stages are kept in one place, the runner's reports. A
    finished round's old marks (0011 gives the `extracted` mark to rounds with samples) become reports
    of judge, calibrate and curate, so it can still be published; an unfinished round's marks go, and
    the loop runs those stages again when it resumes it."""
    from storage.models import Policy, Round, Sample

    eng = create_db_engine(f"sqlite:///{tmp_path / 'old.db'}")
    upgrade(eng, "0010")
    sessions = sessionmaker(eng)
    with transaction(sessions) as s:
        policy = Policy(name="p", version=0)
        s.add(policy)
        s.flush()
        marks = {"stages": {"judged": "2026-11-01T00:00:00", "curated": "2026-11-01T00:10:00"}}
        old = Round(number=1, policy_id=policy.id, stats=marks, status="done")
        running = Round(number=2, policy_id=policy.id, stats={**marks, "reports": {"queries": ["q"]}})
        s.add_all([old, running])
        s.flush()
        s.add(Sample(uid="s1", round_id=old.id, category="action_prediction", payload={}))
    upgrade(eng)
    with sessions() as s:
        stats = {r.number: r.stats or {} for r in s.scalars(select(Round))}
    assert "stages" not in stats[1] and "stages" not in stats[2]
    assert stats[1]["reports"] == {
        "judge": {"marked": "2026-11-01T00:00:00", "migrated": "0014"},
        "calibrate": {"marked": "2026-11-01T00:00:00", "migrated": "0014"},  # 0011's `extracted`
        "curate": {"marked": "2026-11-01T00:10:00", "migrated": "0014"},
    }
    assert stats[2]["reports"] == {"queries": ["q"]}
