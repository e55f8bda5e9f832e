"""SIGKILL `trajforge evolve` at several points of a round, rerun the same command, and compare
with an uninterrupted run: the same sealed manifests, no duplicated rows, no episode redone.

The uninterrupted reference runs once per test run, on SQLite, and both databases' killed runs are
compared with it: the run is deterministic, so SQLite and PostgreSQL seal the same manifests.
Each database is killed at every other point (SQLite at the first and third, PostgreSQL at the
second and fourth), so every point is covered once and each database resumes from two kills."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from storage.db import create_db_engine
from storage.models import Base, DatasetVersion, Episode, Judgment, Policy, Round, Sample
from tests.support.evolve import tiny_config
from tests.support.processes import child_env

pytestmark = pytest.mark.slow
ROUNDS = "2"
TRAJFORGE = str(Path(sys.executable).with_name("trajforge"))

# (what has to be stored before the kill, SQL that says so)
KILL_POINTS = [
    ("rolling out round 1", select(func.count()).select_from(Episode).where(Episode.round_id == 1), 3),
    ("judging or curating round 1", select(func.count()).select_from(Sample), 1),
    ("publishing or training after round 1", select(func.count()).select_from(DatasetVersion), 1),
    ("rolling out round 2", select(func.count()).select_from(Episode).where(Episode.round_id == 2), 2),
]


def _evolve(config: Path, temporary_prefect: bool = False) -> subprocess.Popen[bytes]:
    """`evolve` reporting to this worker's Prefect server, as a deployment's commands do; with
    `temporary_prefect`, to a temporary server of its own, as the embedded default (`make run`) does."""
    return subprocess.Popen(
        [TRAJFORGE, "evolve", "--rounds", ROUNDS, "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the kill takes a temporary Prefect server with it, like a crash
        env=child_env("PREFECT_", shared_prefect=not temporary_prefect),
    )


def _finish(proc: subprocess.Popen[bytes]) -> str:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out.decode()[-3000:]
    return out.decode()


def _count(engine: Engine, stmt) -> int:
    try:
        with engine.connect() as conn:
            return int(conn.execute(stmt).scalar() or 0)
    except Exception:  # the schema is not there yet
        return 0


def _snapshot(engine: Engine) -> dict:
    with engine.connect() as conn:
        rows = {
            t.name: conn.execute(select(func.count()).select_from(t)).scalar()
            for t in Base.metadata.sorted_tables
        }
        hashes = conn.execute(
            select(DatasetVersion.version, DatasetVersion.manifest_sha256).order_by(DatasetVersion.version)
        ).all()
        episodes = conn.execute(select(func.count(Episode.uid.distinct()))).scalar()
        judged = conn.execute(
            select(Judgment.critic, Judgment.target, Judgment.target_id, func.count())
            .group_by(Judgment.critic, Judgment.target, Judgment.target_id)
            .having(func.count() > 1)
        ).all()
        samples = conn.execute(select(func.count(Sample.uid.distinct()))).scalar()
        policies = conn.execute(select(Policy.name, Policy.version).order_by(Policy.id)).all()
        done = conn.execute(select(Round.number).where(Round.status == "done").order_by(Round.number)).all()
    assert episodes == rows["episode"] and samples == rows["sample"] and not judged  # nothing twice
    for volatile in ("device", "device_lease", "alembic_version"):
        rows.pop(volatile, None)
    return {"rows": rows, "manifests": [tuple(h) for h in hashes], "policies": policies, "done": done}


def _comparable(snapshot: dict) -> dict:
    """The snapshot as JSON has it (rows and tuples as lists), so a stored reference compares equal."""
    return dict(json.loads(json.dumps(snapshot, default=list)))


@pytest.fixture(scope="session")
def reference(tiny_run: Path) -> dict:
    """The uninterrupted run's snapshot: two rounds on SQLite, made once for every database and worker
    (`tests.conftest.tiny_run`, which other loop tests read too)."""
    expected = _comparable(_snapshot(create_db_engine(f"sqlite:///{tiny_run / 'ref.sqlite'}")))
    assert expected["done"] == [[1], [2]] and len(expected["manifests"]) == 2
    return expected


def test_killed_anywhere_the_rerun_ends_where_an_uninterrupted_run_does(
    tmp_path: Path, db_url: str, engine: Engine, reference: dict
) -> None:
    """PostgreSQL with a Prefect server of its own that outlives the kills, as deployed. SQLite as the
    embedded default runs too: its first kill takes the run's temporary Prefect server with it, and
    the resuming run starts a temporary server on the Prefect database that kill left."""
    config = tiny_config(tmp_path / "run" / "evolve.yaml", db_url)
    embedded = db_url.startswith("sqlite")
    watch = create_db_engine(db_url) if embedded else engine
    points = KILL_POINTS[0::2] if embedded else KILL_POINTS[1::2]
    for i, (where, stmt, at_least) in enumerate(points):
        proc = _evolve(config, temporary_prefect=embedded and i == 0)
        deadline = time.monotonic() + 300
        while _count(watch, stmt) < at_least and proc.poll() is None:
            assert time.monotonic() < deadline, f"never reached: {where}"
            time.sleep(0.05)
        if proc.poll() is not None:
            out = proc.communicate()[0].decode()[-3000:]
            pytest.fail(f"the run ended (exit {proc.returncode}) before the kill point: {where}\n{out}")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    out = _finish(_evolve(config, temporary_prefect=embedded))
    assert "round 2/2: policy knn@1" in out
    assert _comparable(_snapshot(watch)) == reference
    again = _finish(_evolve(config))  # a finished run is a no-op
    assert again.count("already done") == 2 and _comparable(_snapshot(watch)) == reference


def test_sigterm_stops_at_a_step_boundary_with_one_line_and_the_rerun_ends_as_uninterrupted(
    tmp_path: Path, reference: dict
) -> None:
    """SIGTERM (to `evolve` alone, as a service manager sends it) while rolling out and while
    judging: each run ends within seconds, exit 143, with one line; the rerun matches the reference."""
    db = f"sqlite:///{tmp_path / 'stop.sqlite'}"
    config = tiny_config(tmp_path / "run" / "evolve.yaml", db)
    watch = create_db_engine(db)
    for where, stmt, at_least in KILL_POINTS[:2]:
        proc = _evolve(config)
        deadline = time.monotonic() + 300
        while _count(watch, stmt) < at_least and proc.poll() is None:
            assert time.monotonic() < deadline, f"never reached: {where}"
            time.sleep(0.05)
        assert proc.poll() is None, f"the run ended before the stop point: {where}"
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        out = proc.communicate(timeout=120)[0].decode()
        took = time.monotonic() - sent
        assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
        assert took < 30, f"{where}: {took:.0f}s after SIGTERM"
        after = out.split("round 1/2: running…\n", 1)[1].splitlines()
        assert after == [
            "stopped by SIGTERM at a step boundary: what was stored is kept; rerun `trajforge evolve` "
            "to resume"
        ], out[-3000:]
    out = _finish(_evolve(config))
    assert "round 2/2: policy knn@1" in out
    assert _comparable(_snapshot(watch)) == reference
