"""The loop on environments trajforge did not build: MiniWoB++'s pages beside a built-in app, and
a suite a separate package registers through the `trajforge.suites` entry point."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import polars as pl
import pytest
import yaml

from tests.conftest import service_missing
from tests.flows.test_cli import TRAJFORGE

REPO = Path(__file__).resolve().parents[2]


def _evolve(folder: Path, config: dict, extra_env: dict[str, str] | None = None) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.yaml").write_text(yaml.safe_dump({"home": str(folder / "home"), **config}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJFORGE_")} | (extra_env or {})
    done = subprocess.run(
        [TRAJFORGE, "evolve", "--config", "run.yaml"], cwd=folder, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads((folder / "home" / "report" / "rounds.json").read_text())


@pytest.mark.browser
@pytest.mark.slow
def test_miniwob_tasks_beside_a_built_in_app_evolve_and_export(tmp_path: Path) -> None:
    from rollout.web.env import chromium_available

    if not chromium_available():
        service_missing("Chromium or Playwright missing (apt-get install chromium)")
    config = {
        "apps": ["miniwob:click-button", "miniwob:enter-text", "takeout"],
        "evolve": {"rounds": 1, "queries_per_app": 4, "rollouts": 2, "heldout_per_app": 4, "heldout_rollouts": 1},
        "curate": {"featurizer": "phash"},
    }  # fmt: skip
    table = _evolve(tmp_path / "run", config)
    first = table["rounds"][0]
    assert set(first["per_app"]) == {"miniwob:click-button", "miniwob:enter-text", "takeout"}
    for app in ("miniwob:click-button", "miniwob:enter-text"):
        assert first["per_app"][app][1] == 8  # 4 seeds x 2 rollouts, judged by MiniWoB's reward
    assert first["per_app"]["miniwob:click-button"][0] > 0
    assert set(first["heldout"]["per_app"]) == set(first["per_app"])

    out = tmp_path / "export"
    home = {"TRAJFORGE_HOME": str(tmp_path / "run" / "home")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJFORGE_")} | home
    done = subprocess.run(
        [TRAJFORGE, "datasets", "export", "1", "--format", "rl-verl", "--out", str(out)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = pl.concat([pl.read_parquet(p) for p in sorted(out.rglob("*.parquet"))], how="diagonal_relaxed")
    apps = rows["extra_info"].struct.field("app")
    assert apps.str.starts_with("miniwob:").sum() > 0
    miniwob = rows.filter(apps.str.starts_with("miniwob:"))
    # no launcher: a MiniWoB episode starts on its task page, and every image is MiniWoB's 160x210
    prompts = miniwob["prompt"].cast(pl.Utf8)
    assert not prompts.str.contains("launcher").any()
    for image in miniwob["images"].explode().struct.field("image").head(20):
        assert Path(image).is_file() if not str(image).startswith("data:") else True


@pytest.mark.slow
def test_a_suite_registered_through_the_entry_point_runs_a_round(tmp_path: Path) -> None:
    dist = tmp_path / "site" / "tally_suite-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tally-suite\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[trajforge.suites]\ntally = tests.support.tally_suite:TallySuite\n")
    path = os.pathsep.join([str(tmp_path / "site"), str(REPO), os.environ.get("PYTHONPATH", "")])
    config = {"apps": ["tally:reach"], "evolve": {"rounds": 2, "queries_per_app": 4, "rollouts": 2,
              "heldout_per_app": 4, "heldout_rollouts": 1}}  # fmt: skip
    table = _evolve(tmp_path / "run", config, {"PYTHONPATH": path})
    rounds = table["rounds"]
    assert [r["status"] for r in rounds] == ["done", "done"]
    assert set(rounds[0]["per_app"]) == {"tally:reach"} and rounds[0]["per_app"]["tally:reach"][1] == 8
    assert rounds[1]["heldout"]["per_app"]["tally:reach"][1] == 4
