"""Exploration until a first success (`evolve.explore_share`): the trained policy learns only from
successes, so from round 2 on, the queries of an app (or suite task) that no earlier episode solved
also get random-explorer rollouts, after the round's own (docs/loop.md)."""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import select

from evolve.policies import policy_factory, register_policy
from evolve.rollouts import EXPLORER, load_queries, roll, rolled_line
from evolve.spine import Spine
from rollout.runner import RolloutConfig
from storage.db import transaction
from storage.models import App, Episode
from storage.models import Query as QueryRow
from trajforge.stage import DEVICES, PART, Facts, Given, Stage, one_or_none


def unsolved_queries(spine: Spine, number: int, uids: list[str]) -> list[str]:
    """Round N > 1's queries of the apps (suite tasks) that no episode of an earlier round solved."""
    if number == 1 or spine.settings.evolve.explore_share <= 0:
        return []
    rnd = spine.round(number)
    with spine.sessions() as s:
        solved = set(
            s.scalars(
                select(App.name)
                .join(QueryRow, QueryRow.app_id == App.id)
                .join(Episode, Episode.query_id == QueryRow.id)
                .where(Episode.round_id < rnd.id, Episode.outcome == "success")
                .distinct()
            )
        )
    return [q.uid for q in load_queries(spine, uids) if q.app not in solved]


def unsolved_part(spine: Spine, number: int, given: Given) -> list[list[str]]:
    """One part, the round's unsolved queries, where there are any."""
    unsolved = unsolved_queries(spine, number, given["queries"])
    return [unsolved] if unsolved else []


def explore(spine: Spine, number: int, given: Given) -> Facts:
    """`explore_share` of K rollouts of the random explorer on each of these unsolved queries, after
    the round's own K (and any demonstration): a first success there gives the next policy a reference."""
    rnd = spine.round(number)
    uids: list[str] = given[PART]
    ev = spine.settings.evolve
    with transaction(spine.sessions) as s:
        policy_id = register_policy(s, *EXPLORER, meta={"max_actions": ev.max_steps})
    config = RolloutConfig(
        rollouts_per_query=math.ceil(ev.explore_share * ev.rollouts),
        first_rollout=ev.rollouts + 1,  # past the round's own and round 1's demonstration
        workers=ev.devices,
        max_steps=ev.max_steps,
    )
    make = policy_factory(spine, policy_id)
    played: dict[str, Any] = {
        "queries": len(uids),
        **roll(spine, rnd, load_queries(spine, uids), policy_id, make, config),
    }
    return Facts(played, f"explored {len(uids)} unsolved queries: {rolled_line(played)}")


EXPLORE: Stage[Spine] = Stage(
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
