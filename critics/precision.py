"""Trust earned per task, precision first (`critics.trust: precision`; the default is `error`).

The consensus gives each episode a verdict and a confidence (`critics.consensus`: the probability of
its verdict under the calibrated rule; an anchored episode's is computed without its own anchor).
Whether it may decide an unlabelled episode is a question about the task, not the app as a whole
passing a gate: how often is a verdict of this task, at least this confident, right?

Two kinds of evidence answer it, from the anchored episodes (a human's verdict, else the verifier's)
of this round and earlier:

- the other tasks' verdicts at least this confident, each recomputed as the consensus would have
  given it had its task been unseen (every anchor of that task left out of the channels' weights,
  as a new task's are): right r_o of n_o, so a pooled precision q = (r_o + 1) / (n_o + 2);
- the task's own such verdicts: right r of n.

The other tasks are a prior, as strong as they have been shown to transfer: the Beta prior
Beta(s q, s (1 - q)), whose strength s comes from how much the tasks' own accuracies spread around
the pooled one (method of moments: s = mu (1 - mu) / tau^2 - 1, where tau^2 is their variance beyond
what sampling explains; whole tasks read the wrong way make it weak). The task's own verdicts update
it: the estimated precision is (s q + r) / (s + n). The consensus decides where that clears
`critics.target_precision` (0.98) and abstains otherwise; the episode then goes to the verifier, a
human, or stays out of the outcome-labelled data. With no anchor of a task, only what the other
tasks showed to be right at least 98% of the time at that confidence, with a strong enough prior,
is decided; every label of the task that agrees moves the bar towards its own record, and one that
disagrees pulls it down at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy.orm import Session

from critics.consensus import Anchored, Evidence, gather_evidence
from trajforge.settings import CriticSettings

MIN_STRENGTH, MAX_STRENGTH = 1.0, 200.0
MIN_TASK_VERDICTS = 3  # a task's accuracy enters the spread only with this many verdicts


@dataclass(frozen=True)
class Verdict:
    """An anchored episode's consensus verdict: its task, confidence, and whether it was right, as the
    consensus gives it (its own anchor left out) and as it would give it were the task unseen (every
    anchor of the task left out: what another task's prior is measured on)."""

    episode_id: int
    app: str
    confidence: float
    right: bool
    unseen_confidence: float | None = None  # None: as `confidence`
    unseen_right: bool | None = None

    def as_unseen(self) -> tuple[float, bool]:
        if self.unseen_confidence is None or self.unseen_right is None:
            return self.confidence, self.right
        return self.unseen_confidence, self.unseen_right


def verdict_of(ev: Evidence, a: Anchored, own: bool | None) -> tuple[bool, float] | None:
    """The consensus verdict on `a` and its confidence, the votes weighed by `ev` (`own` left out)."""
    score = ev.log_odds(a.app, a.votes, own, ev.choose(a.app, a.episode_id))[0]
    return None if score is None else (score > 0, 1 / (1 + math.exp(-abs(score))))


def verdicts_of(anchored: list[Anchored], minimum: int) -> list[Verdict]:
    """Each anchored episode's verdict, as the consensus gives it and as it would for an unseen task."""
    everything = Evidence(minimum)
    for a in anchored:
        everything.add(a)
    unseen: dict[int, tuple[bool, float]] = {}
    for app in {a.app for a in anchored}:
        without = Evidence(minimum)
        for a in anchored:
            if a.app != app:
                without.add(a)
        for a in anchored:
            if a.app == app and (said := verdict_of(without, a, None)) is not None:
                unseen[a.episode_id] = said
    out = []
    for a in anchored:
        said = verdict_of(everything, a, a.actual)
        if said is None:
            continue
        other = unseen.get(a.episode_id)
        out.append(
            Verdict(
                a.episode_id,
                a.app,
                said[1],
                said[0] == a.actual,
                None if other is None else other[1],
                None if other is None else other[0] == a.actual,
            )
        )
    return out


@dataclass(frozen=True)
class Estimate:
    precision: float  # the estimated precision of the task's verdicts at least this confident
    own: int  # the task's own anchored verdicts it rests on
    own_right: int
    pooled: int  # the other tasks' (the prior's)


class Precision:
    """The anchored verdicts up to a round, and the estimate of the module docstring."""

    def __init__(self, verdicts: list[Verdict]) -> None:
        self.verdicts = verdicts
        self.strength = transfer_strength(verdicts)

    @classmethod
    def up_to(cls, s: Session, round_id: int, settings: CriticSettings) -> Precision:
        """From the channels' votes on the anchored episodes up to the round (`verdicts_of`)."""
        evidence, _ = gather_evidence(s, round_id, settings)
        return cls(verdicts_of(evidence.anchored, settings.calibration_min_anchored))

    def estimate(self, app: str, confidence: float, leave_out: int | None = None) -> Estimate:
        """The task's precision at `confidence` and above (the episode `leave_out` not counted)."""
        own = pooled = own_right = pooled_right = 0
        for v in self.verdicts:
            if v.episode_id == leave_out:
                continue
            if v.app == app:
                if v.confidence >= confidence:
                    own, own_right = own + 1, own_right + v.right
            elif (seen := v.as_unseen())[0] >= confidence:  # the others, as if each were unseen
                pooled, pooled_right = pooled + 1, pooled_right + seen[1]
        q = (pooled_right + 1) / (pooled + 2)
        precision = (self.strength * q + own_right) / (self.strength + own)
        return Estimate(precision, own, own_right, pooled)

    def labels_needed(self, app: str, target: float) -> int | None:
        """How many more agreeing labels the task needs before its verdicts (any confidence) clear
        `target`: 0 when they do; None when no number can (a target of 1)."""
        est = self.estimate(app, 0.0)
        if est.precision >= target:
            return 0
        if target >= 1:
            return None
        prior = est.precision * (self.strength + est.own)  # s q + r
        return max(1, int(-(-(target * (self.strength + est.own) - prior) // (1 - target))))


def transfer_strength(verdicts: list[Verdict]) -> float:
    """The prior's strength from how the tasks' accuracies, each as if unseen, spread around the pooled
    one (module docstring); the weakest prior where fewer than two tasks have enough verdicts to say."""
    by_app: dict[str, list[bool]] = {}
    for v in verdicts:
        by_app.setdefault(v.app, []).append(v.as_unseen()[1])
    tasks = [(sum(r), len(r)) for r in by_app.values() if len(r) >= MIN_TASK_VERDICTS]
    if len(tasks) < 2:
        return MIN_STRENGTH
    mu = sum(r for r, _ in tasks) / sum(n for _, n in tasks)
    spread = sum((r / n - mu) ** 2 for r, n in tasks) / (len(tasks) - 1)
    sampling = sum(mu * (1 - mu) / n for _, n in tasks) / len(tasks)
    tau2 = spread - sampling
    if tau2 <= 0:
        return MAX_STRENGTH
    return min(MAX_STRENGTH, max(MIN_STRENGTH, mu * (1 - mu) / tau2 - 1))
