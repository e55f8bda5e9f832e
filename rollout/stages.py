"""The rollout package's stages of a round: `devices` (the farm's devices in the pool), `rollout`
(K rollouts of the round's policy on each query, fanned out by query shard), `guided` (round 1's
guided demonstrations: the ground-truth path replayed on the hardest `guided_fraction` of its
queries) and `explore` (exploration until a first success, `evolve.explore_share`: from round 2 on,
the queries of an app or suite task that no earlier episode solved also get random-explorer
rollouts, after the round's own, since the trained policy learns only from successes; docs/loop.md).

Round 1 rolls out the random explorer (or the user's served checkpoint); round N > 1 the policy
chosen after round N - 1. Episodes are keyed by (round, query, rollout), so a rerun plays only
what is missing; registering the devices is idempotent.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypedDict

from sqlalchemy import select

from rollout.loop import RolloutContext, latest_guidance, open_farm, open_pool, play
from rollout.policies import NoisyOracle, OracleNoise, Policy
from rollout.runner import RolloutConfig, RolloutReport
from rollout.versions import policy_factory
from storage.db import transaction
from storage.models import App, Episode, Round
from storage.models import Query as QueryRow
from storage.policies import register_policy
from trajforge.domain import Query
from trajforge.errors import DeviceError
from trajforge.stage import DEVICES, MODEL_CALLS, PART, Facts, Given, Stage, one_or_none, split, sum_counts

EXPLORER = ("random-explorer", 0)
GUIDED = ("guided-demo", 0)
DIFFICULTY = {"hard": 0, "medium": 1, "easy": 2}


class Rolled(TypedDict):
    """A rollout stage's report (`rollout`'s parts summed, `guided`'s, `explore`'s with its
    `queries`), as `finish` reads it."""

    episodes: int  # played now
    already_stored: int  # by an earlier run: not redone
    successes: int
    steps: int
    seconds: float


def load_queries(ctx: RolloutContext, uids: list[str]) -> list[Query]:
    with ctx.sessions() as s:
        rows = s.execute(
            select(QueryRow, App.name).join(App, App.id == QueryRow.app_id).where(QueryRow.uid.in_(uids))
        ).all()
    by_uid = {q.uid: q.to_domain(app) for q, app in rows}
    return [by_uid[u] for u in uids if u in by_uid]


def roll(
    ctx: RolloutContext,
    rnd: Round,
    queries: list[Query],
    policy_id: int,
    make: Callable[[], Policy],
    config: RolloutConfig,
    guidance: dict[str, str] | None = None,
) -> Rolled:
    """The queries played on the loop's farm; raises DeviceError where some found no device."""
    farm = open_farm(ctx)
    pool = open_pool(ctx)
    report, _ = play(
        ctx, farm, pool, rnd.id, policy_id, queries, make, config, backend=farm.backend, guidance=guidance
    )
    if report.not_run:  # the task fails loudly; its retry (or a rerun) plays only what is missing
        raise DeviceError(
            f"{report.not_run} episodes of round {rnd.number} found no free device within "
            f"{config.lease_wait_s:g}s; rerun to play them (stored episodes are not redone)"
        )
    return rolled(report)


def rolled(report: RolloutReport) -> Rolled:
    """The stage's report of a run of the episode runner."""
    return Rolled(
        episodes=report.completed,
        already_stored=report.skipped,
        successes=report.successes,
        steps=report.steps,
        seconds=round(report.seconds, 3),
    )


def rolled_line(played: Rolled | dict[str, Any]) -> str:
    return (
        f"{played['episodes']} episodes played ({played['already_stored']} already stored), "
        f"{played['successes']} successful, {played['steps']} steps"
    )


def query_parts(ctx: RolloutContext, _number: int, given: Given) -> list[list[str]]:
    """The round's queries (the `queries` stage's report) in `evolve.shards` parts."""
    return split(given["queries"], ctx.settings.evolve.shards)


def rollout_shard(ctx: RolloutContext, number: int, given: Given) -> Facts:
    """K rollouts of the round's policy on these queries; episodes stored earlier are not redone."""
    rnd = ctx.round(number)
    uids, ev = given[PART], ctx.settings.evolve
    guidance, demos = latest_guidance(ctx, uids)
    make = policy_factory(ctx, rnd.policy_id, demos)
    workers = max(1, -(-ev.devices // ev.shards))  # the shards run at once and share the devices
    config = RolloutConfig(rollouts_per_query=ev.rollouts, workers=workers, max_steps=ev.max_steps)
    played = roll(ctx, rnd, load_queries(ctx, uids), rnd.policy_id, make, config, guidance)
    return Facts(played, rolled_line(played))


def guided_queries(ctx: RolloutContext, number: int, uids: list[str]) -> list[str]:
    """Round 1's hardest queries of each app (difficulty, then path length), `guided_fraction` of them."""
    fraction = ctx.settings.evolve.guided_fraction
    if number != 1 or fraction <= 0:
        return []
    per_app: dict[str, list[Query]] = {}
    for q in load_queries(ctx, uids):
        if q.path:  # a suite task has no ground truth to replay
            per_app.setdefault(q.app, []).append(q)
    picked: list[str] = []
    for app in sorted(per_app):
        ranked = sorted(per_app[app], key=lambda q: (DIFFICULTY[q.difficulty], -len(q.path), q.uid))
        picked += [q.uid for q in ranked[: math.ceil(fraction * len(ranked))]]
    return picked


def guided_part(ctx: RolloutContext, number: int, given: Given) -> list[list[str]]:
    """One part, the guided queries, where there are any."""
    guided = guided_queries(ctx, number, given["queries"])
    return [guided] if guided else []


def demonstrate(ctx: RolloutContext, number: int, given: Given) -> Facts:
    """One guided demonstration per query: the ground-truth path replayed without noise."""
    rnd = ctx.round(number)
    with transaction(ctx.sessions) as s:
        policy_id = register_policy(s, *GUIDED, meta={"noise": OracleNoise().model_dump()})
    ev = ctx.settings.evolve
    config = RolloutConfig(
        rollouts_per_query=1, first_rollout=ev.rollouts, workers=ev.devices, max_steps=ev.max_steps
    )
    queries = load_queries(ctx, given[PART])
    played = roll(ctx, rnd, queries, policy_id, lambda: NoisyOracle(OracleNoise()), config)
    return Facts(played, rolled_line(played))


ROLLOUT: Stage[RolloutContext] = Stage(
    "rollout",
    "rollout-shard",
    rollout_shard,
    reads=("query", "policy", "device"),
    writes=("episode", "step", "anchor", "exclusion"),
    after=("queries",),
    needs=("queries",),
    tags=(DEVICES, MODEL_CALLS),
    fan_out=query_parts,
    merge=sum_counts,
)
GUIDED_DEMOS: Stage[RolloutContext] = Stage(
    "guided",
    "guided-demonstrations",
    demonstrate,
    reads=("query", "device"),
    writes=("episode", "step", "anchor", "policy"),
    after=("queries",),
    needs=("queries",),
    tags=(DEVICES,),
    fan_out=guided_part,
    merge=one_or_none,
)


def unsolved_queries(ctx: RolloutContext, number: int, uids: list[str]) -> list[str]:
    """Round N > 1's queries of the apps (suite tasks) that no episode of an earlier round solved."""
    if number == 1 or ctx.settings.evolve.explore_share <= 0:
        return []
    rnd = ctx.round(number)
    with ctx.sessions() as s:
        solved = set(
            s.scalars(
                select(App.name)
                .join(QueryRow, QueryRow.app_id == App.id)
                .join(Episode, Episode.query_id == QueryRow.id)
                .where(Episode.round_id < rnd.id, Episode.outcome == "success")
                .distinct()
            )
        )
    return [q.uid for q in load_queries(ctx, uids) if q.app not in solved]


def unsolved_part(ctx: RolloutContext, number: int, given: Given) -> list[list[str]]:
    """One part, the round's unsolved queries, where there are any."""
    unsolved = unsolved_queries(ctx, number, given["queries"])
    return [unsolved] if unsolved else []


def explore(ctx: RolloutContext, number: int, given: Given) -> Facts:
    """`explore_share` of K rollouts of the random explorer on each of these unsolved queries, after
    the round's own K (and any demonstration): a first success there gives the next policy a reference."""
    rnd = ctx.round(number)
    uids: list[str] = given[PART]
    ev = ctx.settings.evolve
    with transaction(ctx.sessions) as s:
        policy_id = register_policy(s, *EXPLORER, meta={"max_actions": ev.max_steps})
    config = RolloutConfig(
        rollouts_per_query=math.ceil(ev.explore_share * ev.rollouts),
        first_rollout=ev.rollouts + 1,  # past the round's own and round 1's demonstration
        workers=ev.devices,
        max_steps=ev.max_steps,
    )
    make = policy_factory(ctx, policy_id)
    played: dict[str, Any] = {
        "queries": len(uids),
        **roll(ctx, rnd, load_queries(ctx, uids), policy_id, make, config),
    }
    return Facts(played, f"explored {len(uids)} unsolved queries: {rolled_line(played)}")


EXPLORE: Stage[RolloutContext] = Stage(
    "explore",
    "exploration",
    explore,
    reads=("query", "episode", "device"),
    writes=("episode", "step", "anchor", "policy"),
    after=("rollout",),
    needs=("queries",),
    tags=(DEVICES,),
    fan_out=unsolved_part,
    merge=one_or_none,
)


def register_devices(ctx: RolloutContext, _number: int, _given: Given) -> Facts:
    """The loop's devices, in the pool every rollout task leases from (idempotent)."""
    devices = ctx.settings.evolve.devices
    open_farm(ctx).register(open_pool(ctx), devices)
    return Facts(devices, f"{devices} devices")


REGISTER_DEVICES: Stage[RolloutContext] = Stage(
    "devices", "register-devices", register_devices, writes=("device",)
)
