"""MiniWoB++ rollout speed: steps/s with 1, 2 and 4 workers (Chromium pages in parallel), and the
engine's own share of a step.

Every run rolls the random explorer out on the same seeds of a few MiniWoB tasks through the
production runner (device pool, episode records in SQLite, screenshots hashed into the local
object store). Each environment call is timed inside the browser's thread (`Timed`); the rest
of a step's wall time (the policy, parsing, recording, hashing, storing, the pool) is the
engine's. The baseline is the 1-worker run of the same invocation.

Then the same tasks and seeds through BrowserGym (`browsergym:miniwob.TASK`, its own venv behind a
pipe) beside trajforge's own driver, at 1 and 2 workers (`routes`), when BrowserGym is installed.
Usage: python -m bench.bench_miniwob [--seeds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import table, worker_counts
from rollout.policies import RandomExplorer
from rollout.pool import DevicePool
from rollout.runner import EpisodeRunner, RolloutConfig, RolloutReport
from rollout.sim.farm import SimFarm
from rollout.suites import Suite, resolve
from rollout.suites.farm import SuiteFarm
from rollout.suites.queries import environment_queries
from storage.db import create_db_engine, session_factory, upgrade
from storage.objectstore import LocalObjectStore
from tests.support.spine import new_round
from trajforge.actions import Action
from trajforge.domain import Observation, Query

TASKS = ["click-test", "click-button", "click-link", "enter-text", "focus-text", "click-option"]


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--seeds 1 --workers 1 --tasks 2"


class Timed:
    """An environment whose calls add up their time (the browser's share of a step)."""

    def __init__(self, env: Any, clock: dict[str, float], lock: threading.Lock) -> None:
        self.env, self.clock, self.lock = env, clock, lock

    def _timed(self, fn: Any, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args)
        finally:
            with self.lock:
                self.clock["env"] += time.perf_counter() - started

    def reset(self, task: Query) -> Observation:
        return self._timed(self.env.reset, task)

    def step(self, action: Action) -> Observation:
        return self._timed(self.env.step, action)

    def verify(self) -> Any:
        return self._timed(self.env.verify)

    def close(self) -> None:
        self.env.close()


def run(
    seeds: int,
    workers: int,
    refs: list[str] | None = None,
    max_steps: int = 10,
    timed: Callable[[Any, dict[str, float], threading.Lock], Timed] = Timed,
) -> tuple[RolloutReport, float]:
    """The random explorer on `seeds` seeds of each suite task (`refs`, default MiniWoB's TASKS) with
    `workers` devices, through the production runner; its report and the environments' seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_db_engine(f"sqlite:///{Path(tmp) / 'bench.db'}")
        upgrade(engine)
        sessions = session_factory(engine)
        suites: dict[str, Suite] = {}
        for ref in refs or [f"miniwob:{task}" for task in TASKS]:
            app, suite, _ = resolve(ref)
            suites[app] = suite
        made = environment_queries(sessions, suites, {app: list(range(seeds)) for app in suites})
        queries = [q for app in suites for q in made[app]]
        ids = new_round(sessions)
        store = LocalObjectStore(Path(tmp) / "objects")
        farm = SuiteFarm(SimFarm(store=store), suites)
        clock, lock = {"env": 0.0}, threading.Lock()
        pool = DevicePool(sessions, max_failures=50)
        farm.register(pool, workers)
        runner = EpisodeRunner(
            sessions,
            pool,
            lambda lease: timed(farm(lease), clock, lock),
            RandomExplorer,
            RolloutConfig(workers=workers, max_steps=max_steps),
            backend=farm.backend,
        )
        report = asyncio.run(runner.run(queries, *ids))
        return report, clock["env"]


def _warm() -> None:
    """One page load before timing: Chromium's first start reads its files from disk."""
    env = resolve("miniwob:click-test")[1].environment(None)
    env.describe("click-test", 0)
    env.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=8, help="per task")
    parser.add_argument("--workers", default="1,2,4", help="worker counts (the routes run at those up to 2)")
    parser.add_argument("--tasks", type=int, default=len(TASKS), help=f"the first N of {', '.join(TASKS)}")
    args = parser.parse_args()
    tasks = TASKS[: args.tasks]
    from rollout.web.env import chromium_available

    if not chromium_available():
        print("bench_miniwob: skipped, Chromium is not installed (apt-get install chromium)")
        return
    _warm()
    rows, base = [], None
    counts = worker_counts(args.workers)
    for workers in counts:
        report, env_seconds = run(args.seeds, workers, [f"miniwob:{t}" for t in tasks])
        rate = report.steps / report.seconds
        base = base or rate
        busy = report.seconds * workers  # worker-seconds; the browser's calls are part of them
        engine_ms = 1000 * max(busy - env_seconds, 0.0) / max(report.steps, 1)
        rows.append(
            [
                f"{workers}",
                f"{report.completed}/{report.requested}",
                f"{report.successes}",
                f"{rate:.1f}",
                f"{rate / base:.2f}x",
                f"{1000 * env_seconds / max(report.steps, 1):.0f}",
                f"{engine_ms:.0f}",
                f"{engine_ms / (engine_ms + 1000 * env_seconds / max(report.steps, 1)):.0%}",
            ]
        )
    header = ["workers", "episodes", "successes", "steps/s", "vs 1 worker", "browser ms/step",
              "engine ms/step", "engine share"]  # fmt: skip
    print(
        table(f"MiniWoB++ rollouts, random explorer, {len(tasks)} tasks x {args.seeds} seeds", header, rows)
    )
    routes(args.seeds, [n for n in counts if n <= 2], tasks)


def routes(seeds: int, counts: list[int], tasks: list[str]) -> None:
    """trajforge's own MiniWoB driver against the BrowserGym route (`browsergym:miniwob.TASK`, in
    BrowserGym's venv) on the same tasks and seeds, 1 and 2 workers; the baseline is the own driver
    at the same worker count. BrowserGym starts a fresh browser (and its chat window) per reset."""
    from rollout.suites import browsergym

    if browsergym.missing():
        print(f"BrowserGym route: skipped, {browsergym.missing()[0]}")
        return
    rows = []
    for workers in counts:
        base = None
        for route, refs in (
            ("trajforge miniwob", [f"miniwob:{t}" for t in tasks]),
            ("browsergym", [f"browsergym:miniwob.{t}" for t in tasks]),
        ):
            report, env_seconds = run(seeds, workers, refs)
            rate = report.steps / report.seconds
            base = base or rate
            rows.append(
                [
                    route,
                    f"{workers}",
                    f"{report.completed}/{report.requested}",
                    f"{report.successes}",
                    f"{rate:.2f}",
                    f"{rate / base:.2f}x",
                    f"{1000 * report.seconds * workers / max(report.steps, 1):.0f}",
                    f"{1000 * env_seconds / max(report.steps, 1):.0f}",
                ]
            )
    header = ["route", "workers", "episodes", "successes", "steps/s", "vs own driver",
              "ms/step (wall x workers)", "env ms/step (resets included)"]  # fmt: skip
    print(
        table(
            f"MiniWoB++ through trajforge's driver and through BrowserGym, {seeds} seeds each", header, rows
        )
    )


if __name__ == "__main__":
    main()
