"""Inserting steps: the bulk path (`insert_ignore`) against naive per-row ORM adds.

"Naive" is what a first version writes: `session.add(Step(...))` and a flush per row,
so each row is its own INSERT round trip. Usage: python -m bench.bench_steps [--rows N]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from bench.common import scratch_postgres, table, timed
from storage.db import create_db_engine, insert_ignore, session_factory, transaction, upgrade
from storage.models import App, Episode, Policy, Query, Round, Step


def _setup(url: str) -> tuple[Any, int]:
    engine = create_db_engine(url)
    upgrade(engine)
    sessions = session_factory(engine)
    with transaction(sessions) as s:
        app, policy = App(name="bench", spec={}, spec_sha256="0" * 64), Policy(name="bench", version=0)
        s.add_all([app, policy])
        s.flush()
        rnd = Round(number=1, policy_id=policy.id)
        query = Query(uid="q", app_id=app.id, instruction="bench")
        s.add_all([rnd, query])
        s.flush()
        episodes = [
            Episode(uid=f"e{i}", round_id=rnd.id, query_id=query.id, policy_id=policy.id, attempt=i)
            for i in range(2)
        ]
        s.add_all(episodes)
        s.flush()
        return sessions, episodes[0].id, episodes[1].id  # type: ignore[return-value]


def _rows(episode_id: int, n: int) -> list[dict[str, Any]]:
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


def run(url: str, rows: int) -> list[str]:
    sessions, bulk_ep, naive_ep = _setup(url)  # type: ignore[misc]
    bulk_rows, naive_rows = _rows(bulk_ep, rows), _rows(naive_ep, rows)

    def bulk() -> None:
        with transaction(sessions) as s:
            for start in range(0, rows, 10_000):
                insert_ignore(s, Step, bulk_rows[start : start + 10_000], ["episode_id", "index"])

    def naive() -> None:
        with transaction(sessions) as s:
            for row in naive_rows:
                s.add(Step(**row))
                s.flush()

    _, t_bulk = timed(bulk)
    _, t_naive = timed(naive)
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Step)) == 2 * rows
    return [f"{rows / t_bulk:,.0f}", f"{rows / t_naive:,.0f}", f"{t_naive / t_bulk:.1f}x"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results.append(["sqlite", *run(f"sqlite:///{Path(tmp) / 'bench.db'}", args.rows)])
    with scratch_postgres() as pg:
        if pg is not None:
            results.append(["postgresql", *run(pg, args.rows)])
    print(
        table(
            f"insert {args.rows:,} steps: bulk vs per-row ORM",
            ["database", "bulk rows/s", "per-row rows/s", "bulk speed-up"],
            results,
        )
    )


if __name__ == "__main__":
    main()
