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
