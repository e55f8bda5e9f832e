"""Which stored rounds are the loop's own: `trajforge rollout` and `trajforge run` make rounds
too, and `evolve` must not take one of them as a finished round of its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import select

from evolve.spine import open_spine
from storage.locks import LOOP_LOCK, exclusive
from storage.models import Round
from trajforge.errors import ConfigError
from trajforge.settings import Settings


def check_loop_rounds(settings: Settings) -> None:
    """Before the loop runs: every stored round is one of the loop's.

    Raises:
        ConfigError: names the first round another command made.
    """
    with open_spine(settings).sessions() as s:
        for row in s.scalars(select(Round).order_by(Round.number)):
            if not loop_round(row):
                raise foreign_round(row)


def foreign_round(row: Round) -> ConfigError:
    made_by = (row.stats or {}).get("made_by", "another command (trajforge run or rollout)")
    return ConfigError(
        f"round {row.number} was made by {made_by}, not by the loop, so evolve cannot take it as its own "
        "round; evolve in a fresh TRAJFORGE_HOME (or another database)"
    )


def loop_round(row: Round) -> bool:
    """Whether a stored round is one of the loop's: `trajforge rollout` marks its own rounds, and
    a finished round of the loop has chosen its next policy."""
    stats = row.stats or {}
    if "made_by" in stats:
        return False
    return row.status != "done" or "next_policy_id" in stats


@contextmanager
def loop_lock(settings: Settings, what: str) -> Iterator[None]:
    """Hold the home's loop for the block: one `evolve` (CLI or scheduled run) at a time, whatever
    dataset it publishes.

    Raises:
        LoopBusy: another run holds it; the message names it (command, pid, host, start).
    """
    engine = open_spine(settings).sessions.kw["bind"]
    with exclusive(engine, LOOP_LOCK, what):
        yield
