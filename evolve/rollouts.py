"""The loop's rollout stages: `rollout` (K rollouts of the round's policy on each query, fanned out
by query shard) and `guided` (round 1's guided demonstrations: the ground-truth path replayed on
the hardest `guided_fraction` of its queries).

Round 1 rolls out the random explorer (or the user's served checkpoint); round N > 1 the policy
chosen after round N - 1. Episodes are keyed by (round, query, rollout), so a rerun plays only
what is missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from evolve.lifecycle import play
from evolve.policies import policy_factory, register_policy
from evolve.revisits import latest_guidance
from evolve.spine import Spine, open_farm, open_pool
from rollout.policies import NoisyOracle, OracleNoise, Policy
from rollout.runner import RolloutConfig
from storage.db import transaction
from storage.models import App, Episode, Round
from storage.models import Query as QueryRow
from trajforge.domain import Query
from trajforge.errors import DeviceError
from trajforge.stage import DEVICES, MODEL_CALLS, PART, Facts, Given, Stage, one_or_none, split, sum_counts

EXPLORER = ("random-explorer", 0)
GUIDED = ("guided-demo", 0)
DIFFICULTY = {"hard": 0, "medium": 1, "easy": 2}
ROLLED = ("episodes", "already_stored", "successes", "steps", "seconds")


def load_queries(spine: Spine, uids: list[str]) -> list[Query]:
    with spine.sessions() as s:
        rows = s.execute(
            select(QueryRow, App.name).join(App, App.id == QueryRow.app_id).where(QueryRow.uid.in_(uids))
        ).all()
    by_uid = {q.uid: q.to_domain(app) for q, app in rows}
    return [by_uid[u] for u in uids if u in by_uid]


def roll(
    spine: Spine,
    rnd: Round,
    queries: list[Query],
    policy_id: int,
    make: Callable[[], Policy],
    config: RolloutConfig,
    guidance: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The queries played on the loop's farm; raises DeviceError where some found no device."""
    farm = open_farm(spine)
    pool = open_pool(spine)
    report, _ = play(
        spine, farm, pool, rnd.id, policy_id, queries, make, config, backend=farm.backend, guidance=guidance
    )
    if report.not_run:  # the task fails loudly; its retry (or a rerun) plays only what is missing
        raise DeviceError(
            f"{report.not_run} episodes of round {rnd.number} found no free device within "
            f"{config.lease_wait_s:g}s; rerun to play them (stored episodes are not redone)"
        )
    values = (report.completed, report.skipped, report.successes, report.steps, round(report.seconds, 3))
    return dict(zip(ROLLED, values, strict=True))


def rolled_line(played: dict[str, Any]) -> str:
    return (
        f"{played['episodes']} episodes played ({played['already_stored']} already stored), "
        f"{played['successes']} successful, {played['steps']} steps"
    )


def query_parts(spine: Spine, _number: int, given: Given) -> list[list[str]]:
    """The round's queries (the `queries` stage's report) in `evolve.shards` parts."""
    return split(given["queries"], spine.settings.evolve.shards)


def rollout_shard(spine: Spine, number: int, given: Given) -> Facts:
    """K rollouts of the round's policy on these queries; episodes stored earlier are not redone."""
    rnd = spine.round(number)
    uids, ev = given[PART], spine.settings.evolve
    guidance, demos = latest_guidance(spine, uids)
    make = policy_factory(spine, rnd.policy_id, demos)
    workers = max(1, -(-ev.devices // ev.shards))  # the shards run at once and share the devices
    config = RolloutConfig(rollouts_per_query=ev.rollouts, workers=workers, max_steps=ev.max_steps)
    played = roll(spine, rnd, load_queries(spine, uids), rnd.policy_id, make, config, guidance)
    return Facts(played, rolled_line(played))


def guided_queries(spine: Spine, number: int, uids: list[str]) -> list[str]:
    """Round 1's hardest queries of each app (difficulty, then path length), `guided_fraction` of them."""
    fraction = spine.settings.evolve.guided_fraction
    if number != 1 or fraction <= 0:
        return []
    per_app: dict[str, list[Query]] = {}
    for q in load_queries(spine, uids):
        if q.path:  # a suite task has no ground truth to replay
            per_app.setdefault(q.app, []).append(q)
    picked: list[str] = []
    for app in sorted(per_app):
        ranked = sorted(per_app[app], key=lambda q: (DIFFICULTY[q.difficulty], -len(q.path), q.uid))
        picked += [q.uid for q in ranked[: math.ceil(fraction * len(ranked))]]
    return picked


def guided_part(spine: Spine, number: int, given: Given) -> list[list[str]]:
    """One part, the guided queries, where there are any."""
    guided = guided_queries(spine, number, given["queries"])
    return [guided] if guided else []


def demonstrate(spine: Spine, number: int, given: Given) -> Facts:
    """One guided demonstration per query: the ground-truth path replayed without noise."""
    rnd = spine.round(number)
    with transaction(spine.sessions) as s:
        policy_id = register_policy(s, *GUIDED, meta={"noise": OracleNoise().model_dump()})
    ev = spine.settings.evolve
    config = RolloutConfig(
        rollouts_per_query=1, first_rollout=ev.rollouts, workers=ev.devices, max_steps=ev.max_steps
    )
    queries = load_queries(spine, given[PART])
    played = roll(spine, rnd, queries, policy_id, lambda: NoisyOracle(OracleNoise()), config)
    return Facts(played, rolled_line(played))


def has_episode(spine: Spine, number: int) -> bool:
    round_id = spine.round(number).id
    with spine.sessions() as s:
        return s.scalars(select(Episode.id).where(Episode.round_id == round_id).limit(1)).first() is not None


ROLLOUT: Stage[Spine] = Stage(
    "rollout",
    "rollout-shard",
    rollout_shard,
    reads=("query", "policy", "device"),
    writes=("episode", "step", "anchor", "exclusion"),
    after=("queries",),
    needs=("queries",),
    done=has_episode,
    not_done="rolled out",
    tags=(DEVICES, MODEL_CALLS),
    fan_out=query_parts,
    merge=sum_counts,
)
GUIDED_DEMOS: Stage[Spine] = Stage(
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
