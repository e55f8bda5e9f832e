"""`trajforge evolve` on a terminal: a line for every stage from its start and counts for the long
work, all gone by the round line, which reads as it does off a terminal."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.evolve import tiny_config
from tests.support.processes import child_env

pytestmark = pytest.mark.slow

TRAJFORGE = shutil.which("trajforge", path=str(Path(sys.executable).parent)) or "trajforge"
STAGES = [
    "start-round",
    "rollout-shard",
    "judge",
    "calibrate-and-extract",
    "train-encoder",
    "curate",
    "publish",
]
# (round 1 trains no screen encoder: `encoder training steps` is checked in tests/curation/test_encoder.py)
COUNTED = ["rollouts", "judging episodes", "screenshot features", "dataset shards", "held-out episodes"]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _on_a_terminal(args: list[str], cwd: Path, limit_s: float) -> tuple[int, str, dict[str, float]]:
    """Run `args` with a pseudo-terminal as stdout and stderr: exit code, what it showed (escape
    codes removed) and when each label of `STAGES` and `COUNTED` first showed (seconds)."""
    env = child_env("TRAJFORGE_", shared_prefect=True)
    env |= {"TERM": "xterm-256color", "COLUMNS": "160"}
    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, stdin=follower, stdout=follower, stderr=follower, cwd=cwd, env=env)
    os.close(follower)
    start, raw, first = time.monotonic(), b"", {}
    try:
        while time.monotonic() - start < limit_s:
            if not select.select([leader], [], [], 1)[0]:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # the terminal closed with the process
                break
            raw += chunk
            shown = _ANSI.sub("", raw.decode(errors="replace"))
            for label in STAGES + COUNTED:
                if label not in first and label in shown:
                    first[label] = round(time.monotonic() - start, 1)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    return proc.wait(), _ANSI.sub("", raw.decode(errors="replace")), first


def test_evolve_on_a_terminal_shows_every_stage_and_its_counts(tmp_path: Path) -> None:
    config = tiny_config(tmp_path / "run.yaml", f"sqlite:///{tmp_path / 'run.db'}")
    code, shown, first = _on_a_terminal(
        [TRAJFORGE, "evolve", "--rounds", "1", "--config", str(config)], tmp_path, 600
    )
    assert code == 0, shown[-3000:]
    assert set(first) == set(STAGES + COUNTED), f"never shown: {set(STAGES + COUNTED) - set(first)}"
    assert first["rollouts"] >= first["rollout-shard"] and first["judge"] >= first["rollouts"]
    (line,) = [ln.rstrip() for ln in shown.splitlines() if ln.startswith("round 1/1: policy ")]
    assert line.startswith("round 1/1: policy random-explorer@0: success ") and line.endswith("s]"), line
