"""Which stages a round has been through, kept in `round.stats["stages"]`.

Judging and curation mark the round when they finish; publishing reads the marks so it
never seals a round that is not ready (a sealed version cannot be taken back).
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import transaction
from storage.models import Episode, Round
from trajforge.errors import DatasetError

QUERY_STAGE = "querygen"  # the exclusion stage of the queries dropped before a round rolls out
JUDGED = "judged"
EXTRACTED = "extracted"
CURATED = "curated"
# what each missing mark asks the user to run, in the order the stages run
FIXES = {
    JUDGED: "trajforge critics run --round {n}",
    EXTRACTED: "trajforge critics extract --round {n}",
    CURATED: "trajforge curate --round {n}",
}


def mark_stage(sessions: sessionmaker[Session], round_id: int, stage: str) -> None:
    """Record that `stage` finished for the round (the first time is kept)."""
    with transaction(sessions) as s:
        row = s.get(Round, round_id)
        if row is None:
            return
        stats = dict(row.stats or {})
        stages = dict(stats.get("stages") or {})
        stages.setdefault(stage, datetime.now(UTC).isoformat(timespec="seconds"))
        stats["stages"] = stages
        row.stats = stats


def round_stages(sessions: sessionmaker[Session]) -> dict[int, set[str]]:
    """Every round number with the stages it has finished."""
    with sessions() as s:
        return {
            number: set((stats or {}).get("stages") or {})
            for number, stats in s.execute(select(Round.number, Round.stats))
        }


def numbers(rounds: list[int]) -> str:
    return ",".join(map(str, rounds)) or "none"


def ready_rounds(sessions: sessionmaker[Session], rounds: tuple[int, ...] | None) -> list[int]:
    """The round numbers to publish (None: every round); each must exist and be judged, extracted and
    curated.

    Raises:
        DatasetError: names the round and the command that makes it ready.
    """
    stages = round_stages(sessions)
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
        for stage in FIXES:
            if stage not in stages[n]:
                raise DatasetError(
                    f"round {n} is not {stage} yet; run `{FIXES[stage].format(n=n)}` first, "
                    "or leave it out with --rounds"
                )
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
