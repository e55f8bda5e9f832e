"""A round's open and close, and its episodes played on a farm: the same for the loop's rollout
stages (`evolve.rollouts`), the smoke round and `trajforge rollout`. The judging, calibration and
curation they all run are the stages themselves (`critics.stages`, `curation.stages`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from evolve.spine import Spine
from rollout.env import Environment
from rollout.policies import Policy
from rollout.pool import DevicePool, Lease
from rollout.runner import EpisodeRunner, RolloutConfig, RolloutReport
from storage.db import transaction
from storage.models import Round
from trajforge.domain import Query
from trajforge.endpoints import charge_round
from trajforge.gateway import LLMGateway, closing


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


def play(
    spine: Spine,
    farm: Callable[[Lease], Environment],
    pool: DevicePool,
    round_id: int,
    policy_id: int,
    queries: list[Query],
    policies: Callable[[], Policy],
    config: RolloutConfig,
    *,
    backend: str | None,
    guidance: dict[str, str] | None = None,
    gateway_to_close: LLMGateway | None = None,
) -> tuple[RolloutReport, EpisodeRunner]:
    """K rollouts of each query on the farm's devices of `backend`; stored episodes are not redone.
    A policy's model gateway (`gateway_to_close`) is closed on the event loop it ran on."""
    runner = EpisodeRunner(
        spine.sessions,
        pool,
        farm,
        policies,
        config,
        guidance=guidance,
        backend=backend,
    )
    work = runner.run(queries, round_id, policy_id)
    with charge_round(round_id):
        report = asyncio.run(closing(gateway_to_close, work) if gateway_to_close is not None else work)
    return report, runner


def close_round(spine: Spine, number: int, stats: dict[str, Any]) -> None:
    """Round `number` done, with its figures (the report reads them)."""
    with transaction(spine.sessions) as s:
        row = s.scalars(select(Round).where(Round.number == number)).one()
        row.stats = {**(row.stats or {}), **stats}
        row.status = "done"
        row.finished = row.finished or datetime.now(UTC)
