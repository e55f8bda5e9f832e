"""What the `trajforge` sub-commands share: the common options and opening the data spine."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


def cli_round(settings: Settings, number: int | None, stage: str | None = None) -> tuple[Any, int, int]:
    """A session factory on the migrated database, the round's id and its number (default: the
    latest); with `stage`, the stages it needs must have run on the round (`evolve.stages`)."""
    from sqlalchemy import func, select

    from evolve.spine import open_spine
    from evolve.stages import require
    from storage.models import Round
    from trajforge.errors import ConfigError

    sessions = open_spine(settings).sessions
    with sessions() as s:
        wanted = number if number is not None else s.scalar(select(func.max(Round.number)))
        row = s.scalars(select(Round).where(Round.number == wanted)).first() if wanted is not None else None
    if row is None:
        raise ConfigError(
            f"no round {number if number is not None else ''} in the database; run `trajforge run` first"
        )
    if stage is not None:
        require(sessions, row.id, stage)
    return sessions, row.id, row.number


RoundOpt = Annotated[int | None, typer.Option("--round", help="Round number (default: the latest).")]


@contextmanager
def progress_bar(label: str, total: int) -> Iterator[Callable[..., None]]:
    """A progress bar of `total` items with the time spent and an ETA, on standard error and only
    on a terminal (it leaves nothing behind); yields `advance(by=1)`."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    if not console.is_terminal:  # nothing at all, not even the empty line rich leaves
        yield lambda by=1: None
        return
    columns = (
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda by=1: bar.advance(task, by)
