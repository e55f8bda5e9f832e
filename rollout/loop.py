"""What the loop's rollout stages run on: the round's context with its suites, the farm and the
device pool built from it, episodes played on them, and what a round's rollouts read back (its
suite tasks' queries, the latest guidance of revisited queries).

The same for the loop's stages (`rollout.stages`), the held-out gate, the smoke round and
`trajforge rollout`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from sqlalchemy import select

from rollout.env import Environment
from rollout.policies import Policy
from rollout.pool import DevicePool, Lease
from rollout.recovery import device_prober
from rollout.runner import EpisodeRunner, RolloutConfig, RolloutReport
from rollout.sim.farm import SimFarm
from rollout.suites import Suite
from rollout.suites.farm import SuiteFarm
from rollout.suites.queries import environment_queries, round_seeds
from rollout.web.env import chromium_available
from rollout.web.farm import WebFarm
from storage.context import RoundContext
from storage.models import App, Guidance, Round
from storage.models import Query as QueryRow
from trajforge.domain import Query
from trajforge.endpoints import charge_round
from trajforge.errors import ConfigError
from trajforge.gateway import LLMGateway, closing
from trajforge.recovery import Prober


class RolloutContext(RoundContext, Protocol):
    """The round's context as rollouts need it: with the suite tasks of `apps:` by app name."""

    @property
    def suites(self) -> dict[str, Suite]: ...


def open_farm(ctx: RolloutContext) -> SimFarm | WebFarm | SuiteFarm:
    """The loop's devices: simulated phones, or the same apps as pages in Chromium (`evolve.backend`);
    with suite tasks in `apps:`, each slot also plays them in their suite's environment."""
    web = ctx.settings.evolve.backend == "web"
    if web and not chromium_available():
        raise ConfigError("evolve.backend 'web' needs Chromium and Playwright: apt-get install chromium")
    farm_type = WebFarm if web else SimFarm
    farm = farm_type(ctx.apps or None, store=ctx.store, faults=ctx.settings.evolve.faults)
    return SuiteFarm(farm, ctx.suites) if ctx.suites else farm


def open_pool(ctx: RoundContext) -> DevicePool:
    """The device pool, with the loop's cool-down before a retired device is probed."""
    return DevicePool(ctx.sessions, cooldown_s=ctx.settings.evolve.device_cooldown_s)


def open_prober(ctx: RolloutContext) -> Prober:
    """Error-recovery probes on one of the loop's devices (`rollout.recovery`)."""
    farm = open_farm(ctx)
    return device_prober(open_pool(ctx), farm, farm.backend, ctx.settings.curate.recovery_escapes)


def play(
    ctx: RoundContext,
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
    runner = EpisodeRunner(ctx.sessions, pool, farm, policies, config, guidance=guidance, backend=backend)
    work = runner.run(queries, round_id, policy_id)
    with charge_round(round_id):
        report = asyncio.run(closing(gateway_to_close, work) if gateway_to_close is not None else work)
    return report, runner


def suite_round_queries(ctx: RolloutContext, rnd: Round) -> list[str]:
    """The round's queries of each suite task: stored ones, else `queries_per_app` seeds of the
    round, each worded by the environment itself."""
    stored: dict[str, list[str]] = {}
    with ctx.sessions() as s:
        for uid, app in s.execute(
            select(QueryRow.uid, App.name)
            .join(App, App.id == QueryRow.app_id)
            .where(QueryRow.round_id == rnd.id, App.name.in_(list(ctx.suites)), QueryRow.status == "kept")
            .order_by(QueryRow.uid)
        ):
            stored.setdefault(app, []).append(uid)
    n = ctx.settings.evolve.queries_per_app
    missing = {app: round_seeds(rnd.seed, n) for app in ctx.suites if app not in stored}
    made = environment_queries(ctx.sessions, ctx.suites, missing, round_id=rnd.id)
    return [u for app in ctx.suites for u in stored.get(app) or sorted(q.uid for q in made[app])]


def latest_guidance(ctx: RoundContext, uids: list[str]) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Each query's latest guidance (`querygen.revisits`), read once: its text by query uid (for the
    prompt), and the kept steps of its reference as knn demonstrations."""
    latest: dict[str, tuple[str, str, list[Any]]] = {}
    with ctx.sessions() as s:
        for uid, text, steps, instruction in s.execute(
            select(Guidance.query_uid, Guidance.text, Guidance.steps, QueryRow.instruction)
            .join(QueryRow, QueryRow.uid == Guidance.query_uid)
            .where(Guidance.query_uid.in_(uids))
            .order_by(Guidance.round_id)
        ):
            latest[uid] = (text, instruction, steps or [])
    demos: list[dict[str, Any]] = []
    for _, instruction, steps in latest.values():
        previous = None
        for step in steps:
            demo = step.get("demonstration")
            if demo is None:
                previous = None
                continue
            if step.get("kept", True):
                demos.append(
                    {"instruction": instruction, "step": step["index"], "previous": previous, **demo}
                )
            previous = demo["action"]
    return {uid: text for uid, (text, _, _) in latest.items()}, demos
