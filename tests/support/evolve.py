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
