"""A user's own app spec (docs/examples/pantry.yaml, written from docs/app-spec.md), through every
stage from the command line, as a new user runs it; and the clashes a registry must refuse."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.flows.test_cli import cli

PANTRY = Path(__file__).resolve().parents[2] / "docs/examples/pantry.yaml"


def _stage(*args: str, cwd: Path) -> str:
    result = cli(*args, cwd=cwd)
    assert result.returncode == 0, f"{args}: {result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


@pytest.mark.slow  # over 40 s of CPU on 2 cores: the fast tier stays under 15 min
def test_a_user_spec_rolls_out_is_judged_curated_and_published(tmp_path: Path) -> None:
    shutil.copy(PANTRY, tmp_path / "pantry.yaml")
    out = _stage("rollout", "--app", "pantry.yaml", "--queries", "4", "--workers", "1", cwd=tmp_path)
    assert "success rate: 0/" not in out  # the launcher shows the user's app
    early = cli("curate", cwd=tmp_path)  # before judging: one line naming the command, nothing written
    assert early.returncode == 1 and early.stderr.strip() == (
        "error: round 1 has not been through stage judge; run `trajforge stage judge --round 1` first"
    )
    _stage("critics", "run", cwd=tmp_path)  # no config: the spec is read back from the database
    _stage("critics", "calibrate", cwd=tmp_path)  # the loop's stage: calibration, then CSRS extraction
    _stage("curate", cwd=tmp_path)
    assert "dataset trajforge v1: " in _stage("datasets", "publish", cwd=tmp_path)  # the publish stage
    with sqlite3.connect(tmp_path / ".trajforge" / "trajforge.db") as db:
        outcomes = dict(db.execute("select outcome, count(*) from episode group by outcome").fetchall())
        judged = db.execute("select count(*) from judgment where target = 'episode'").fetchone()[0]
        apps = [r[0] for r in db.execute("select name from app")]
    assert outcomes.get("success", 0) > 0 and judged > 0 and apps == ["pantry"]

    # four anchored episodes of a new app are too few to fit the learned critic on other queries:
    # it abstains, and the consensus leaves every episode undecided rather than guess
    with sqlite3.connect(tmp_path / ".trajforge" / "trajforge.db") as db:
        learned = db.execute(
            "select label, analysis from judgment where target = 'episode' and critic = 'learned_trajectory'"
        ).fetchall()
        consensus = db.execute("select label from judgment where target = 'episode' and critic = 'consensus'")
        labels = {label for (label,) in consensus}
    assert len(learned) == 4 and set(learned) == {("abstain", "untrained")}
    assert labels == {"undecided"}


def test_clashing_names_and_unreachable_apps_are_one_line_and_write_nothing(tmp_path: Path) -> None:
    impostor = tmp_path / "takeout.yaml"
    impostor.write_text(PANTRY.read_text().replace("name: pantry", "name: takeout"))
    _stage("queries", "generate", "--app", "takeout", "--n", "3", cwd=tmp_path)
    db = tmp_path / ".trajforge" / "trajforge.db"
    with sqlite3.connect(db) as conn:
        before = conn.execute("select count(*) from query").fetchone()[0]
    for args in (["queries", "generate", "--app", "takeout.yaml"], ["rollout", "--app", "takeout.yaml"]):
        result = cli(*args, cwd=tmp_path)
        assert result.returncode == 1 and len(result.stderr.splitlines()) == 1
        assert result.stderr.startswith("error: app 'takeout': this database already holds a different spec")
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from query").fetchone()[0] == before
        assert conn.execute("select count(*) from round").fetchone()[0] == 0
    android = cli("rollout", "--app", str(PANTRY), "--backend", "android", "--serial", "emu-1", cwd=tmp_path)
    assert android.returncode == 1 and android.stderr.strip() == (
        "error: backend 'android' cannot open app 'pantry': its spec has no `package:`; set the "
        "activity to launch (e.g. package: com.example.app/.MainActivity)"
    )
