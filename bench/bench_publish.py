"""Publishing a 1M-sample dataset version on SQLite and PostgreSQL, the cost of the next
version when 5% changed, and export throughput per format.

Synthetic step samples (realistic payloads, 10 categories, 20 rounds of 50k) are
bulk-inserted, then `publish` runs in a child process under `/usr/bin/time -v` for its
wall time and peak memory. 5% of the samples (one round's) are then rewritten, as a
re-curated round would be, and the next version is published: the baseline is the
first version, and the figure that matters is how many shards it re-uses. Exports run
on a smaller version (`--export-rows`, `--images` distinct screenshots) into a temporary
directory. The rl-verl export embeds each row's screenshot, resized for verl where verl's own
processor would not resize it the same way: it is timed with the encoded-image cache (each
distinct image resized and encoded once), without it (the baseline: once per row), and with
`--trainer none` (no resize at all); sft-sharegpt (LLaMA-Factory, whose own downscale the
coordinates are computed for, so its screenshots are written as stored) with and without its
trainer too.

Usage: python -m bench.bench_publish [--rows 1000000 --export-rows 20000 --images 64]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from PIL import Image, ImageDraw
from sqlalchemy import update

from bench.common import scratch_postgres, table, timed
from publish import export_writer
from publish.export_writer import CACHE_BYTES
from publish.exports import FORMATS, export
from publish.versions import SEALED_AFTER, PublishConfig, publish
from rollout.sim.render import FrameRenderer
from storage.db import create_db_engine, insert_ignore, session_factory, transaction, upgrade
from storage.models import Policy, Round, Sample
from storage.objectstore import LocalObjectStore, put_blob
from storage.rounds import REPORTS
from trajforge.appspec import builtin_app_names, load_app
from trajforge.world.device import SimDevice

CATEGORIES = (
    "action_prediction",
    "reasoning",
    "state_summary",
    "progress_tracking",
    "effect_prediction",
    "self_reflection",
    "state_verification",
    "intent_execution",
    "error_escape",
    "back_on_track",
)
PER_ROUND = 50_000


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--rows 200 --export-rows 50 --images 4"


def _screenshots(store: LocalObjectStore, n: int) -> list[str]:
    """`n` distinct screenshots (the home screen, numbered) in the store."""
    device = SimDevice([load_app(name) for name in builtin_app_names()])
    device.reset()
    png, _ = FrameRenderer().frame(device)
    base = Image.open(io.BytesIO(png)).convert("RGB")
    shas = []
    for i in range(n):
        img = base.copy()
        ImageDraw.Draw(img).text((40, 40), f"screen {i}", fill=(0, 0, 0))
        buf = io.BytesIO()
        img.save(buf, format="PNG", compress_level=1)
        shas.append(put_blob(store, buf.getvalue())[0])
    return shas


def seed(url: str, store_root: Path, rows: int, images: int = 1) -> None:
    engine = create_db_engine(url)
    upgrade(engine)
    sessions = session_factory(engine)
    shas = _screenshots(LocalObjectStore(store_root), images)
    with transaction(sessions) as s:
        policy = Policy(name="synthetic", version=0)
        s.add(policy)
        s.flush()
        # publish checks the rounds have been through judge, calibrate and curate
        ready = {REPORTS: {name: {"synthetic": True} for name in SEALED_AFTER}}
        rounds = [
            Round(number=n + 1, policy_id=policy.id, stats=ready) for n in range(max(1, rows // PER_ROUND))
        ]
        s.add_all(rounds)
        s.flush()
        round_ids = [r.id for r in rounds]
    batch = []
    for i in range(rows):
        category = CATEGORIES[i % len(CATEGORIES)]
        action = {"kind": "click", "point": [i % 1000, (7 * i) % 1000]}
        batch.append(
            {
                "uid": f"{i:064x}",
                "round_id": round_ids[min(i // PER_ROUND, len(round_ids) - 1)],
                "step_index": i % 12,
                "category": category,
                "payload": {
                    "images": [shas[(i // 10) % len(shas)]],
                    "prompt": f"Task: order item {i % 977} from shop {i % 31}\nHistory: Tap 'Home'",
                    "response": json.dumps(action),
                    "action": action,
                    "screen": [1080, 2400],
                    "bbox": None,
                },
                "provenance": {"episode": f"ep-{i // 10}", "query": f"q-{i // 40}", "steps": [i % 12]},
                "status": "kept",
            }
        )
        if len(batch) == 20_000:
            with transaction(sessions) as s:
                insert_ignore(s, Sample, batch, ["uid"])
            batch = []
    if batch:
        with transaction(sessions) as s:
            insert_ignore(s, Sample, batch, ["uid"])


def change_last_round(url: str) -> int:
    sessions = session_factory(create_db_engine(url))
    with transaction(sessions) as s:
        last = s.query(Round.id).order_by(Round.number.desc()).limit(1).scalar()
        return s.execute(update(Sample).where(Sample.round_id == last).values(weight=2.0)).rowcount  # type: ignore[attr-defined]


def publish_child(url: str, store_root: str) -> None:
    sessions = session_factory(create_db_engine(url))
    report = publish(sessions, LocalObjectStore(Path(store_root)), "bench", PublishConfig())
    print(json.dumps({"shards": report.shards, "reused": report.shards_reused, "rows": report.rows}))


def timed_publish(url: str, store_root: Path) -> dict[str, float]:
    start = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-m", "bench.bench_publish", "--child", url, str(store_root)],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = time.perf_counter() - start
    peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)[1])  # type: ignore[index]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**out, "seconds": seconds, "peak_mb": peak / 1024}


def _publishes(n: int) -> None:
    """v1 and then v2 after one round changed, on SQLite and (where one can start) Postgres."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp, scratch_postgres() as pg:
        dbs = {"sqlite": f"sqlite:///{tmp}/bench.db"}
        if pg is not None:
            dbs["postgres"] = pg
        for name, url in dbs.items():
            store_root = Path(tmp) / f"objects-{name}"
            _, seed_s = timed(partial(seed, url, store_root, n))
            first = timed_publish(url, store_root)
            changed = change_last_round(url)
            second = timed_publish(url, store_root)
            for label, r in (("v1", first), (f"v2 ({changed / n:.0%} changed)", second)):
                rows.append(
                    [
                        name,
                        label,
                        f"{int(r['rows']):,}",
                        f"{r['seconds']:.1f}",
                        f"{r['rows'] / r['seconds']:,.0f}",
                        f"{r['peak_mb']:.0f}",
                        f"{int(r['reused'])}/{int(r['shards'])} ({r['reused'] / r['shards']:.0%})",
                    ]
                )
            print(f"({name}: seeding {n:,} samples took {seed_s:.0f} s)", file=sys.stderr)
    print(
        table(
            f"publishing {n:,} step samples (child process under /usr/bin/time -v)",
            ["database", "version", "rows", "seconds", "rows/s", "peak RSS MB", "shards reused"],
            rows,
        )
    )


def _exports(n: int, images: int) -> None:
    """Every export format on one published version of `n` samples over `images` screenshots, then
    rl-verl without the encoded-image cache (the baseline) and with `--trainer none`."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/export.db"
        store = LocalObjectStore(Path(tmp) / "objects")
        seed(url, Path(tmp) / "objects", n, images)
        sessions = session_factory(create_db_engine(url))
        publish(sessions, store, "bench", PublishConfig())
        runs = [(fmt, fmt) for fmt in FORMATS]
        runs += [("rl-verl", "rl-verl, no image cache (baseline)"), ("rl-verl", "rl-verl --trainer none")]
        runs += [("sft-sharegpt", "sft-sharegpt --trainer none")]
        out_rows, seconds_of = [], {}
        for fmt, label in runs:
            export_writer.CACHE_BYTES = 0 if "baseline" in label else CACHE_BYTES
            trainer = "none" if "none" in label else "auto"
            report, seconds = timed(
                partial(
                    export,
                    sessions,
                    store,
                    "bench",
                    1,
                    fmt,
                    os.path.join(tmp, label),
                    "canonical" if fmt == "browsergym" else "qwen",  # BrowserGym's own strings
                    trainer=trainer,
                )
            )
            seconds_of[label] = seconds
            done = sum(report.rows.values())
            out_rows.append(
                [label, f"{done:,}", f"{report.images:,}", f"{seconds:.2f}", f"{done / seconds:,.0f}"]
            )
        export_writer.CACHE_BYTES = CACHE_BYTES
    title = f"export throughput ({n:,} samples, {images} screenshots, qwen actions)"
    print(table(title, ["format", "rows", "images", "s", "rows/s"], out_rows))
    baseline = seconds_of["rl-verl, no image cache (baseline)"]
    print(f"rl-verl: {baseline / seconds_of['rl-verl']:.1f}x faster with each image encoded once")
    for fmt in ("rl-verl", "sft-sharegpt"):  # the target: at most 2x the export that resizes nothing
        ratio = seconds_of[fmt] / seconds_of[f"{fmt} --trainer none"]
        print(f"{fmt} for its trainer: {ratio:.1f}x the time of --trainer none (target at most 2x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--export-rows", type=int, default=20_000)
    parser.add_argument("--images", type=int, default=64, help="Distinct screenshots of the export version.")
    parser.add_argument("--skip-publish", action="store_true", help="Only the export figures.")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        publish_child(*args.child)
        return
    if not args.skip_publish:
        _publishes(args.rows)
    _exports(args.export_rows, args.images)


if __name__ == "__main__":
    main()
