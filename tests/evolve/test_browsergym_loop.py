"""The loop on BrowserGym's tasks, by their ids, with no glue: `trajforge evolve` rolls them out in
BrowserGym's own venv, judges them by BrowserGym's reward, and exports their steps with the bid the
policy aimed at still on the step's element tree."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.evolve.test_suite_loop import TRAJFORGE, _evolve
from tests.rollout.test_browsergym_suite import browsergym_python
from tests.support.processes import child_env
from trajforge.recovery import PROBE_REASONS

TASKS = ["browsergym:miniwob.click-test", "browsergym:miniwob.enter-text"]


@pytest.mark.browser
@pytest.mark.slow
def test_browsergym_tasks_evolve_and_export(tmp_path: Path) -> None:
    bg = {"TRAJFORGE_BROWSERGYM_PYTHON": str(browsergym_python())}
    config = {
        "apps": TASKS,
        "evolve": {"rounds": 1, "queries_per_app": 3, "rollouts": 2, "heldout_per_app": 2,
                   "heldout_rollouts": 1, "devices": 2, "max_steps": 6},
        "curate": {"featurizer": "phash"},
    }  # fmt: skip
    table = _evolve(tmp_path / "run", config, extra_env=bg)
    first = table["rounds"][0]
    apps = first["apps"]
    assert set(apps) == set(TASKS)
    for app in TASKS:  # 3 seeds x 2 rollouts, each decided by BrowserGym's own reward
        assert apps[app]["episodes"] == 6 and apps[app]["outcome_sources"] == {"verifier": 6}
    assert apps["browsergym:miniwob.click-test"]["successes"] > 0
    assert set(first["heldout"]["per_app"]) == set(TASKS)
    rec = first["recovery"]  # probes replay the seed on the same BrowserGym servers
    made = rec["samples"].get("error_escape", 0)
    assert rec["probed"] == made + sum(n for r, n in rec["skipped"].items() if r in PROBE_REASONS)

    out = tmp_path / "export"
    env = child_env("TRAJFORGE_")
    done = subprocess.run(
        [TRAJFORGE, "datasets", "export", "1", "--format", "sft-sharegpt", "--out", str(out)],
        env=env | {"TRAJFORGE_HOME": str(tmp_path / "run" / "home")}, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]
    assert rows and all(row["images"] for row in rows)
