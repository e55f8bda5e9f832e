"""The reward library an rl-verl export writes runs on Python 3.10, verl 0.9.1's floor, with only
pydantic installed (it once needed 3.11's `enum.StrEnum`): the same scores as in trajforge."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import polars as pl
import pytest

from publish.exports import export
from tests.conftest import service_missing
from trajforge.rewards import compute_score

PY310 = os.environ.get("TRAJFORGE_TEST_PY310") or str(
    Path.home() / ".cache/trajforge/reward-py310/bin/python"
)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_exported_reward_scores_the_same_on_python_3_10(version, tmp_path: Path) -> None:
    if not Path(PY310).exists():
        service_missing(f"no Python 3.10 with pydantic at {PY310} (TRAJFORGE_TEST_PY310; .ci/run makes one)")
    _, sessions, store, _ = version
    out = tmp_path / "verl"
    export(sessions, store, "gui", 1, "rl-verl", str(out), "uitars15")
    rows = pl.read_parquet(out / "train.parquet").to_dicts()[:40]
    cases = [
        (r["data_source"], answer, r["reward_model"]["ground_truth"], r["extra_info"], scheme)
        for r in rows
        for answer in (json.loads(r["reward_model"]["ground_truth"])["formatted"], "Action: click(x)")
        for scheme in ("binary", "dense", "mobiler1")
    ]
    (tmp_path / "cases.json").write_text(json.dumps(cases, default=str))
    script = (
        "import importlib.util, json, sys\n"
        "spec = importlib.util.spec_from_file_location('reward', sys.argv[1])\n"
        "reward = importlib.util.module_from_spec(spec); spec.loader.exec_module(reward)\n"
        "assert sys.version_info[:2] == (3, 10), sys.version\n"
        "cases = json.load(open(sys.argv[2]))\n"
        "print(json.dumps([reward.compute_score(d, a, g, e, s)['score'] for d, a, g, e, s in cases]))\n"
    )
    done = subprocess.run(
        [PY310, "-c", script, str(out / "reward.py"), str(tmp_path / "cases.json")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # nothing of trajforge on its path but the export's own copy
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = [compute_score(*c)["score"] for c in json.loads((tmp_path / "cases.json").read_text())]
    assert json.loads(done.stdout) == expected and 1.0 in expected and min(expected) < 1.0
