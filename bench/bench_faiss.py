"""faiss search for trajectory dedup: 100k embeddings, exact `IndexFlatIP` vs `IndexIVFFlat`.

Embeddings are clustered (near-duplicates around 2,000 centres) and L2-normalised, at the
ResNet-50 width (2048). Each index is built once and asked for the nearest neighbour
of `--queries` held-out vectors; for IVF, the share of queries whose neighbour is as
similar (within 0.01) as the exact nearest one, which is what a dedup decision needs.

Usage: python -m bench.bench_faiss [--n 100000 --dim 2048 --queries 2000]
"""

from __future__ import annotations

import argparse
import math

import faiss
import numpy as np

from bench.common import table, timed
from curation.dedup import make_index

# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--n 2000 --dim 64 --queries 50"


def data(n: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(2000, dim)).astype(np.float32)
    x = centres[rng.integers(0, 2000, n)] + 0.3 * rng.normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--queries", type=int, default=2000)
    args = parser.parse_args()
    base, queries = data(args.n, args.dim), data(args.queries, args.dim, seed=1)
    rows = []
    flat, build_s = timed(lambda: make_index(args.dim, base, args.n + 1))
    ivf, ivf_build_s = timed(lambda: make_index(args.dim, base, 1))
    assert isinstance(ivf, faiss.IndexIVFFlat)
    for index in (flat, ivf):
        index.add(base)
    (exact_sims, _), flat_s = timed(lambda: flat.search(queries, 1))
    rows.append(["flat (IndexFlatIP)", "exact", f"{build_s:.1f}", f"{flat_s:.2f}", "1.0x", "1.000"])
    for nprobe in (4, 16, 64):
        ivf.nprobe = nprobe
        (sims, _), search_s = timed(lambda: ivf.search(queries, 1))
        # as good as exact for dedup: the neighbour found is (nearly) as similar as the true nearest
        recall = float(np.mean(sims[:, 0] >= exact_sims[:, 0] - 0.01))
        rows.append(
            [
                "IVF (IndexIVFFlat)",
                f"nlist {ivf.nlist}, nprobe {nprobe}",
                f"{ivf_build_s:.1f}",
                f"{search_s:.2f}",
                f"{flat_s / search_s:.1f}x",
                f"{recall:.3f}",
            ]
        )
    print(
        table(
            f"nearest-neighbour search, {args.n:,} x {args.dim} embeddings, {args.queries:,} queries, "
            f"{faiss.omp_get_max_threads()} threads (IVF nlist = sqrt(n) = {int(math.sqrt(args.n))})",
            ["index", "parameters", "build s", "search s", "vs flat", "neighbour within 0.01 of exact"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
