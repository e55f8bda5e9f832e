"""A tiny evolve config: every app, 1 query, 2 rollouts, short episodes, one held-out query per
app, a screen encoder trained for a few steps (seconds per round)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def tiny_config(path: Path, db_url: str, **evolve: Any) -> Path:
    """Write the YAML run config the CLI and the flows read; the home sits beside it."""
    data = {
        "home": str(path.parent / "home"),
        "db": {"url": db_url},
        "evolve": {
            "queries_per_app": 1,
            "rollouts": 2,
            "devices": 2,
            "max_steps": 12,
            "shards": 2,
            "heldout_per_app": 1,
            "heldout_rollouts": 1,
            **evolve,
        },
        "curate": {"encoder_steps": 3},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def stage(settings: Any, name: str, number: int, **given: Any) -> Any:
    """One stage of round `number`, run by the one runner (`evolve.stages.run_stage`) in this process,
    on `given` as the earlier stages' reports (`queries=uids` for the stages that read them); run
    again where the round keeps its report already (the tests rerun stages on purpose)."""
    from evolve.spine import open_spine
    from evolve.stages import run_stage, stage_named

    return run_stage(open_spine(settings), stage_named(name), number, given, again=True)


def roll_out(settings: Any, number: int, uids: list[str]) -> dict[str, Any]:
    """The rollout stage on these queries, by the one runner: K rollouts of the round's policy on each,
    its parts the configured shards; the round keeps its report (it has been through rollout)."""
    played: dict[str, Any] = stage(settings, "rollout", number, queries=uids)
    return played


def finished_tiny_run(base: Path) -> Path:
    """Two rounds of the tiny config on SQLite (`ref.sqlite`), by `trajforge evolve` reporting to this
    worker's Prefect server, in `base`/tiny-run (what it printed in evolve.out): the finished run the
    loop tests compare with or start from, and the benches' smoke runs read (the run is deterministic).
    Made once per test run by `tests.conftest.tiny_run`; read it, or copy it before writing."""
    import subprocess
    import sys

    from tests.support.processes import child_env

    folder = base / "tiny-run"
    config = tiny_config(folder / "evolve.yaml", f"sqlite:///{folder / 'ref.sqlite'}")
    trajforge = str(Path(sys.executable).with_name("trajforge"))
    done = subprocess.run(
        [trajforge, "evolve", "--rounds", "2", "--config", str(config)],
        env=child_env("PREFECT_", "TRAJFORGE_", shared_prefect=True), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (folder / "evolve.out").write_text(done.stdout, encoding="utf-8")  # what it printed
    return folder


def copy_tiny_run(run: Path, to: Path) -> Path:
    """A copy of the finished tiny run in `to`, its config pointing at the copy: a home to write in."""
    import shutil

    shutil.copytree(run / "home", to / "home")
    copy_sqlite(run / "ref.sqlite", to / "ref.sqlite")
    return tiny_config(to / "evolve.yaml", f"sqlite:///{to / 'ref.sqlite'}")


def copy_sqlite(source: Path, to: Path) -> None:
    """A SQLite database copied whole, by SQLite's backup: the file alone can lack what its write-ahead
    log still holds (a finished round's last commit)."""
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(to)) as dst:
        src.backup(dst)
