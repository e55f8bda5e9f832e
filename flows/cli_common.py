"""What the `trajforge` sub-commands share: the common options and opening the data spine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from trajforge.settings import Settings, load_settings

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML run config (sections db, store, s3, llm)."),
]


def cli_settings(config: Path | None) -> Settings:
    return load_settings(config)


def cli_spine(config: Path | None) -> tuple[Settings, Any, Any]:
    """Settings, a session factory on the migrated database, and the object store."""
    from storage.db import engine_from_settings, session_factory, upgrade
    from storage.objectstore import open_object_store

    settings = cli_settings(config)
    engine = engine_from_settings(settings)
    upgrade(engine)
    return settings, session_factory(engine), open_object_store(settings)
