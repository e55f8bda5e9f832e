"""Trust that grows with each label, per task (issue 78 items 2 and 3), replayed on a home's episodes.

For each task T (an app or suite task) of the home, the verifier's verdicts of T are hidden but for
k of its episodes (k = 0, 2, 4, 8, 16): the other tasks' anchors and T's k labels are all the
critic knows. The consensus is recomputed from the channels' stored votes with only those anchors
(`critics.consensus.Evidence`: each channel weighed by what it measured on them), and the
precision-first rule (`critics.precision`) decides what it can of T's other episodes at
`--target` (0.98). Printed per k, pooled over the tasks of each half of the reporting split
(`bench.halves`: figures on the tuning half are in-sample), with Wilson 95% intervals: precision
(right among "success" verdicts), NPV (right among "failure" verdicts), accuracy and coverage (the
share of T's other episodes decided); and the same per task at k = 8.

Which k episodes are labelled: `random` (the mean of `--trials` draws) against `chosen`, the rule
`annotate push` orders its queue by (`annotation.queue.teaching_order`): the most confident
verdicts first, alternating the two verdicts, since a label at confidence c counts for every
decision at c or below, and the first labels of a task show whether it is read the wrong way.
Then the labels each choice needs before the critic decides 70% of a task's other episodes at
95% precision.
Usage: python -m bench.trust_curve HOME... [--target 0.98 --trials 5]
"""

from __future__ import annotations

import argparse
import random
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import func, select

from annotation.queue import teaching_order
from bench.bench_critics import _copy, _judge_all
from bench.common import rate_shown
from bench.halves import app_half
from critics.consensus import Anchored, Evidence, gather_evidence
from critics.precision import Precision, verdict_of, verdicts_of
from storage.models import Round
from trajforge.metrics import ChannelStats
from trajforge.settings import CriticSettings

KS = (0, 2, 4, 8, 16)
Choice = Callable[[list[Anchored], list[tuple[int, float, bool]], int, int], list[Anchored]]


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "{run} --trials 1"


def replay(
    anchored: list[Anchored], task: str, labelled: list[Anchored], target: float, minimum: int
) -> ChannelStats:
    """What the rule decides of the task's other episodes, knowing the other tasks and `labelled`."""
    known = [a for a in anchored if a.app != task] + labelled
    ev = Evidence(minimum)
    for a in known:
        ev.add(a)
    precision, st = Precision(verdicts_of(known, minimum)), ChannelStats()
    chosen = {a.episode_id for a in labelled}
    for a in anchored:
        if a.app != task or a.episode_id in chosen:
            continue
        said = verdict_of(ev, a, None)
        if said is not None and precision.estimate(task, said[1]).precision >= target:
            st.add(said[0], a.actual)
    return st


def _random(
    pool: list[Anchored], _ranked: list[tuple[int, float, bool]], k: int, trial: int
) -> list[Anchored]:
    return random.Random(f"{pool[0].app if pool else ''}:{k}:{trial}").sample(pool, min(k, len(pool)))


def _chosen(
    pool: list[Anchored], ranked: list[tuple[int, float, bool]], k: int, _trial: int
) -> list[Anchored]:
    by_id = {a.episode_id: a for a in pool}
    return [by_id[e] for e in teaching_order(ranked)[:k]]


def _ranked(anchored: list[Anchored], task: str, minimum: int) -> list[tuple[int, float, bool]]:
    """The task's episodes as the critic sees them with none of its labels: (id, confidence, verdict)."""
    ev = Evidence(minimum)
    for a in anchored:
        if a.app != task:
            ev.add(a)
    out = []
    for a in anchored:
        if a.app == task and (said := verdict_of(ev, a, None)) is not None:
            out.append((a.episode_id, said[1], said[0]))
    return out


def curve(anchored: list[Anchored], target: float, trials: int, minimum: int) -> list[str]:
    tasks = sorted({a.app for a in anchored})
    lines = []
    needed: dict[str, dict[str, int | None]] = defaultdict(dict)
    per_task_k8: dict[tuple[str, str], ChannelStats] = {}
    for name, choose, runs in (("random", _random, trials), ("chosen", _chosen, 1)):
        lines.append(f"-- labels chosen {name} ({runs} run(s) per task and k)")
        lines.append(f"{'half':9} {'k':>3} {'precision':>26} {'npv':>26} {'accuracy':>26} {'coverage':>26}")
        for k in KS:
            pooled: dict[str, ChannelStats] = defaultdict(ChannelStats)
            covered: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            for task in tasks:
                pool = [a for a in anchored if a.app == task]
                ranked = _ranked(anchored, task, minimum)
                for trial in range(runs):
                    st = replay(anchored, task, choose(pool, ranked, k, trial), target, minimum)
                    half = app_half(task)
                    for key in (half, "all"):
                        for cell in ("tp", "fp", "tn", "fn"):
                            setattr(pooled[key], cell, getattr(pooled[key], cell) + getattr(st, cell))
                        covered[key][0] += st.n
                        covered[key][1] += max(0, len(pool) - min(k, len(pool)))
                    if k == 8 and trial == 0:
                        per_task_k8[(name, task)] = st
            for key in sorted(pooled):
                st = pooled[key]
                lines.append(
                    f"{key:9} {k:>3} {rate_shown(st.tp, st.tp + st.fp):>26} "
                    f"{rate_shown(st.tn, st.tn + st.fn):>26} "
                    f"{rate_shown(st.tp + st.tn, st.n):>26} {rate_shown(*covered[key]):>26}"
                )
        for task in tasks:
            needed[name][task] = _labels_for(anchored, task, choose, minimum)
    lines.append("-- per task at k = 8 (first run): decided of the other episodes, precision, accuracy")
    for (name, task), st in sorted(per_task_k8.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        other = sum(a.app == task for a in anchored) - 8
        lines.append(
            f"{task[:34]:34} {app_half(task):9} {name:6} decided {st.n:>3} of {max(other, 0):>3}  "
            f"precision {rate_shown(st.tp, st.tp + st.fp)}  accuracy {rate_shown(st.tp + st.tn, st.n)}"
        )
    lines.append(
        "-- labels before 70% of a task's other episodes are decided at >= 95% precision (None: not in 16)"
    )
    for task in tasks:
        spent = f"random {needed['random'][task]}  chosen {needed['chosen'][task]}"
        lines.append(f"{task[:34]:34} {app_half(task):9} {spent}")
    return lines


def _labels_for(anchored: list[Anchored], task: str, choose: Choice, minimum: int) -> int | None:
    pool = [a for a in anchored if a.app == task]
    ranked = _ranked(anchored, task, minimum)
    for k in range(0, min(16, len(pool)) + 1):
        st = replay(anchored, task, choose(pool, ranked, k, 0), 0.95, minimum)
        others = len(pool) - k
        if others and st.n >= 0.7 * others and st.tp + st.fp and st.tp / (st.tp + st.fp) >= 0.95:
            return k
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("homes", nargs="+", type=Path)
    parser.add_argument("--target", type=float, default=0.98)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--minimum", type=int, help="critics.calibration_min_anchored to replay with")
    args = parser.parse_args()
    settings = CriticSettings()
    for home in args.homes:
        with tempfile.TemporaryDirectory() as tmp:
            sessions = _copy(home, tmp)
            _judge_all(sessions, home)
            with sessions() as s:
                last = s.scalar(select(func.max(Round.id))) or 0
                evidence, _ = gather_evidence(s, last, settings)
        print(f"== {home}: {len(evidence.anchored)} anchored episodes, target precision {args.target:.0%}")
        minimum = args.minimum or settings.calibration_min_anchored
        print("\n".join(curve(evidence.anchored, args.target, args.trials, minimum)))


if __name__ == "__main__":
    main()
