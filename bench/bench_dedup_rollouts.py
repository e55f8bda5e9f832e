"""Dedup on the engine's own rollouts: phash vs the trained screen encoder on the same trajectories.

The labelled set of `bench_dedup_quality` is built by the simulator; this one reads what a
run produced. For every round from 2 on (round 1 has no encoder), it dedups the round's
trajectories per query group and outcome, as curation does (priors left out), with phash
and with the store's latest trained encoder, each at its own threshold, and each with the
frames a dismissed dialog covered kept and left out (`curation.overlays`). It audits every
near-duplicate drop against the trajectory it was found to duplicate:

- same screens: both show exactly the same set of screenshots (a loop or a repeated tap);
- subset: one shows only screenshots the other shows too;
- other screens: each shows a screenshot the other never does. These are the drops most
  likely to be distinct trajectories.

Usage: python -m bench.bench_dedup_rollouts [--home DIR]. `--home` is a trajforge home after a
run (e.g. `./.trajforge` after `make run`); without one, or when it holds no trained encoder,
the bench first runs `trajforge evolve --rounds 4` in a temporary folder (about 10 minutes).
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from sqlalchemy import select

from bench.bench_loop import run
from bench.common import table
from curation.dedup import NEAR_DUPLICATE, Trajectory, dedup, embed_frames
from curation.overlays import GreyThumbs
from evolve.spine import open_spine
from storage.features import FeatureStore, make_featurizer
from storage.models import Episode, Round, Step
from trajforge.features import Featurizer, PHashFeaturizer
from trajforge.settings import Settings, load_settings

Rows = dict[int, list[tuple[str, str, bool, tuple[str, ...]]]]  # round -> (uid, query, success, frames)


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--home {home}"


def audit(
    rounds: Rows,
    vectors: dict[str, np.ndarray],
    thumbs: dict[str, np.ndarray] | None,
    threshold: float,
    collapse: float,
) -> Counter[str]:
    tally: Counter[str] = Counter()
    for rows in rounds.values():
        shots = {uid: frames for uid, _, _, frames in rows}
        trajs = [
            Trajectory(uid, group, frames, embed_frames(frames, vectors, thumbs, collapse), success)
            for uid, group, success, frames in rows
        ]
        decisions, report = dedup(trajs, threshold)
        tally["total"] += report.total
        tally["kept"] += report.kept
        for d in decisions:
            if d.kept or d.duplicate_of is None:
                continue
            tally[d.reason or ""] += 1
            if d.reason == NEAR_DUPLICATE:
                a, b = set(shots[d.uid]), set(shots[d.duplicate_of])
                tally["same screens" if a == b else "subset" if a <= b or b <= a else "other screens"] += 1
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--home", type=Path, default=None, help="a trajforge home after a run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dedup-") as scratch:
        home = args.home
        if home is None or not (home / "trajforge.db").is_file():
            print(f"running 4 evolve rounds in {scratch} first")
            run(Path(scratch), 4, {})
            home = Path(scratch) / ".trajforge"
        os.environ["TRAJFORGE_HOME"] = str(home.resolve())
        report(load_settings())


def report(settings: Settings) -> None:
    spine = open_spine(settings)
    rounds: Rows = defaultdict(list)
    with spine.sessions() as s:
        episodes = s.execute(
            select(Episode.id, Episode.uid, Episode.query_id, Episode.outcome, Round.number)
            .join(Round, Round.id == Episode.round_id)
            .where(Round.number >= 2)
        ).all()
        steps: dict[int, list[str]] = defaultdict(list)
        for eid, shot in s.execute(
            select(Step.episode_id, Step.screenshot).order_by(Step.episode_id, Step.index)
        ):
            steps[eid].append(shot)
    for eid, uid, query, outcome, number in episodes:
        if steps[eid]:
            rounds[number].append((uid, str(query), outcome == "success", tuple(steps[eid])))
    encoder = make_featurizer(settings.curate, spine.sessions, spine.store)
    if isinstance(encoder, PHashFeaturizer):
        raise SystemExit("no trained screen encoder in this store: run `make run` (round 2 trains one)")
    featurizers: list[Featurizer] = [PHashFeaturizer(), encoder]
    hashes = {f for rows in rounds.values() for *_, frames in rows for f in frames}
    greys = FeatureStore(spine.sessions, GreyThumbs(), spine.frames).vectors(hashes)
    rows = []
    for featurizer, thumbs in itertools.product(featurizers, (None, greys)):
        vectors = FeatureStore(spine.sessions, featurizer, spine.frames).vectors(hashes)
        t = audit(rounds, vectors, thumbs, featurizer.threshold, settings.curate.dedup_collapse)
        near = t[NEAR_DUPLICATE]
        rows.append(
            [
                f"{featurizer.key} at {featurizer.threshold}",
                "left out" if thumbs is not None else "kept",
                f"{t['kept']}/{t['total']} ({t['kept'] / max(t['total'], 1):.0%})",
                str(t["exact_duplicate"]),
                str(near),
                f"{t['same screens']} / {t['subset']} / {t['other screens']}",
            ]
        )
    print(
        table(
            f"dedup of rounds {min(rounds)}-{max(rounds)} at each featuriser's threshold: "
            f"{len(hashes)} screenshots",
            [
                "features",
                "dialog-covered frames",
                "kept",
                "exact dup",
                "near dup",
                "near: same screens / subset / other screens",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
