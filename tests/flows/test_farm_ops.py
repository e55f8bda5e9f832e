"""Operating the farm from the command line: a fault drill that retires every device leaves the
round open and exits 1, `trajforge devices` shows and resets the pool, `trajforge status` shows
who runs the loop, and the rerun plays every episode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sqlalchemy import Engine, func, select

from storage.locks import LOOP_LOCK, exclusive
from storage.models import Episode, Exclusion, Round

TRAJFORGE = str(Path(sys.executable).with_name("trajforge"))


def _config(path: Path, db_url: str, **evolve: object) -> Path:
    data = {"home": str(path.parent / "home"), "db": {"url": db_url}, "evolve": evolve}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TRAJFORGE, *args], capture_output=True, text=True, timeout=300)


def _rollout(config: Path) -> subprocess.CompletedProcess[str]:
    return _cli(
        "rollout", "--app", "takeout", "--queries", "3", "--rollouts-per-query", "2", "--config", str(config)
    )


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the pool on PostgreSQL: tests/rollout
def test_a_drill_that_retires_the_farm_is_incomplete_then_healed(
    tmp_path: Path, db_url: str, engine: Engine
) -> None:
    drill = _config(tmp_path / "drill.yaml", db_url, device_cooldown_s=3600, faults={"crash_rate": 1.0})
    calm = _config(tmp_path / "calm.yaml", db_url, device_cooldown_s=3600)
    failed = _rollout(drill)  # every action crashes: both devices retire, the rest wait 30 s in vain
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "is incomplete" in failed.stderr and "not run (no free device" in failed.stdout
    assert len(failed.stderr.strip().splitlines()) == 1 and "Traceback" not in failed.stderr
    with engine.connect() as conn:
        assert conn.execute(select(Round.status)).scalar_one() == "running"  # never done
        attempts = conn.execute(
            select(func.count()).select_from(Exclusion).where(Exclusion.item_type == "episode_attempt")
        ).scalar()
    assert attempts and attempts >= 6  # every failed attempt is kept, of played and unplayed episodes

    listed = _cli("devices", "list", "--config", str(calm))
    assert listed.returncode == 0 and listed.stdout.count("retired") == 2, listed.stdout
    shown = _cli("status", "--config", str(calm))
    assert "devices: 2 (retired=2)" in shown.stdout and "round 1: running" in shown.stdout, shown.stdout
    assert _cli("devices", "reset", "--all", "--config", str(calm)).stdout.startswith("reset 2 devices")

    healed = _rollout(calm)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    with engine.connect() as conn:
        assert conn.execute(select(Round.status)).scalar_one() == "done"
        assert conn.execute(select(func.count()).select_from(Episode)).scalar() == 6  # every episode


def test_status_names_the_running_loop_and_the_pool(tmp_path: Path, db_url: str, engine: Engine) -> None:
    config = _config(tmp_path / "c.yaml", db_url)
    with exclusive(engine, LOOP_LOCK, "trajforge evolve"):
        shown = _cli("status", "--config", str(config))
    assert shown.returncode == 0, shown.stderr
    assert f"loop (dataset trajforge): running in trajforge evolve (pid {os.getpid()}" in shown.stdout
    assert "devices: 0 (none registered)" in shown.stdout
    unknown = _cli("devices", "reset", "sim-7", "--config", str(config))
    assert unknown.returncode == 1 and "no device named sim-7" in unknown.stderr
