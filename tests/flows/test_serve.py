"""`trajforge serve` against a real Prefect API: a work-pool deployment with the config's cron
schedule and concurrency limits, and a served deployment that runs a round when triggered."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL
from prefect.testing.utilities import prefect_test_harness
from sqlalchemy import select

from storage.db import create_db_engine
from storage.models import Round
from tests.support.evolve import tiny_config
from tests.support.processes import child_env

pytestmark = pytest.mark.slow
TRAJFORGE = str(Path(sys.executable).with_name("trajforge"))
CRON = "0 3 * * *"


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    with prefect_test_harness(server_startup_timeout=120):
        yield str(PREFECT_API_URL.value())


def _env(api: str) -> dict[str, str]:
    env = child_env("PREFECT_")
    return {**env, "PREFECT_API_URL": api}


def test_work_pool_deployment_and_served_run(api_url: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = tiny_config(tmp_path / "evolve.yaml", db, schedule=CRON, work_pool="trajforge-test")
    registered = subprocess.run(
        [TRAJFORGE, "serve", "--work-pool", "--config", str(config)],
        capture_output=True, text=True, env=_env(api_url), timeout=300,
    )  # fmt: skip
    assert registered.returncode == 0, registered.stderr[-2000:]
    assert "on pool trajforge-test; schedule 0 3 * * *" in registered.stdout
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("evolve/trajforge-evolve")
        assert deployment.work_pool_name == "trajforge-test"
        assert [s.schedule.cron for s in deployment.schedules] == [CRON]  # type: ignore[union-attr]
        assert deployment.parameters == {"config": str(config.resolve()), "more": 1}
        limits = {c.tag: c.concurrency_limit for c in client.read_concurrency_limits(limit=10, offset=0)}
    assert limits == {"trajforge-model-calls": 8, "trajforge-devices": 2}

    served = subprocess.Popen(
        [TRAJFORGE, "serve", "--config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(api_url), start_new_session=True,
    )  # fmt: skip
    try:
        time.sleep(8)  # the runner registers the deployment and starts polling
        assert served.poll() is None
        run = run_deployment(
            "evolve/trajforge-evolve", parameters={"config": str(config), "more": 1}, timeout=400
        )
    finally:
        os.killpg(served.pid, signal.SIGTERM)
        log = served.communicate(timeout=60)[0].decode()
    assert run.state is not None and run.state.is_completed(), log[-4000:]  # type: ignore[union-attr]
    with create_db_engine(db).connect() as conn:
        assert conn.execute(select(Round.number, Round.status)).all() == [(1, "done")]
