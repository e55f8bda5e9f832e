"""One round's lifecycle, the same for the loop (`evolve.steps`), the smoke round and
`trajforge rollout`: open the round, play its episodes on a farm, judge, calibrate and curate
it, close it. Each stage here returns its typed report; the loop's steps turn them into the
small JSON reports Prefect keeps, so the tests that go through the smoke round run the code
the loop runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from critics.calibration import calibrate_round
from critics.csrs import ExtractionReport, extract_round
from critics.judge import JudgeReport, judge_round, judge_round_llm
from critics.outcomes import round_outcomes
from curation.pipeline import CurationReport, curate_round
from evolve.spine import Spine
from evolve.stages import require
from rollout.env import Environment
from rollout.policies import Policy
from rollout.pool import DevicePool, Lease
from rollout.runner import EpisodeRunner, RolloutConfig, RolloutReport
from rollout.sim.env import demonstrator
from storage.db import transaction
from storage.models import Round
from trajforge.domain import Query
from trajforge.endpoints import charge_round
from trajforge.errors import ConfigError
from trajforge.gateway import LLMGateway, closing
from trajforge.recovery import Prober
from trajforge.verdicts import CONSENSUS


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


def find_round(spine: Spine, number: int) -> Round:
    """Round `number`, which `trajforge evolve` must have started."""
    with spine.sessions() as s:
        row = s.scalars(select(Round).where(Round.number == number)).first()
    if row is None:
        raise ConfigError(f"round {number} has not been started; run `trajforge evolve` to start it")
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


@dataclass
class Judged:
    offline: JudgeReport
    model_judged: int | None = None  # episodes the model critics judged (None: no endpoint)


def judge(spine: Spine, round_id: int) -> Judged:
    """Offline critics on every step and episode; the model critics too when an endpoint is set."""
    require(spine.sessions, round_id, "judge")
    settings = spine.settings.critics
    out = Judged(judge_round(spine.sessions, round_id, spine.apps, spine.store, settings))
    gateway = spine.gateway("critics")
    if gateway is not None:
        judged = judge_round_llm(spine.sessions, round_id, gateway, spine.frames, settings=settings)
        with charge_round(round_id):
            out.model_judged = asyncio.run(closing(gateway, judged)).episodes
    return out


def calibrate(spine: Spine, round_id: int) -> tuple[dict[str, Any], ExtractionReport]:
    """The consensus against the anchors (verifier, or a human's verdict), then CSRS extraction."""
    require(spine.sessions, round_id, "calibrate")
    consensus = calibrate_round(spine.sessions, round_id)["channels"].get(":".join(CONSENSUS), {})
    with charge_round(round_id):
        samples = extract_round(
            spine.sessions, round_id, spine.gateway("writer"), spine.frames, spine.settings.critics
        )
    return consensus, samples


def curate(spine: Spine, round_id: int, prober: Prober | None) -> CurationReport:
    """Dedup, guidance, thoughts, recovery and balancing of the judged round."""
    require(spine.sessions, round_id, "curate")
    settings = spine.settings
    with charge_round(round_id):
        return curate_round(
            spine.sessions,
            round_id,
            spine.store,
            settings.curate,
            demonstrator(spine.apps, spine.store),
            round_outcomes(spine.sessions, round_id, settings.critics),
            spine.gateway("writer"),
            prober=prober,
        )


def close_round(spine: Spine, number: int, stats: dict[str, Any]) -> None:
    """Round `number` done, with its figures (the report reads them)."""
    with transaction(spine.sessions) as s:
        row = s.scalars(select(Round).where(Round.number == number)).one()
        row.stats = {**(row.stats or {}), **stats}
        row.status = "done"
        row.finished = row.finished or datetime.now(UTC)
