"""A tiny evolve config: every app, 1 query, 2 rollouts, short episodes (seconds per round)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from trajforge.settings import Settings, load_settings


def tiny_config(path: Path, db_url: str, **evolve: Any) -> Path:
    """Write the YAML run config the CLI and the flows read."""
    data = {
        "home": str(path.parent / "home"),
        "db": {"url": db_url},
        "evolve": {"queries_per_app": 1, "rollouts": 2, "devices": 2, "max_steps": 12, "shards": 2, **evolve},
    }
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture
def config_file(tmp_path: Path, db_url: str, engine: Any) -> Path:
    """The config on SQLite and on PostgreSQL (the engine fixture empties PostgreSQL afterwards)."""
    return tiny_config(tmp_path / "evolve.yaml", db_url)


@pytest.fixture
def settings(config_file: Path) -> Settings:
    return load_settings(config_file)
