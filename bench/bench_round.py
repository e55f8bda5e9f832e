"""One full round of the default config, stage by stage, and its fan-out on Dask vs threads.

Part 1 times round 1 and round 2 of the default evolve config through the plain steps
(what each Prefect task runs), so the split is the stages' own cost: rollout, judge,
calibrate (+ CSRS), curate, publish, train; it prints each stage's share of the round.
Part 2 runs the rollout and curation flows of the same round on the thread runner and
on a local Dask cluster of 2 worker processes, and prints both wall times and the ratio.

    python -m bench.bench_round [--queries-per-app N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evolve import heldout, steps
from evolve.trainer import train_next
from trajforge.settings import Settings, load_settings


def _settings(home: Path, **evolve: Any) -> Settings:
    os.environ["TRAJFORGE_HOME"] = str(home)
    settings = load_settings(None)
    return settings.model_copy(update={"evolve": settings.evolve.model_copy(update=evolve)})


def _round(settings: Settings, number: int) -> dict[str, float]:
    times: dict[str, float] = {}

    def timed(stage: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        out = fn()
        times[stage] = times.get(stage, 0.0) + time.perf_counter() - t0
        return out

    steps.start_round(settings, number)
    uids = timed("queries", lambda: steps.round_queries(settings, number))
    steps.register_devices(settings)
    timed("rollout", lambda: steps.rollout_shard(settings, number, uids))
    guided = steps.guided_queries(settings, number, uids)
    if guided:
        timed("rollout", lambda: steps.demonstrate(settings, number, guided))
    timed("judge", lambda: steps.judge(settings, number))
    timed("calibrate", lambda: steps.calibrate(settings, number))
    timed("curate", lambda: steps.curate(settings, number))
    published = timed("publish", lambda: steps.publish_round(settings, number))
    timed("train", lambda: train_next(settings, number, published["version"]))
    timed("held-out gate", lambda: heldout.promote(settings, number))
    steps.finish_round(settings, number, {})
    return times


def _fanout(settings: Settings, runner: str) -> float:
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from flows import rounds

    s = settings.model_copy(update={"evolve": settings.evolve.model_copy(update={"runner": runner})})
    rounds.generate_queries_flow(s, 1)
    t0 = time.perf_counter()
    rounds.rollout_round_flow.with_options(task_runner=rounds.task_runner(s))(s, 1)
    rounds.curate_round_flow.with_options(task_runner=rounds.task_runner(s))(s, 1)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries-per-app", type=int, default=None)
    args = parser.parse_args()
    extra = {"queries_per_app": args.queries_per_app} if args.queries_per_app else {}
    with tempfile.TemporaryDirectory() as tmp:
        settings = _settings(Path(tmp) / "stages", **extra)
        print(f"# one round, default evolve config ({settings.evolve.queries_per_app} queries/app, "
              f"{settings.evolve.rollouts} rollouts)")  # fmt: skip
        for number in (1, 2):
            times = _round(settings, number)
            total = sum(times.values())
            split = "  ".join(f"{k} {v:.1f}s ({v / total:.0%})" for k, v in times.items())
            print(f"round {number}: {total:.1f}s  {split}")
        print("# rollout + curation fan-out (round 1 of a fresh home), 2 shards")
        wall = {r: _fanout(_settings(Path(tmp) / r, **extra), r) for r in ("thread", "dask")}
        print(f"thread runner {wall['thread']:.1f}s; dask 2 workers {wall['dask']:.1f}s; "
              f"dask/thread = {wall['dask'] / wall['thread']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
