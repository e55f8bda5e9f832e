"""Scheduled rounds run unattended: a real `prefect server` (its own scheduler service) and
`trajforge serve` on a one-minute cron complete two rounds, nobody triggering a run.

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
from sqlalchemy import select

from storage.db import create_db_engine
from storage.models import Round
from tests.conftest import free_port
from tests.support.evolve import tiny_config

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


def test_a_one_minute_cron_completes_two_rounds_unattended(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "TRAJFORGE_"))}
    env |= {"PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = tiny_config(tmp_path / "evolve.yaml", db, schedule=EVERY_MINUTE, queries_per_app=1, rollouts=1)
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
        deadline = time.monotonic() + 420  # two cron ticks, a round each, on a loaded 2-core machine
        while len(_done_rounds(db) if (tmp_path / "db.sqlite").exists() else []) < 2:
            assert time.monotonic() < deadline and served.poll() is None, (
                tmp_path / "serve.log"
            ).read_text()[-3000:]
            time.sleep(5)
    finally:
        if served is not None:
            _stop(served)
        _stop(server)
    assert _done_rounds(db)[:2] == [1, 2]  # nobody triggered a run: the scheduler made both
    assert "bulk DML" not in (tmp_path / "server.log").read_text()
