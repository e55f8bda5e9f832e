"""One full round of the default config, stage by stage, and its fan-out on Dask vs threads.

Part 1 times round 1 and round 2 of the default evolve config stage by stage, each run in this
process as the Prefect task runs it (`evolve.stages.run_stage`), so the split is the stages' own
cost; it prints each stage's share of the round. Part 2 runs round 1 as its Prefect flow on the
thread runner and on a local Dask cluster of 2 worker processes (the rollout and the screenshot
features fan out), and prints both wall times and the ratio.

    python -m bench.bench_round [--queries-per-app N --rollouts N --max-steps N --heldout-per-app N]
                                [--runners thread,dask]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from evolve.spine import open_spine
from evolve.stages import ROUND, run_stage
from trajforge.settings import Settings, load_settings

# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--queries-per-app 1 --rollouts 1 --max-steps 4 --heldout-per-app 0 --runners thread"


def _settings(home: Path, **evolve: Any) -> Settings:
    os.environ["TRAJFORGE_HOME"] = str(home)
    settings = load_settings(None)
    return settings.model_copy(update={"evolve": settings.evolve.model_copy(update=evolve)})


def _round(settings: Settings, number: int) -> dict[str, float]:
    """Each stage's seconds in round `number`, run in this process by the one runner
    (`evolve.stages.run_stage`)."""
    times: dict[str, float] = {}
    spine = open_spine(settings)
    given: dict[str, Any] = {}
    for stage in ROUND:
        t0 = time.perf_counter()
        given[stage.name] = run_stage(spine, stage, number, given, again=True)
        times[stage.name] = time.perf_counter() - t0
    return times


def _fanout(settings: Settings, runner: str) -> float:
    """Round 1 as its Prefect flow on `runner`: the rollout and screenshot features fan out."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from flows import rounds

    s = settings.model_copy(update={"evolve": settings.evolve.model_copy(update={"runner": runner})})
    t0 = time.perf_counter()
    rounds.round_flow(s)(s, 1)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("queries-per-app", "rollouts", "max-steps", "heldout-per-app"):
        parser.add_argument(
            f"--{name}", type=int, default=None, help="evolve.* (default: the default config's)"
        )
    parser.add_argument("--runners", default="thread,dask", help="part 2's task runners (thread first)")
    args = parser.parse_args()
    sizes = ("queries_per_app", "rollouts", "max_steps", "heldout_per_app")
    extra = {k: getattr(args, k) for k in sizes if getattr(args, k) is not None}
    with tempfile.TemporaryDirectory() as tmp:
        settings = _settings(Path(tmp) / "stages", **extra)
        print(f"# one round, default evolve config ({settings.evolve.queries_per_app} queries/app, "
              f"{settings.evolve.rollouts} rollouts)")  # fmt: skip
        for number in (1, 2):
            times = _round(settings, number)
            total = sum(times.values())
            split = "  ".join(f"{k} {v:.1f}s ({v / total:.0%})" for k, v in times.items())
            print(f"round {number}: {total:.1f}s  {split}")
        print("# round 1 as its flow (a fresh home), rollout and features fanned out on 2 shards")
        wall = {r: _fanout(_settings(Path(tmp) / r, **extra), r) for r in args.runners.split(",")}
        print("; ".join(f"{r} runner {s:.1f}s ({s / wall['thread']:.2f}x thread)" for r, s in wall.items()))


if __name__ == "__main__":
    main()
