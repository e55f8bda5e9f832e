"""Scheduled rounds run unattended: a real `prefect server` (its own scheduler service) and
`trajforge serve` on a one-minute cron complete two rounds, nobody triggering a run, even when
the worker is killed mid-round: the next scheduled run resumes the round, and the sealed
manifests equal an uninterrupted run's.

Prefect 3.8.8's scheduler fails on SQLAlchemy 2.1 (`Can't evaluate bulk DML statement`), so no
scheduled run was ever created; pyproject pins SQLAlchemy 2.0.x and this test holds it there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from storage.db import create_db_engine
from storage.models import DatasetVersion, Episode, Round
from tests.conftest import free_port
from tests.support.evolve import tiny_config
from tests.support.processes import child_env

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
EVERY_MINUTE = "* * * * *"


def _api(url: str, path: str, body: dict | None = None) -> Any:
    request = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"content-type": "application/json"},
        method="POST" if body is not None else "GET",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        args, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def _done_rounds(db: str) -> list[int]:
    with create_db_engine(db).connect() as conn:
        return [n for n, status in conn.execute(select(Round.number, Round.status)) if status == "done"]


def _count(db: Path, stmt: Any) -> int:
    if not db.exists():
        return 0
    try:
        with create_db_engine(f"sqlite:///{db}").connect() as conn:
            return int(conn.execute(stmt).scalar() or 0)
    except Exception:  # the schema is not there yet
        return 0


def _manifests(db: str) -> list[tuple[int, str]]:
    with create_db_engine(db).connect() as conn:
        rows = conn.execute(
            select(DatasetVersion.version, DatasetVersion.manifest_sha256).order_by(DatasetVersion.version)
        )
        return [(v, h) for v, h in rows]


def _wait(until: Any, deadline_s: float, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + deadline_s
    while not until():
        assert time.monotonic() < deadline and process.poll() is None, log.read_text()[-3000:]
        time.sleep(0.5)


def test_a_one_minute_cron_completes_two_rounds_unattended_through_a_killed_worker(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = child_env("PREFECT_", "TRAJFORGE_")
    env |= {"PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    db_file = tmp_path / "db.sqlite"
    db = f"sqlite:///{db_file}"
    tiny = {"schedule": EVERY_MINUTE, "queries_per_app": 1, "rollouts": 1}
    config = tiny_config(tmp_path / "evolve.yaml", db, **tiny)
    reference_db = f"sqlite:///{tmp_path / 'ref' / 'db.sqlite'}"
    reference = _start(  # the same two rounds, uninterrupted, by hand (its own temporary Prefect)
        [
            str(BIN / "trajforge"),
            "evolve",
            "--rounds",
            "2",
            "--config",
            str(tiny_config(tmp_path / "ref" / "evolve.yaml", reference_db, **tiny)),
        ],
        # its own Prefect home: two Prefects migrating one prefect.db at once collide
        # ("duplicate column name: block_type_name")
        env | {"PREFECT_HOME": str(tmp_path / "ref" / "prefect")},
        tmp_path / "reference.log",
    )
    server = _start(
        [str(BIN / "prefect"), "server", "start", "--port", str(port)], env, tmp_path / "server.log"
    )
    served = None
    try:
        deadline = time.monotonic() + 120
        while True:  # the server answers once its database is migrated
            try:
                if _api(url, "/health") is True:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, (
                tmp_path / "server.log"
            ).read_text()[-3000:]
            time.sleep(1)
        serve = [str(BIN / "trajforge"), "serve", "--config", str(config)]
        served = _start(serve, env | {"PREFECT_API_URL": url}, tmp_path / "serve.log")
        round_1 = select(func.count()).select_from(Episode).where(Episode.round_id == 1)
        _wait(lambda: _count(db_file, round_1) >= 1, 240, served, tmp_path / "serve.log")
        assert _done_rounds(db) == []
        os.killpg(served.pid, signal.SIGKILL)  # the worker dies mid-round, its flow run with it
        served.wait()
        served = _start(serve, env | {"PREFECT_API_URL": url}, tmp_path / "serve-again.log")
        # two more cron ticks at most: the first resumes round 1, the next runs round 2
        _wait(lambda: len(_done_rounds(db)) >= 2, 480, served, tmp_path / "serve-again.log")
        assert reference.wait(timeout=300) == 0, (tmp_path / "reference.log").read_text()[-3000:]
    finally:
        for process in (served, server, reference):
            if process is not None:
                _stop(process)
    assert _done_rounds(db)[:2] == [1, 2]  # nobody triggered a run: the scheduler made both
    assert len(_manifests(reference_db)) == 2
    assert _manifests(db)[:2] == _manifests(reference_db)  # the killed round resumed, not redone
    assert "bulk DML" not in (tmp_path / "server.log").read_text()
