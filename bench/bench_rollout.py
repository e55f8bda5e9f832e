"""Rollout throughput on the simulated farm: 1, 2 and 4 workers, and with injected faults.

Every run rolls the same queries out with the perfect oracle on a fresh SQLite database
and local object store. The fault run injects crashes and hangs at a per-action rate that
hits about 10% of episodes; every requested episode must still be accounted for.
Usage: python -m bench.bench_rollout [--queries 40]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench.common import table, worker_counts
from querygen.pipeline import generate_queries, store_generation
from rollout.policies import NoisyOracle
from rollout.pool import DevicePool
from rollout.runner import EpisodeRunner, RolloutConfig, RolloutReport
from rollout.sim.farm import SimFarm
from rollout.web.env import chromium_available
from rollout.web.farm import WebFarm
from storage.db import create_db_engine, session_factory, upgrade
from storage.objectstore import LocalObjectStore
from tests.support.spine import new_round
from trajforge.appspec import builtin_app_names, load_app
from trajforge.world.model import FaultConfig

PER_ACTION_FAULT = 0.0055  # crash and hang each; ~9 actions an episode: ~10% of episodes meet one


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--queries 1 --workers 1"


def run(
    queries_per_app: int, workers: int, faults: FaultConfig | None, backend: str = "sim"
) -> RolloutReport:
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_db_engine(f"sqlite:///{Path(tmp) / 'bench.db'}")
        upgrade(engine)
        sessions = session_factory(engine)
        queries = []
        for name in builtin_app_names():
            report = generate_queries(load_app(name), queries_per_app, seed=0)
            store_generation(sessions, load_app(name), report)
            queries.extend(report.kept)
        ids = new_round(sessions)
        store = LocalObjectStore(Path(tmp) / "objects")
        farm: SimFarm | WebFarm = (
            SimFarm(store=store, faults=faults) if backend == "sim" else WebFarm(store=store)
        )
        pool = DevicePool(sessions, max_failures=50)
        farm.register(pool, workers)
        runner = EpisodeRunner(
            sessions,
            pool,
            farm,
            NoisyOracle,
            RolloutConfig(workers=workers, max_attempts=10),
            backend=backend,
        )
        return asyncio.run(runner.run(queries, *ids))


def _row(r: RolloutReport, base: RolloutReport) -> list[str]:
    """Episodes done, their rate, steps per second, speed-up over `base`."""
    return [
        f"{r.completed}/{r.requested}",
        f"{60 * r.completed / r.seconds:,.0f}",
        f"{r.steps / r.seconds:,.1f}",
        f"{base.seconds / r.seconds:.2f}x",
    ]


def _web(queries: int, counts: list[int]) -> None:
    if not chromium_available():
        print("(web: Chromium not installed; skipped)\n")
        return
    web_rows, web = [], {}
    for browsers in counts:
        r = web[browsers] = run(max(2, queries // 8), browsers, None, backend="web")
        web_rows.append([f"{browsers}", *_row(r, web[counts[0]])])
    header = ["browsers", "episodes", "episodes/min", "steps/s", "vs 1 browser"]
    print(table("rollouts in Chromium (web backend), Pixel 7 emulation, perfect oracle", header, web_rows))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=40, help="per app")
    parser.add_argument("--workers", default="1,2,4", help="worker counts (faults at the second, or the one)")
    args = parser.parse_args()
    counts = worker_counts(args.workers)
    rows, base = [], {}
    for workers in counts:
        r = base[workers] = run(args.queries, workers, None)
        rows.append([f"{workers}", "none", *_row(r, base[counts[0]]), "0"])
    at = counts[min(1, len(counts) - 1)]
    faults = FaultConfig(seed=1, crash_rate=PER_ACTION_FAULT, hang_rate=PER_ACTION_FAULT)
    faulty = run(args.queries, at, faults)
    rows.append([f"{at}", "crash+hang", *_row(faulty, base[at]), f"{faulty.retries}"])
    print(
        table(
            f"rollouts on the simulated farm, {args.queries * 4} queries, perfect oracle, 1080x2400 frames",
            ["workers", "faults", "episodes", "episodes/min", "steps/s", "vs 1 worker", "retries"],
            rows,
        )
    )
    print(
        f"fault run: {dict(faulty.attempt_failures)} retried; overhead vs fault-free at {at} workers: "
        f"{faulty.seconds / base[at].seconds:.2f}x time\n"
    )
    _web(args.queries, [n for n in counts if n <= 2])


if __name__ == "__main__":
    main()
