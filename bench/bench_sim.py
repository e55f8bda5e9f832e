"""Simulated emulator throughput at 1080x2400 on one core, with and without the frame cache.

Episodes are ground-truth replays of generated queries (the oracle's actions), each
step rendered to PNG as a rollout would. Usage: python -m bench.bench_sim [--steps N]
"""

from __future__ import annotations

import argparse

from bench.common import table, timed
from querygen.pipeline import generate_queries
from rollout.sim.env import SimEnv
from rollout.sim.render import FrameRenderer
from trajforge.appspec import builtin_app_names, load_app
from trajforge.domain import Query
from trajforge.world.model import Move
from trajforge.world.oracle import actions_for

# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--steps 20"


def episodes(per_app: int) -> list[Query]:
    out: list[Query] = []
    for name in builtin_app_names():
        out.extend(generate_queries(load_app(name), per_app, seed=0).kept)
    return out


def run(queries: list[Query], steps: int, cache_size: int) -> tuple[int, float, FrameRenderer]:
    apps = [load_app(n) for n in builtin_app_names()]
    renderer = FrameRenderer(cache_size=cache_size)
    env = SimEnv(apps, renderer=renderer)

    def go() -> int:
        done = 0
        while done < steps:
            for query in queries:
                env.reset(query)
                done += 1
                for action in actions_for(env.device, query.app, [Move.from_json(m) for m in query.path]):
                    env.step(action)
                    done += 1
                if done >= steps:
                    break
        return done

    done, seconds = timed(go)
    return done, seconds, renderer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    queries = episodes(100)
    rows = []
    results = {}
    for label, size in (("no frame cache", 0), ("frame cache (512)", 512)):
        done, seconds, renderer = run(queries, args.steps, size)
        results[label] = done / seconds
        hit = renderer.hits / max(1, renderer.hits + renderer.misses)
        rows.append(
            [label, f"{done:,}", f"{done / seconds:,.1f}", f"{1000 * seconds / done:.1f}", f"{hit:.0%}"]
        )
    print(
        table(
            f"simulated emulator, 1080x2400, {len(queries)} replayed queries, one process",
            ["mode", "steps", "steps/s", "ms/step", "cache hits"],
            rows,
        )
    )
    ratio = results["frame cache (512)"] / results["no frame cache"]
    print(f"frame cache speed-up: {ratio:.1f}x\n")


if __name__ == "__main__":
    main()
