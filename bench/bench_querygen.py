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


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--n 50 --big-slot 20"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--big-slot", type=int, default=500, help="Values of the long list's slot.")
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
    big_slot(args.big_slot)


def big_slot(values: int) -> None:
    """A spec with one list of `values` rows: validation replays scroll through it, laid out once
    per state (the device's layout cache) against laid out at every hit test (the baseline)."""
    import trajforge.world.device as device
    from trajforge.appspec import parse_spec

    spec = parse_spec(
        {
            "name": "big",
            "title": "Big",
            "start": "home",
            "slots": {"item": [f"Item {i}" for i in range(values)]},
            "screens": {
                "home": {"title": "Home", "description": "the list", "widgets": [
                    {"id": "items", "kind": "list", "slot": "item", "goto": "confirm"}]},
                "confirm": {"title": "Confirm", "description": "check", "widgets": [
                    {"id": "ok", "kind": "button", "label": "OK", "goto": "done"}]},
                "done": {"title": "Done", "description": "picked", "terminal": True,
                         "intents": ["Pick {item}"], "widgets": []},
            },
        },
        "big.yaml",
    )  # fmt: skip
    rows = []
    original = device.SimDevice.__init__
    for cache in (0, 256):

        def init(self, *args, _cache=cache, **kwargs):
            original(self, *args, **kwargs)
            self.layout_cache = _cache

        device.SimDevice.__init__ = init  # type: ignore[method-assign]
        try:
            report, seconds = timed(partial(generate_queries, spec, 100, seed=1))
        finally:
            device.SimDevice.__init__ = original  # type: ignore[method-assign]
        rows.append([f"{cache}", f"{len(report.kept)}", f"{len(report.dropped)}", f"{seconds:.1f}"])
    rows[1].append(f"{float(rows[0][3]) / max(float(rows[1][3]), 0.01):.0f}x faster")
    rows[0].append("baseline")
    header = ["layout cache", "kept", "dropped", "seconds", "vs baseline"]
    print(table(f"one slot of {values} values, 100 queries requested", header, rows))


if __name__ == "__main__":
    main()
