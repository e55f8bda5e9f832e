"""The loop on desktops: real apps on virtual displays through `trajforge evolve`, then their episodes
exported in each desktop action format for each trainer, read on the image the trainer feeds."""

from __future__ import annotations

import io
import json
from pathlib import Path

import polars as pl
import pytest
from PIL import Image

from publish.exports import export
from rollout.suites import get_suite
from rollout.suites.desktop import DesktopSuite
from storage.db import create_db_engine, session_factory
from storage.objectstore import LocalObjectStore
from tests.conftest import service_missing
from tests.evolve.test_suite_loop import _evolve
from tests.rollout.test_desktop_env import tally_suite
from tests.support.trainer_recipes import TRAINERS
from tests.support.trainers import tap_check, trainer_python
from trajforge.actions import DESKTOP_FORMATS, get_codec
from trajforge.actions.space import KNOWLEDGE_SYSTEM, coordinate_screen
from trajforge.errors import ConfigError
from trajforge.recovery import PROBE_REASONS

TASKS = ["desktop:calc-clear", "desktop:calc-enter-digit", "desktop:editor-write-word"]


@pytest.mark.slow
def test_desktop_tasks_evolve_and_export_for_every_trainer(tmp_path: Path) -> None:
    suite = get_suite("desktop")
    assert isinstance(suite, DesktopSuite)
    if suite.missing():
        service_missing(f"desktop suites need {', '.join(suite.missing())} (apt-get install ...)")
    user = f"{tally_suite(tmp_path)}:add-item"  # a suite of the user's own, for an app of their own
    config = {
        "apps": [*TASKS, user],
        "evolve": {"rounds": 1, "queries_per_app": 2, "rollouts": 2, "heldout_per_app": 1,
                   "heldout_rollouts": 1, "devices": 2},
        "curate": {"featurizer": "phash"},
    }  # fmt: skip
    table = _evolve(tmp_path / "run", config)
    first = table["rounds"][0]
    apps = first["apps"]
    assert set(apps) == {*TASKS, "tally:add-item"}
    for app in apps:  # 2 seeds x 2 rollouts, each decided by the task's own checks
        assert apps[app]["episodes"] == 4 and apps[app]["outcome_sources"] == {"verifier": 4}
    assert sum(apps[app]["successes"] for app in TASKS) > 0  # calc-clear: AC or C, anywhere in 25 steps
    assert set(first["heldout"]["per_app"]) == set(apps)
    rec = first["recovery"]  # probes replay from the task's setup on the same displays
    made = rec["samples"].get("error_escape", 0)
    assert rec["probed"] == made + sum(n for r, n in rec["skipped"].items() if r in PROBE_REASONS)

    home = tmp_path / "run" / "home"
    sessions = session_factory(create_db_engine(f"sqlite:///{home / 'trajforge.db'}"))
    store = LocalObjectStore(home / "objects")
    with pytest.raises(ConfigError, match=r"holds desktop episodes \(desktop:calc-clear, .*agentcpm format"):
        export(sessions, store, "trajforge", 1, "sft-sharegpt", str(tmp_path / "phone"), "agentcpm")
    for trainer in sorted(TRAINERS):
        if not trainer_python(trainer).is_file():
            service_missing(f"{trainer_python(trainer)} is not installed (.ci/run installs the trainers)")
        checks = tap_check(
            sessions, store, "trajforge", 1, trainer, list(DESKTOP_FORMATS), tmp_path / trainer
        )
        for action_format, check in checks.items():
            skipped = {r for r in check.report.skipped if r != "no_action_ground_truth"}
            assert all(r.startswith("action_not_representable:") for r in skipped), (action_format, skipped)
            assert check.taps > 0 and not check.misses, (trainer, action_format, check.misses[:3])
            _every_answer_parses(tmp_path / trainer / action_format, action_format)


def _every_answer_parses(out: Path, action_format: str) -> None:
    """Each action row's answer, read by the family's own parser in its coordinate space on the image
    as written (an rl-verl export's answers are its ground truth, its images in the parquet)."""
    codec, answers = get_codec(action_format), []
    for file in sorted(out.glob("*.jsonl")):
        for line in file.read_text().splitlines():
            record = json.loads(line)
            if record["messages"][0]["content"] != KNOWLEDGE_SYSTEM:  # not a question about the screen
                with Image.open(out / record["images"][-1]) as image:
                    answers.append((record["messages"][-1]["content"], image.size))
    for file in sorted(out.glob("*.parquet")):
        for row in pl.read_parquet(file).to_dicts():
            with Image.open(io.BytesIO(row["images"][-1]["bytes"])) as image:
                answers.append((json.loads(row["reward_model"]["ground_truth"])["formatted"], image.size))
    assert answers, f"{out}: no action rows"
    for answer, size in answers:
        codec.parse(answer, coordinate_screen(action_format, *size))
