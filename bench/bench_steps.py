"""Inserting steps: the bulk path (`insert_ignore`) against naive per-row ORM adds.

"Naive" is what a first version writes: `session.add(Step(...))` and a flush per row,
so each row is its own INSERT round trip. Usage: python -m bench.bench_steps [--rows N]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from bench.common import scratch_postgres, table, timed
from storage.db import create_db_engine, insert_ignore, session_factory, transaction, upgrade
from storage.models import Step
from tests.support.spine import seed_episodes, step_rows

# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--rows 200"


def _setup(url: str) -> tuple[sessionmaker[Session], int, int]:
    engine = create_db_engine(url)
    upgrade(engine)
    sessions = session_factory(engine)
    bulk_episode, naive_episode = seed_episodes(sessions, 2)
    return sessions, bulk_episode, naive_episode


def run(url: str, rows: int) -> list[str]:
    sessions, bulk_ep, naive_ep = _setup(url)
    bulk_rows, naive_rows = step_rows(bulk_ep, rows), step_rows(naive_ep, rows)

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
