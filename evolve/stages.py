"""The round's stages as data: what each reads and writes, which stage must have run before it,
and how to tell that one has run.

`ROUND` is the loop's order; `check_order` proves it sound (every stage comes after the stages
it needs, and every table it reads is an input of the round or written by an earlier stage),
and the flow checks it before a round starts. `require` is checked when a stage starts, alone
(`trajforge curate`) or in the loop, before it writes anything: a stage run out of order fails
with one line naming the command that does what is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import exists, select
from sqlalchemy.orm import Session, sessionmaker

from storage.models import Episode, Judgment, QueryPassRate, Round, Step
from storage.models import Query as QueryRow
from trajforge.errors import ConfigError, StageError

INPUTS = ("app", "round", "policy", "device")  # what a round starts from (`start_round`, the farm)


def _has_query(s: Session, round_id: int) -> bool:
    return bool(s.scalar(select(exists().where(QueryRow.round_id == round_id))))


def _has_episode(s: Session, round_id: int) -> bool:
    return bool(s.scalar(select(exists().where(Episode.round_id == round_id))))


def _judged(s: Session, round_id: int) -> bool:
    """Every step of the round has a step critic's label (and the round has episodes)."""
    unjudged = (
        select(Step.id)
        .join(Episode, Episode.id == Step.episode_id)
        .where(
            Episode.round_id == round_id,
            ~exists().where(Judgment.target == "step", Judgment.target_id == Step.id),
        )
    )
    return _has_episode(s, round_id) and not s.scalar(select(exists(unjudged)))


def _calibrated(s: Session, round_id: int) -> bool:
    row = s.get(Round, round_id)
    return row is not None and "calibration" in (row.stats or {})


def _curated(s: Session, round_id: int) -> bool:
    return bool(s.scalar(select(exists().where(QueryPassRate.round_id == round_id))))


@dataclass(frozen=True)
class Stage:
    name: str
    reads: tuple[str, ...]  # tables
    writes: tuple[str, ...]
    after: tuple[str, ...]  # stages that must have run on the round first
    done: str  # the round "is not <done> yet"
    command: str  # what runs it alone, {n} the round number
    ran: Callable[[Session, int], bool] | None = None  # whether it has run on a round (by id)


ROUND: tuple[Stage, ...] = (
    Stage("queries", ("app", "round"), ("query",), (), "given queries", "trajforge evolve", _has_query),
    Stage(
        "rollout",
        ("query", "policy", "device"),
        ("episode", "step", "anchor", "exclusion"),
        ("queries",),
        "rolled out",
        "trajforge evolve",
        _has_episode,
    ),
    Stage(
        "judge",
        ("episode", "step", "anchor"),
        ("judgment",),
        ("rollout",),
        "judged",
        "trajforge critics run --round {n}",
        _judged,
    ),
    Stage(
        "calibrate",
        ("judgment", "anchor"),
        ("round", "sample", "exclusion"),
        ("judge",),
        "calibrated",
        "trajforge critics calibrate --round {n}",
        _calibrated,
    ),
    Stage(
        "curate",
        ("episode", "step", "judgment", "anchor"),
        ("sample", "guidance", "screen_feature", "query_pass_rate", "exclusion"),
        ("judge",),
        "curated",
        "trajforge curate --round {n}",
        _curated,
    ),
    Stage(
        "publish",
        ("sample",),
        ("dataset_version", "shard"),
        ("calibrate", "curate"),
        "published",
        "trajforge datasets publish",
    ),
)


def check_order(stages: Sequence[Stage] = ROUND) -> None:
    """Raises ConfigError where a stage comes before a stage it needs, or reads a table that
    neither the round's inputs nor an earlier stage provide."""
    seen: set[str] = set()
    written = set(INPUTS)
    for stage in stages:
        if missing := [a for a in stage.after if a not in seen]:
            raise ConfigError(f"stage {stage.name!r} runs before {', '.join(missing)}, which it needs")
        if unread := sorted(set(stage.reads) - written):
            raise ConfigError(
                f"stage {stage.name!r} reads {', '.join(unread)}, which no earlier stage writes"
            )
        seen.add(stage.name)
        written |= set(stage.writes)


def require(
    sessions: sessionmaker[Session], round_id: int, name: str, stages: Sequence[Stage] = ROUND
) -> None:
    """Raises StageError, naming the command to run, when a stage `name` needs has not run on the round."""
    by_name = {stage.name: stage for stage in stages}
    with sessions() as s:
        row = s.get(Round, round_id)
        assert row is not None, f"no round with id {round_id}"
        for before in by_name[name].after:
            stage = by_name[before]
            if stage.ran is not None and not stage.ran(s, round_id):
                command = stage.command.format(n=row.number)
                raise StageError(f"round {row.number} is not {stage.done} yet; run `{command}` first")
