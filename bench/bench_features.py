"""Screenshot featurisation: ResNet-50 throughput at batch 1 vs 32, and inference the hash cache avoids.

ResNet-50 (transformers `ResNetModel`, randomly initialised: the speed does not depend on
the weights) embeds simulator frames at 224x224 on the CPU threads torch is given (2 on
these machines). Then the main job's round (2 queries per app, 4 rollouts each) is
curated twice in a row with the weights-free `phash` featuriser, counting the
screenshot references a round asks for, the distinct hashes among them, and the
embeddings actually computed: home and list screens repeat within a round, and a later
round reuses the cache.

Usage: python -m bench.bench_features [--frames 64 --queries-per-app 2 --rollouts 4]
"""

from __future__ import annotations

import argparse
import tempfile
from functools import partial
from pathlib import Path

import torch
from transformers import ResNetConfig

from bench.bench_dedup_quality import play
from bench.common import table, timed
from evolve.smoke import run_smoke_round
from querygen.pipeline import generate_queries
from trajforge.appspec import builtin_app_names, load_app
from trajforge.features import ResNetFeaturizer
from trajforge.settings import load_settings

# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--frames 4 --queries-per-app 1 --rollouts 1"


def frames(n: int) -> list[bytes]:
    apps = [load_app(name) for name in builtin_app_names()]
    out: list[bytes] = []
    for spec in apps:
        for q in generate_queries(spec, 8, seed=5).kept:
            out += play(q, apps)
    return list(dict.fromkeys(out))[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--queries-per-app", type=int, default=2, help="the main job's round")
    parser.add_argument("--rollouts", type=int, default=4, help="per query")
    args = parser.parse_args()
    pngs = frames(args.frames)
    rows = []
    base = None
    for batch in (1, 32):
        model = ResNetFeaturizer.random(ResNetConfig(), batch_size=batch)
        model.embed(pngs[:2])  # warm up
        _, seconds = timed(partial(model.embed, pngs))
        rate = len(pngs) / seconds
        base = base or rate
        rows.append([str(batch), str(len(pngs)), f"{seconds:.2f}", f"{rate:.1f}", f"{rate / base:.2f}x"])
    print(
        table(
            f"ResNet-50 featurisation at 224 px, {torch.get_num_threads()} torch threads",
            ["batch", "screens", "seconds", "screens/s", "vs batch 1"],
            rows,
        )
    )

    with tempfile.TemporaryDirectory() as home:
        import os

        os.environ["TRAJFORGE_HOME"] = str(Path(home))
        settings = load_settings()
        rows = []
        for number in (1, 2):
            round_size = {"queries_per_app": args.queries_per_app, "rollouts": args.rollouts}
            report = run_smoke_round(settings, **round_size).curation.cache
            rows.append(
                [
                    f"round {number}",
                    str(report.requested),
                    str(report.unique),
                    str(report.cached),
                    str(report.computed),
                    f"{report.avoided:.0%}",
                ]
            )
    print(
        table(
            "feature cache on the main job's rounds (phash): inference avoided",
            ["round", "screenshot refs", "distinct", "from cache", "computed", "avoided"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
