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
    from evolve.spine import open_spine

    settings = cli_settings(config)
    spine = open_spine(settings)
    return settings, spine.sessions, spine.store


def hold_home(settings: Settings) -> Settings:
    """Hold the home's one-writer lock (`evolve.ownership.loop_lock`) until this command ends. Every
    command that writes rounds, labels, samples or versions takes it, as `evolve` and a schedule's run
    do: while another holds it, the command refuses in one line naming the holder, before it writes."""
    from typer._click.globals import get_current_context  # typer's own click, not the click package

    from evolve.ownership import loop_lock

    ctx = get_current_context()
    ctx.with_resource(loop_lock(settings, ctx.command_path))
    return settings


def cli_round(settings: Settings, number: int | None, stage: str | None = None) -> tuple[Any, int, int]:
    """A session factory on the migrated database, the round's id and its number (default: the
    latest); with `stage`, the stages it needs must have run on the round (`evolve.stages`)."""
    from sqlalchemy import func, select

    from evolve.spine import open_spine
    from evolve.stages import require
    from storage.models import Round
    from storage.rounds import recorded
    from trajforge.errors import ConfigError

    spine = open_spine(settings)
    sessions = spine.sessions
    with sessions() as s:
        wanted = number if number is not None else s.scalar(select(func.max(Round.number)))
        row = s.scalars(select(Round).where(Round.number == wanted)).first() if wanted is not None else None
    if row is None:
        raise ConfigError(
            (
                f"no round {number} in the database"
                if number is not None
                else "the database holds no round yet"
            )
            + "; run `trajforge evolve` (or `trajforge rollout`) first"
        )
    if stage is not None:
        require(recorded(sessions, row.number), row.number, stage)
    return sessions, row.id, row.number


RoundOpt = Annotated[int | None, typer.Option("--round", help="Round number (default: the latest).")]
