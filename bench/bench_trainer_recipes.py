"""Each trainer's own image pipeline on our exports: do the taps land where they should?

`python -m bench.bench_trainer_recipes [--home DIR --dataset trajforge --version V]` exports a
dataset version for LLaMA-Factory (sft-sharegpt), ms-swift (sft-messages) and verl (rl-verl) in
every action format, hands each screenshot to that trainer's own image loading in its own
virtualenv (`.ci/run` builds them under ~/.cache/trajforge, or TRAJFORGE_TEST_TRAINERS), then to
Qwen2.5-VL's processor, and reads every tap on the image as fed against its target's box.
Without `--home` it publishes a one-round smoke dataset in a temporary home first.

Baseline, in the same run: the same export with `--trainer none` (the images at their own size,
as exports were written before trainer presets).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from storage.db import engine_from_settings, session_factory, upgrade
from storage.objectstore import open_object_store
from tests.support.trainer_recipes import TRAINERS
from tests.support.trainers import TapCheck, tap_check, trainer_python
from trajforge.logs import counts
from trajforge.settings import load_settings

FORMATS = ["qwen", "mobiler1", "uitars15", "uitars", "agentcpm", "canonical", "androidworld"]


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--home {home} --version 1 --formats qwen --trainers llamafactory"


def _smoke_home(home: Path) -> tuple[str, int]:
    from evolve.smoke import run_smoke_round
    from publish.versions import PublishConfig, publish

    os.environ["TRAJFORGE_HOME"] = str(home)
    os.environ.pop("TRAJFORGE_DB_URL", None)
    settings = load_settings()
    engine = engine_from_settings(settings)
    upgrade(engine)
    run_smoke_round(settings, queries_per_app=1, rollouts=2)
    published = publish(session_factory(engine), open_object_store(settings), "gui", PublishConfig())
    return "gui", published.version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="a trajforge home with a published version")
    parser.add_argument("--dataset", default="trajforge")
    parser.add_argument("--version", type=int, help="default: the newest")
    parser.add_argument("--formats", default=",".join(FORMATS), help="action formats, comma-separated")
    parser.add_argument("--trainers", default=",".join(TRAINERS), help="trainers, comma-separated")
    args = parser.parse_args()
    formats = args.formats.split(",")
    work = Path(tempfile.mkdtemp(prefix="bench-trainers-"))
    if args.home is None:
        dataset, version = _smoke_home(work / "home")
    else:
        os.environ["TRAJFORGE_HOME"] = str(args.home)
        dataset, version = args.dataset, args.version
    settings = load_settings()
    sessions = session_factory(engine_from_settings(settings))
    store = open_object_store(settings)
    if version is None:
        from storage.datasets import list_versions

        version = max(v.version for v in list_versions(sessions, dataset))
    print(f"{dataset} v{version}: taps on the image each trainer feeds, in the target's box")
    print(
        "| trainer | format | action rows written | skipped | coordinates assume | in box "
        "| baseline (--trainer none) |"
    )
    print("|---|---|---|---|---|---|---|")
    for trainer in args.trainers.split(","):
        if not trainer_python(trainer).is_file():
            print(f"| {trainer} | not installed ({trainer_python(trainer)}): run .ci/run once | | | | | |")
            continue
        ours = tap_check(sessions, store, dataset, version, trainer, formats, work / trainer / "preset")
        base = tap_check(sessions, store, dataset, version, trainer, formats, work / trainer / "none", "none")
        for fmt in formats:
            new, old = ours[fmt], base[fmt]
            written = sum(new.report.rows.values())
            skipped = {k: v for k, v in new.report.skipped.items() if k != "no_action_ground_truth"}
            print(
                f"| {trainer} | {fmt} | {written} | {counts(skipped) or 'none'} | "
                f"{counts(new.report.coordinate_sizes)} | {_share(new)} | {_share(old)} |"
            )


def _share(check: TapCheck) -> str:
    return f"{check.inside}/{check.taps} ({check.inside / max(check.taps, 1):.1%})"


if __name__ == "__main__":
    main()
