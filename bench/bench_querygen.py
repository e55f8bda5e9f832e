"""Offline query generation: queries/s for 10k requested per app, and what validation kept.

Usage: python -m bench.bench_querygen [--n 10000]
"""

from __future__ import annotations

import argparse
from functools import partial

from bench.common import table, timed
from querygen.pipeline import generate_queries
from trajforge.appspec import builtin_app_names, load_app

DEDUP = ("duplicate_exact", "duplicate_near")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    args = parser.parse_args()
    rows, total_kept, total_seconds = [], 0, 0.0
    for name in builtin_app_names():
        report, seconds = timed(partial(generate_queries, load_app(name), args.n, seed=0))
        reasons = report.reasons()
        duplicates = sum(reasons[r] for r in DEDUP)
        # validation replays every candidate that is not a duplicate
        replayed = len(report.kept) + sum(n for r, n in reasons.items() if r not in DEDUP)
        candidates = len(report.kept) + len(report.dropped)
        rows.append(
            [
                name,
                f"{len(report.kept):,}",
                f"{candidates:,}",
                f"{duplicates:,}",
                f"{replayed:,}",
                f"{len(report.kept) / max(replayed, 1):.1%}",
                f"{seconds:.1f}",
                f"{len(report.kept) / seconds:,.0f}",
                "yes" if report.exhausted else "no",
            ]
        )
        total_kept += len(report.kept)
        total_seconds += seconds
    header = [
        "app",
        "kept",
        "candidates",
        "duplicates",
        "replayed",
        "pass validation",
        "seconds",
        "kept/s",
        "task space exhausted",
    ]
    print(table(f"offline query generation, {args.n:,} requested per app", header, rows))
    rate = total_kept / total_seconds
    print(f"overall: {total_kept:,} queries in {total_seconds:.1f}s = {rate:,.0f} queries/s\n")


if __name__ == "__main__":
    main()
