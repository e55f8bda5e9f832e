"""A round spread over machines through the existing engine: a `dask scheduler` and two `dask
worker` processes started from the CLI (as on other machines), the rollout and featurisation
shards sent there by Prefect's Dask task runner, sharing the device pool in the database and
the object store. One worker is killed mid-round; the round still stores exactly the episodes
a single-process (thread runner) round stores, each once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from storage.db import create_db_engine
from storage.models import Episode, Round, Step
from tests.conftest import free_port
from tests.support.evolve import tiny_config
from tests.support.processes import child_env

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def _env(tmp: Path) -> dict[str, str]:
    env = child_env("PREFECT_", "TRAJFORGE_", shared_prefect=True)
    return env | {"PREFECT_HOME": str(tmp / "prefect"), "PYTHONPATH": str(REPO)}


def _episodes(db: str) -> list[tuple]:
    """Round 1's episodes: each with its outcome, reason and every step's output."""
    with create_db_engine(db).connect() as conn:
        rows = conn.execute(
            select(Episode.id, Episode.uid, Episode.outcome, Episode.reason)
            .join(Round, Round.id == Episode.round_id)
            .where(Round.number == 1)
            .order_by(Episode.uid)
        )
        out = []
        for id_, uid, outcome, reason in rows.all():
            raw = conn.execute(select(Step.raw_output).where(Step.episode_id == id_).order_by(Step.index))
            out.append((uid, outcome, reason, tuple(raw.scalars())))
        return out


def _evolve(config: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    command = [str(BIN / "trajforge"), "evolve", "--rounds", "1", "--config", str(config)]
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=REPO)


def _stored(db_file: Path) -> int:
    if not db_file.exists():
        return 0
    try:
        with create_db_engine(f"sqlite:///{db_file}").connect() as conn:
            return int(conn.execute(select(func.count()).select_from(Episode)).scalar() or 0)
    except Exception:  # the schema is not there yet
        return 0


def test_a_round_on_a_dask_cluster_survives_a_killed_worker(tmp_path: Path, tiny_run: Path) -> None:
    """Round 1 of the tiny config on a Dask cluster that loses a worker mid-round holds exactly the
    episodes the same round holds on one process (the shared tiny run, `tests.conftest.tiny_run`)."""
    env = _env(tmp_path)
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    db_file = tmp_path / "dask" / "db.sqlite"
    config = tiny_config(
        tmp_path / "dask" / "evolve.yaml", f"sqlite:///{db_file}", runner="dask", dask_address=address
    )
    daemons = [
        subprocess.Popen(
            [str(BIN / "dask"), "scheduler", "--port", str(port), "--no-dashboard"],
            stdout=(tmp_path / "scheduler.log").open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    ]  # fmt: skip
    try:
        for i in range(2):  # two worker processes, as two machines would start them
            daemons.append(
                subprocess.Popen(
                    [str(BIN / "dask"), "worker", address, "--nthreads", "1", "--no-dashboard"],
                    stdout=(tmp_path / f"worker-{i}.log").open("w"), stderr=subprocess.STDOUT,
                    env=env, cwd=REPO, start_new_session=True,
                )
            )  # fmt: skip
        run = _evolve(config, env, tmp_path / "evolve.log")
        deadline = time.monotonic() + 300
        while _stored(db_file) < 2 and run.poll() is None:  # mid-round: some episodes stored
            assert time.monotonic() < deadline, (tmp_path / "evolve.log").read_text()[-3000:]
            time.sleep(0.2)
        os.killpg(daemons[1].pid, signal.SIGKILL)  # one worker dies with its in-flight shard
        if run.wait(timeout=600) != 0:  # the flow may fail with the worker: a rerun finishes the round
            rerun = _evolve(config, env, tmp_path / "evolve-again.log")
            assert rerun.wait(timeout=600) == 0, (tmp_path / "evolve-again.log").read_text()[-3000:]
    finally:
        for daemon in daemons:
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
    dask_episodes = _episodes(f"sqlite:///{db_file}")
    assert len(dask_episodes) == len({e[0] for e in dask_episodes})  # each episode once
    reference = _episodes(f"sqlite:///{tiny_run / 'ref.sqlite'}")
    assert dask_episodes == reference  # exactly the single-process round's episodes
