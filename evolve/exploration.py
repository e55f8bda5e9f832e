"""Exploration until a first success (`evolve.explore_share`): the trained policy learns only from
successes, so from round 2 on, the queries of an app (or suite task) that no earlier episode solved
also get random-explorer rollouts, after the round's own (docs/loop.md)."""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import select

from evolve.lifecycle import find_round
from evolve.policies import policy_factory, register_policy
from evolve.spine import open_spine
from evolve.steps import EXPLORER, load_queries, roll
from rollout.runner import RolloutConfig
from storage.db import transaction
from storage.models import App, Episode
from storage.models import Query as QueryRow
from trajforge.settings import Settings


def unsolved_queries(settings: Settings, number: int, uids: list[str]) -> list[str]:
    """Round N > 1's queries of the apps (suite tasks) that no episode of an earlier round solved."""
    if number == 1 or settings.evolve.explore_share <= 0:
        return []
    spine = open_spine(settings)
    rnd = find_round(spine, number)
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


def explore(settings: Settings, number: int, uids: list[str]) -> dict[str, Any]:
    """`explore_share` of K rollouts of the random explorer on each of these unsolved queries, after
    the round's own K (and any demonstration): a first success there gives the next policy a reference."""
    spine = open_spine(settings)
    rnd = find_round(spine, number)
    ev = settings.evolve
    with transaction(spine.sessions) as s:
        policy_id = register_policy(s, *EXPLORER, meta={"max_actions": ev.max_steps})
    config = RolloutConfig(
        rollouts_per_query=math.ceil(ev.explore_share * ev.rollouts),
        first_rollout=ev.rollouts + 1,  # past the round's own and round 1's demonstration
        workers=ev.devices,
        max_steps=ev.max_steps,
    )
    make = policy_factory(spine, policy_id)
    played = roll(spine, rnd, load_queries(spine, uids), policy_id, make, config)
    return {"queries": len(uids), **played}
