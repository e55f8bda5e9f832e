"""Run every benchmark: `python -m bench` (or `make bench`). Figures only; nothing asserted."""

from __future__ import annotations

import sys

from bench import (
    bench_annotation,
    bench_critics,
    bench_dedup_quality,
    bench_dedup_rollouts,
    bench_desktop,
    bench_faiss,
    bench_farm,
    bench_features,
    bench_gateway,
    bench_loop,
    bench_miniwob,
    bench_objectstore,
    bench_querygen,
    bench_replay,
    bench_rollout,
    bench_round,
    bench_sim,
    bench_steps,
    bench_trainer_recipes,
    critic_ceiling,
    critic_throughput,
    trust_fewshot,
)


def main() -> None:
    for module in (
        bench_steps,
        bench_objectstore,
        bench_gateway,
        bench_sim,
        bench_querygen,
        bench_rollout,
        bench_farm,
        bench_miniwob,
        bench_desktop,
        bench_round,
        critic_throughput,
        bench_critics,
        critic_ceiling,
        trust_fewshot,
        bench_features,
        bench_dedup_quality,
        bench_dedup_rollouts,
        bench_faiss,
        bench_annotation,
        bench_trainer_recipes,
        bench_loop,
        bench_replay,
    ):
        sys.argv = [module.__name__]
        module.main()


if __name__ == "__main__":
    main()
