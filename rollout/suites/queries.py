"""Queries of environments that bring their own tasks (`rollout.suites`): no DAG, no sampling.

A suite task's queries are its seeds: the environment generates each seed's instruction and
parameters, and rewards the episode itself. A round's seeds are drawn from the round's seed;
the held-out seeds from a range no round reaches, so no policy is trained on them.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from rollout.suites.base import Suite, task_query
from rollout.suites.farm import describe_tasks
from storage.apps import register_suite_app
from storage.db import insert_ignore, record_exclusions, transaction
from storage.models import Query as QueryRow
from storage.rounds import QUERY_STAGE
from trajforge.domain import Query

log = logging.getLogger("trajforge.suites")
NO_INSTRUCTION = "no_instruction"  # the environment worded a seed's task as nothing

ROUND_STRIDE = 100_000  # round r's seeds are r.seed * ROUND_STRIDE + i
HELDOUT_BASE = 2_000_000_000  # held-out seeds: HELDOUT_BASE + i, beyond every round's


def round_seeds(round_seed: int, n: int) -> list[int]:
    return [round_seed * ROUND_STRIDE + i for i in range(n)]


def heldout_seeds(start: int, n: int) -> list[int]:
    return [HELDOUT_BASE + i for i in range(start, start + n)]


def environment_queries(
    sessions: sessionmaker[Session],
    suites: dict[str, Suite],
    wanted: dict[str, list[int]],
    round_id: int | None = None,
    meta: dict[str, Any] | None = None,
) -> dict[str, list[Query]]:
    """The queries of these seeds of each suite task (app), as the environment words them, stored
    (one transaction; reruns add nothing twice)."""
    described = describe_tasks(suites, wanted)
    out: dict[str, list[Query]] = {}
    with transaction(sessions) as session:
        for app, tasks in described.items():
            app_id = register_suite_app(session, app, suites[app].name, getattr(suites[app], "device", None))
            worded = [(seed, text.strip(), params) for seed, text, params in tasks]
            queries = [task_query(app, seed, text, params) for seed, text, params in worded if text]
            insert_ignore(session, QueryRow, [_row(q, app_id, round_id, meta) for q in queries], ["uid"])
            out[app] = queries
            if unworded := [seed for seed, text, _ in worded if not text]:  # kept with the reason
                log.warning(
                    "%s: the environment gave no instruction for %d seed(s); those queries are dropped (%s)",
                    app, len(unworded), NO_INSTRUCTION,
                )  # fmt: skip
                drops = [(f"{app}#{seed}", NO_INSTRUCTION, {"app": app, "seed": seed}) for seed in unworded]
                record_exclusions(session, round_id, QUERY_STAGE, "query", drops)
    return out


def _row(query: Query, app_id: int, round_id: int | None, meta: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "uid": query.uid,
        "app_id": app_id,
        "round_id": round_id,
        "instruction": query.instruction,
        "template": None,
        "slots": query.slots,
        "path": [],
        "goal": query.goal,
        "source": query.source,
        "status": "kept",
        "difficulty": query.difficulty,
        "meta": {"tier": "", "seed": query.goal["seed"], **(meta or {})},
    }
