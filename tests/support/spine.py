"""Minimal rows of the data spine for tests and benchmarks that need somewhere to hang steps."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from storage.db import transaction
from storage.models import App, Episode, Policy, Query, Round


def seed_episodes(sessions: sessionmaker[Session], count: int = 1) -> list[int]:
    """An app, a policy, round 1, one query and `count` episodes of it; returns the episode ids."""
    with transaction(sessions) as s:
        app = App(name="takeout", spec={"screens": []}, spec_sha256="0" * 64)
        policy = Policy(name="builtin", version=1)
        s.add_all([app, policy])
        s.flush()
        rnd = Round(number=1, policy_id=policy.id)
        query = Query(uid="q1", app_id=app.id, instruction="Order me takeout")
        s.add_all([rnd, query])
        s.flush()
        episodes = [
            Episode(uid=f"e{i}", round_id=rnd.id, query_id=query.id, policy_id=policy.id, attempt=i)
            for i in range(count)
        ]
        s.add_all(episodes)
        s.flush()
        return [ep.id for ep in episodes]


def new_round(
    sessions: sessionmaker[Session], policy: str = "noisy-oracle", number: int = 1
) -> tuple[int, int]:
    """A policy and round `number` of it; returns (round id, policy id)."""
    with transaction(sessions) as s:
        row = Policy(name=policy, version=0)
        s.add(row)
        s.flush()
        rnd = Round(number=number, policy_id=row.id)
        s.add(rnd)
        s.flush()
        return rnd.id, row.id


def step_rows(episode_id: int, n: int) -> list[dict[str, Any]]:
    """`n` step rows of one episode, as the bulk path takes them."""
    return [
        {
            "episode_id": episode_id,
            "index": i,
            "screenshot": f"{i:064x}",
            "screenshot_after": f"{i + 1:064x}",
            "width": 1080,
            "height": 2400,
            "action": {"kind": "click", "point": [i % 1000, (7 * i) % 1000]},
            "raw_output": f'{{"POINT":[{i % 1000},{(7 * i) % 1000}]}}',
        }
        for i in range(n)
    ]
