"""Trust earned per task, precision first (`critics.trust: precision`, the default).

The consensus gives each episode a verdict and a confidence (`critics.consensus`: the probability of
its verdict under the calibrated rule; an anchored episode's is computed without its own anchor).
Whether it may decide an unlabelled episode is a question about the task, not the app as a whole
passing a gate: how often is a verdict of this task, at least this confident, right?

Two kinds of evidence answer it, from the anchored episodes (a human's verdict, else the verifier's)
of this round and earlier:

- the other tasks' verdicts at least this confident: right r_o of n_o, so a pooled precision
  q = (r_o + 1) / (n_o + 2);
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

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.anchors import anchors_by_episode, deciding_anchor, episode_apps
from storage.models import Episode, Judgment
from trajforge.verdicts import CONSENSUS

MIN_STRENGTH, MAX_STRENGTH = 1.0, 200.0
MIN_TASK_VERDICTS = 3  # a task's accuracy enters the spread only with this many verdicts


@dataclass(frozen=True)
class Verdict:
    """An anchored episode's consensus verdict: its task, confidence, and whether it was right."""

    episode_id: int
    app: str
    confidence: float
    right: bool


@dataclass(frozen=True)
class Estimate:
    precision: float  # the estimated precision of the task's verdicts at least this confident
    own: int  # the task's own anchored verdicts it rests on
    own_right: int
    pooled: int  # the other tasks' (the prior's)


def consensus_verdicts(s: Session, *where: Any) -> dict[int, tuple[str, float | None]]:
    """The consensus label and confidence of the episodes `where` selects, by episode id."""
    rows = s.execute(
        select(Judgment.target_id, Judgment.label, Judgment.score)
        .join(Episode, Episode.id == Judgment.target_id)
        .where(
            Judgment.target == "episode",
            Judgment.critic == CONSENSUS[0],
            Judgment.critic_version == CONSENSUS[1],
            *where,
        )
    )
    return {episode_id: (label, score) for episode_id, label, score in rows}


class Precision:
    """The anchored verdicts up to a round, and the estimate of the module docstring."""

    def __init__(self, verdicts: list[Verdict]) -> None:
        self.verdicts = verdicts
        self.strength = transfer_strength(verdicts)

    @classmethod
    def up_to(cls, s: Session, round_id: int) -> Precision:
        up_to = Episode.round_id <= round_id
        apps, said = episode_apps(s, up_to), consensus_verdicts(s, up_to)
        verdicts = []
        for episode_id, found in anchors_by_episode(s, up_to).items():
            deciding = deciding_anchor(found)
            label, confidence = said.get(episode_id, ("", None))
            if deciding is None or confidence is None or label not in ("correct", "incorrect"):
                continue
            right = (label == "correct") == (deciding.label == "success")
            verdicts.append(Verdict(episode_id, apps[episode_id], confidence, right))
        return cls(verdicts)

    def estimate(self, app: str, confidence: float, leave_out: int | None = None) -> Estimate:
        """The task's precision at `confidence` and above (the episode `leave_out` not counted)."""
        own = pooled = own_right = pooled_right = 0
        for v in self.verdicts:
            if v.confidence < confidence or v.episode_id == leave_out:
                continue
            if v.app == app:
                own, own_right = own + 1, own_right + v.right
            else:
                pooled, pooled_right = pooled + 1, pooled_right + v.right
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
    """The prior's strength from how the tasks' accuracies spread around the pooled one (module
    docstring); the weakest prior where fewer than two tasks have enough verdicts to say."""
    by_app: dict[str, list[bool]] = {}
    for v in verdicts:
        by_app.setdefault(v.app, []).append(v.right)
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
