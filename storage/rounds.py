"""Which stages a round has been through: the one record is the reports the stage runner keeps in
`round.stats["reports"]`, by stage name (`evolve.stages.run_stage`).

The runner keeps a stage's report when it finishes; it reads them to skip a stage a resumed round
has done, to check that a stage runs after those it needs, and publishing reads them so it never
seals a round that is not ready (a sealed version cannot be taken back).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import transaction
from storage.models import Episode, Round
from trajforge.errors import DatasetError

QUERY_STAGE = "querygen"  # the exclusion stage of the queries dropped before a round rolls out
REPORTS = "reports"  # round.stats key of the finished stages' reports


def reports_in(stats: dict[str, Any] | None) -> dict[str, Any]:
    """The finished stages' reports in a round's stats, by stage name."""
    return dict((stats or {}).get(REPORTS) or {})


def recorded(sessions: sessionmaker[Session], number: int) -> dict[str, Any]:
    """The reports round `number`'s finished stages left, by stage name (none: no such round)."""
    with sessions() as s:
        return reports_in(s.scalar(select(Round.stats).where(Round.number == number)))


def record(sessions: sessionmaker[Session], number: int, name: str, report: Any) -> None:
    """Keep a finished stage's report (JSON) in round `number`: the stage has been through it."""
    with transaction(sessions) as s:
        row = s.scalars(select(Round).where(Round.number == number)).one()
        row.keep({REPORTS: {**reports_in(row.stats), name: report}})


def not_through(number: int, name: str) -> str:
    """What a round that has not been through stage `name` lacks, and the command that does it."""
    return (
        f"round {number} has not been through stage {name}; "
        f"run `trajforge stage {name} --round {number}` first"
    )


def numbers(rounds: list[int]) -> str:
    return ",".join(map(str, rounds)) or "none"


def ready_rounds(
    sessions: sessionmaker[Session], rounds: tuple[int, ...] | None, through: Sequence[str]
) -> list[int]:
    """The round numbers to publish (None: every round); each must exist and have been through
    every stage of `through`.

    Raises:
        DatasetError: names the round and the command that makes it ready.
    """
    with sessions() as s:
        stages = {n: set(reports_in(stats)) for n, stats in s.execute(select(Round.number, Round.stats))}
    if not stages:
        raise DatasetError("nothing to publish: the database has no rounds yet; run `trajforge evolve` first")
    wanted = sorted(rounds) if rounds is not None else sorted(stages)
    missing = [n for n in wanted if n not in stages]
    if missing:
        raise DatasetError(
            f"no round {numbers(missing)} in the database (rounds: {numbers(sorted(stages))}); "
            "pick existing rounds with --rounds"
        )
    for n in wanted:
        for name in through:
            if name not in stages[n]:
                raise DatasetError(f"{not_through(n, name)}, or leave it out with --rounds")
    return wanted


def sampling_by_round(sessions: sessionmaker[Session], rounds: list[int]) -> list[dict[str, Any]]:
    """How the rounds' model policies sampled (`episode.meta.sampling`): per round, each
    temperature/top_p (and the model family with its prompt version, where one built the requests)
    with its episode count; empty when no episode recorded any (offline policies)."""
    tally: Counter[tuple[int, float, float | None, str | None]] = Counter()
    with sessions() as s:
        rows = s.execute(
            select(Round.number, Episode.meta)
            .join(Round, Round.id == Episode.round_id)
            .where(Round.number.in_(rounds))
        ).tuples()
        for number, meta in rows:
            sampling = (meta or {}).get("sampling")
            if sampling:
                family = sampling.get("family")
                family = f"{family} ({sampling.get('prompt_version')})" if family else None
                tally[(number, sampling.get("temperature"), sampling.get("top_p"), family)] += 1
    return [
        {"round": n, "temperature": t, "top_p": p, **({"family": f} if f else {}), "episodes": c}
        for (n, t, p, f), c in sorted(tally.items(), key=str)
    ]
