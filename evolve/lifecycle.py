"""A round's open and close: the same for the loop, the smoke round and `trajforge rollout`
(their episodes are played by `rollout.loop.play`; the judging, calibration and curation they all
run are the stages themselves, `critics.stages`, `curation.stages`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from evolve.spine import Spine
from storage.db import transaction
from storage.models import Round


def open_round(
    s: Session,
    policy_id: int,
    *,
    number: int | None = None,
    seed: int | None = None,
    config_hash: str = "",
    stats: dict[str, Any] | None = None,
) -> Round:
    """A new round of `policy_id`, numbered `number` or the next free number (seeded by its number)."""
    number = number or (s.scalar(select(func.max(Round.number))) or 0) + 1
    row = Round(
        number=number,
        policy_id=policy_id,
        seed=number if seed is None else seed,
        config_hash=config_hash,
        stats=stats or {},
    )
    s.add(row)
    s.flush()
    return row


def close_round(spine: Spine, number: int, stats: dict[str, Any]) -> None:
    """Round `number` done, with its figures (the report reads them)."""
    with transaction(spine.sessions) as s:
        row = s.scalars(select(Round).where(Round.number == number)).one()
        row.keep(stats)
        row.status = "done"
        row.finished = row.finished or datetime.now(UTC)
