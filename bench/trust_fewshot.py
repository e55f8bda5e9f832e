"""Trust earned from a few labels, where the learned critic itself adapts: how far can it go?

    python -m bench.trust_fewshot [--target 0.95 --npv 0.90]

`bench.trust_curve` replays a home's stored votes, and the learned critic's stored votes on a task
were fitted with that task's other queries' anchors: they are better than a new task's. Here each
of the shipped prior's 44 apps (`critics/prior.json.gz`: 40 MiniWoB++ tasks and the 4 built-in
apps, all of the tuning half, so every figure is in-sample to the design) is left out in turn and
judged as the home judges a task it has k labels of (k = 0, 2, 4, 8, 16):

- the shared model fitted on the other 43 apps (`critics.learned.fit`), with the app's own
  correction fitted on its k labels once k reaches `MIN_TRAIN` (as `fit_all` does);
- each verdict has a kind: success or failure, and sure (the critic's probability at least
  `SURE` on its side) or not;
- a candidate rule decides the kinds it can certify: per kind, an empirical-Bayes estimate of the
  task's precision, its prior the other 43 apps' records of that kind with no label of their own
  (each a Beta part, plus one uniform part for a task like none of them), updated by the task's
  own labelled verdicts of that kind (each judged without its own label). Success verdicts are
  decided where it clears `--target`, failure verdicts where it clears `--npv`;
- the k labels are the queue's teaching order (`annotation.queue.teaching_order`: most confident
  first, the two verdicts in turn), stratified (spread over the kinds in proportion to their
  sizes) or random (3 draws).

Printed per k: the share of the task's other episodes decided, accuracy, precision (success
verdicts) and NPV with Wilson 95% intervals, and the tasks meeting issue 78's bar (at least 70%
decided, precision at least 95% or no success verdict, accuracy at least 90%); then the hindsight
ceiling: per task, the most of its other episodes whose kinds, chosen knowing the truth, are at
least 95% right.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
from collections import defaultdict
from collections.abc import Iterable
from itertools import combinations

import numpy as np

from annotation.queue import teaching_order
from bench.common import rate_shown
from critics.learned import MIN_TRAIN, SUCCESS_AT, Checkpoint, _correction, fit
from critics.prior import prior_rows
from trajforge.metrics import ChannelStats

KS = (0, 2, 4, 8, 16)
SURE = 0.9
TRIALS = 3
Kind = tuple[bool, bool]  # (success verdict?, sure?)
Records = dict[str, dict[Kind, list[int]]]  # per app, per kind: [right, of]


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = ""


def kind(p: float) -> Kind:
    return p >= SUCCESS_AT, max(p, 1 - p) >= SURE


def tally(probs: Iterable[float], actual: Iterable[bool]) -> dict[Kind, list[int]]:
    """Right and of, per kind, of verdicts given at these probabilities."""
    out: dict[Kind, list[int]] = defaultdict(lambda: [0, 0])
    for p, truth in zip(probs, actual, strict=True):
        out[kind(float(p))][0] += (p >= SUCCESS_AT) == truth
        out[kind(float(p))][1] += 1
    return out


def posterior(parts: list[tuple[int, int]], right: int, n: int) -> float:
    """The posterior mean precision of a task right `right` of `n`: a mixture of one Beta part per
    other task (its right of n) and one uniform part, each weighed by how well it foresaw them."""
    logs, means = [], []
    for a, b in [(r + 1, m - r + 1) for r, m in parts if m] + [(1, 1)]:
        logs.append(_log_beta(a + right, b + n - right) - _log_beta(a, b))
        means.append((a + right) / (a + b + n))
    top = max(logs)
    odds = [math.exp(w - top) for w in logs]
    return sum(o * m for o, m in zip(odds, means, strict=True)) / sum(odds)


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


class App:
    """One left-out app: its rows and the shared model fitted without it."""

    def __init__(self, x: np.ndarray, y: np.ndarray, shared: Checkpoint) -> None:
        self.x, self.y, self.shared = x, y, shared
        self.unseen = shared.prob(x)

    def probs(self, labelled: list[int], judged: list[int]) -> np.ndarray:
        """The critic's probabilities on `judged`, the app's correction fitted on `labelled`."""
        p = self.shared.prob(self.x[judged])
        if len(labelled) < MIN_TRAIN:
            return p
        own = _correction(self.shared, self.x[labelled], self.y[labelled].astype(float))
        return np.asarray(1 / (1 + np.exp(-(np.log(p / (1 - p)) + own.logit(self.x[judged])))))

    def records(self, labelled: list[int]) -> dict[Kind, list[int]]:
        """Right and of, per kind, of the labelled episodes, each judged without its own label."""
        probs = [float(self.probs([j for j in labelled if j != i], [i])[0]) for i in labelled]
        return tally(probs, [bool(self.y[i]) for i in labelled])

    def teaching(self, k: int) -> list[int]:
        ranked = [(i, max(p, 1 - p), bool(p >= SUCCESS_AT)) for i, p in enumerate(self.unseen)]
        return teaching_order(ranked)[:k]

    def stratified(self, k: int) -> list[int]:
        """Labels spread over the kinds (as the critic judges the task unseen) in proportion to their
        sizes, each kind's episodes in a fixed arbitrary order."""
        kinds: dict[Kind, list[int]] = defaultdict(list)
        for i in sorted(range(len(self.y)), key=lambda i: hashlib.sha256(str(i).encode()).hexdigest()):
            kinds[kind(float(self.unseen[i]))].append(i)
        taken = dict.fromkeys(kinds, 0)
        out: list[int] = []
        while len(out) < min(k, len(self.y)):
            open_ = [c for c in kinds if taken[c] < len(kinds[c])]
            c = min(open_, key=lambda c: (taken[c] / len(kinds[c]), c))
            out.append(kinds[c][taken[c]])
            taken[c] += 1
        return out


def load() -> dict[str, App]:
    rows = prior_rows()
    x = np.array([r.x for r in rows])
    y = np.array([r.success for r in rows])
    names = np.array([r.app for r in rows])
    out = {}
    for app in sorted(set(names)):
        mine = names == app
        shared = fit(x[~mine], y[~mine])
        assert shared is not None  # 43 apps of both outcomes
        out[app] = App(x[mine], y[mine], shared)
    return out


def decide(
    apps: dict[str, App], name: str, labelled: list[int], bars: dict[bool, float], prior: Records
) -> tuple[ChannelStats, int]:
    """What the candidate rule decides of the app's other episodes: (ChannelStats, how many others)."""
    app = apps[name]
    others = [i for i in range(len(app.y)) if i not in set(labelled)]
    own = app.records(labelled)
    st = ChannelStats()
    for p, i in zip(app.probs(labelled, others), others, strict=True):
        k = kind(float(p))
        parts = [(prior[o][k][0], prior[o][k][1]) for o in apps if o != name]
        if posterior(parts, own[k][0], own[k][1]) >= bars[k[0]]:
            st.add(k[0], bool(app.y[i]))
    return st, len(others)


def ceiling(apps: dict[str, App], k: int) -> tuple[int, int, int]:
    """(most decidable at >= 95% knowing the truth, other episodes, tasks that could meet the bar)."""
    best_total = total = meeting = 0
    for name, app in apps.items():
        labelled = random.Random(f"{name}:{k}:0").sample(range(len(app.y)), min(k, len(app.y)))
        others = [i for i in range(len(app.y)) if i not in set(labelled)]
        cells = tally(app.probs(labelled, others), app.y[others])
        best = 0
        for size in range(1, len(cells) + 1):
            for chosen in combinations(cells, size):
                right, n = (sum(cells[c][j] for c in chosen) for j in (0, 1))
                best = max(best, n) if right >= 0.95 * n else best
        best_total, total, meeting = (
            best_total + best,
            total + len(others),
            meeting + (best >= 0.7 * len(others)),
        )
    return best_total, total, meeting


def _row(apps: dict[str, App], label: str, k: int, bars: dict[bool, float], prior: Records) -> str:
    pooled, decided, others, meeting = ChannelStats(), 0, 0, 0
    trials = TRIALS if label == "random" else 1
    for name, app in apps.items():
        for t in range(trials):
            if label == "teaching":
                labelled = app.teaching(k)
            elif label == "stratified":
                labelled = app.stratified(k)
            else:
                labelled = random.Random(f"{name}:{k}:{t}").sample(range(len(app.y)), min(k, len(app.y)))
            st, n = decide(apps, name, labelled, bars, prior)
            for cell in ("tp", "fp", "tn", "fn"):
                setattr(pooled, cell, getattr(pooled, cell) + getattr(st, cell))
            decided, others = decided + st.n, others + n
            precise = st.tp + st.fp == 0 or st.tp >= 0.95 * (st.tp + st.fp)
            meeting += st.n >= 0.7 * n and precise and st.tp + st.tn >= 0.9 * st.n
    figures = (
        (decided, others),
        (pooled.tp + pooled.tn, pooled.n),
        (pooled.tp, pooled.tp + pooled.fp),
        (pooled.tn, pooled.tn + pooled.fn),
    )
    shown = " ".join(f"{rate_shown(*f):>24}" for f in figures)
    return f"{label:10} {k:>3} {shown} {meeting}/{len(apps) * trials}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=float, default=0.95, help="the bar for success verdicts")
    parser.add_argument("--npv", type=float, default=0.90, help="the bar for failure verdicts")
    args = parser.parse_args()
    apps = load()
    prior = {name: tally(app.unseen, app.y) for name, app in apps.items()}  # each with no label
    bars = {True: args.target, False: args.npv}
    episodes = sum(len(a.y) for a in apps.values())
    print(f"{episodes} episodes of {len(apps)} tuning apps, each left out in turn")
    print(f"{'labels':10} {'k':>3} {'decided':>24} {'accuracy':>24} {'precision':>24} {'npv':>24} meeting")
    for label in ("teaching", "stratified", "random"):
        for k in KS:
            print(_row(apps, label, k, bars, prior))
    print("-- hindsight ceiling: kinds chosen knowing the truth, at least 95% right (k random labels)")
    for k in KS:
        best, total, meeting = ceiling(apps, k)
        could = f"{meeting}/{len(apps)} tasks could meet the bar"
        print(f"k = {k:>2}: {rate_shown(best, total)} decidable; {could}")


if __name__ == "__main__":
    main()
