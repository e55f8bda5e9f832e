"""The consensus that decides: the configured trajectory channels of each episode, combined.

`compose_round` reads every stored episode verdict of the channels in `critics.channels` (the
learned critic, the visual channel, the model critics), and writes one consensus judgment per
episode under `trajforge.verdicts.CONSENSUS` by `critics.rule`:

- `calibrated` (default): each channel's vote weighs what it has measured: the log-likelihood
  ratio of its vote from its confusion counts against the deciding anchors of this round and
  earlier (the app's own when it has `critics.calibration_min_anchored` of them, else all apps'),
  added to the anchors' base rate as log-odds (naive Bayes, Laplace-smoothed). An anchored
  episode is weighed without its own anchor (leave one out), so the accuracy the trust gate
  measures on it is out of sample. A channel with too few anchored votes does not vote; with
  no calibrated channel (a first round with no anchors) the rule is AND. A channel that is 70%
  right beside one that is always right cannot outvote it, as it can under AND. The sum treats
  channels as independent, and two model critics that err on the same episodes are not, so
  per app the rule takes one channel alone instead where that was right on more anchored
  episodes (`Evidence.choose`, each weighed leaving itself out): on the anchors, the consensus
  is never less accurate than its best channel.
- `and` (GUI-Owl's rule), `majority`, or `weighted` by fixed `critics.weights`.

It rewrites the round's consensus rows, so running it again after the model critics have
judged folds their votes in. An abstaining or unparsed channel does not vote; with no vote the
episode is undecided. Whether the consensus may decide an outcome is `critics.outcomes`'s
trust gate: its measured accuracy on the app's anchored episodes.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from critics.heuristic import ChannelVerdict, consensus
from storage.anchors import anchors_by_episode, deciding_anchor, episode_apps
from storage.db import transaction
from storage.models import Episode, Judgment
from trajforge.metrics import ChannelStats
from trajforge.settings import CriticSettings
from trajforge.verdicts import CONSENSUS

SUMMARY = {
    "correct": "the voting channels agree",
    "incorrect": "a channel says incorrect",
    "undecided": "every channel abstained",
}
CALIBRATED_SUMMARY = {
    "correct": "the channels' calibrated votes say correct",
    "incorrect": "the channels' calibrated votes say incorrect",
}


def label(success: bool | None, silent: str = "abstain") -> str:
    if success is None:
        return silent
    return "correct" if success else "incorrect"


@dataclass(frozen=True)
class Anchored:
    """An anchored episode as calibration sees it: its app, the channels' votes and the outcome."""

    episode_id: int
    app: str
    votes: dict[str, bool]
    actual: bool


@dataclass
class Evidence:
    """The channels' votes against the deciding anchors of episodes up to a round: confusion counts
    per app and channel and over all apps, the anchors' successes and failures, and the anchored
    episodes themselves (to measure each way of combining the votes, leaving each episode out)."""

    minimum: int
    by_app: dict[str, dict[str, ChannelStats]] = field(default_factory=dict)
    pooled: dict[str, ChannelStats] = field(default_factory=dict)
    base: dict[str, Counter[bool]] = field(default_factory=dict)  # app ("" for all) -> anchor labels
    anchored: list[Anchored] = field(default_factory=list)
    # per app, per way of combining: whether it was right on each anchored episode, and how often
    _scored: dict[str, dict[str | None, tuple[dict[int, bool], int]]] = field(default_factory=dict)

    def add(self, episode: Anchored) -> None:
        for channel, said in episode.votes.items():
            self.by_app.setdefault(episode.app, {}).setdefault(channel, ChannelStats()).add(
                said, episode.actual
            )
            self.pooled.setdefault(channel, ChannelStats()).add(said, episode.actual)
        for key in {episode.app, ""}:  # the app's and all apps' (once, for an episode with no app)
            self.base.setdefault(key, Counter())[episode.actual] += 1
        self.anchored.append(episode)

    def log_odds(
        self, app: str, votes: dict[str, bool], own: bool | None, only: str | None = None
    ) -> tuple[float | None, dict[str, float]]:
        """The log-odds of success given the votes (only channel `only`'s, when it voted), and each
        calibrated channel's term; None when no voting channel is calibrated. `own`: the
        episode's own anchor, left out of the counts."""
        terms: dict[str, float] = {}
        for channel, said in votes.items():
            if only in votes and channel != only:
                continue
            st = self._counts(self.by_app.get(app, {}).get(channel), said, own)
            if st.n < self.minimum:
                st = self._counts(self.pooled.get(channel), said, own)
            if st.n >= self.minimum:
                terms[channel] = _likelihood_ratio(st, said)
        if not terms:
            return None, terms
        base = self._base(app, own)
        if base.total() < self.minimum:
            base = self._base("", own)
        prior = math.log((base[True] + 1) / (base[False] + 1))
        return prior + sum(terms.values()), terms

    def choose(self, app: str, episode_id: int) -> str | None:
        """How to combine the votes for the app: every calibrated channel (None), or one channel
        alone where it votes, whichever was right on the most anchored episodes (the app's when
        it has `minimum`, else all), each weighed without its own anchor, and the episode itself
        left out. Correlated channels (two model critics wrong on the same episodes) count as
        independent evidence in the sum; this keeps the consensus at least as accurate, on the
        anchors, as its best channel."""
        if app not in self._scored:
            pool = [a for a in self.anchored if a.app == app]
            key = app if len(pool) >= self.minimum else ""  # too few of its own: all apps', once
            if key not in self._scored:
                pool = pool if key else self.anchored
                ways = {how: self._right(pool, how) for how in (None, *sorted(self.pooled))}
                self._scored[key] = {how: (by, sum(by.values())) for how, by in ways.items()}
            self._scored[app] = self._scored[key]
        right = {how: total - by.get(episode_id, False) for how, (by, total) in self._scored[app].items()}
        return max(right, key=lambda how: (right[how], how is None))

    def _right(self, pool: list[Anchored], how: str | None) -> dict[int, bool]:
        """Whether combining the votes `how` was right on each anchored episode (weighed without it)."""
        out = {}
        for a in pool:
            score = self.log_odds(a.app, a.votes, a.actual, how)[0]
            out[a.episode_id] = score is not None and (score > 0) == a.actual
        return out

    def _base(self, key: str, own: bool | None) -> Counter[bool]:
        base = Counter(self.base.get(key, Counter()))
        if own is not None:
            base[own] -= 1
        return base

    @staticmethod
    def _counts(st: ChannelStats | None, said: bool, own: bool | None) -> ChannelStats:
        out = replace(st) if st else ChannelStats()
        if own is not None and st is not None:
            out.remove(said, own)
        return out


def _likelihood_ratio(st: ChannelStats, said: bool) -> float:
    """log P(vote | success) / P(vote | failure), Laplace-smoothed."""
    positives, negatives = st.tp + st.fn + 2, st.fp + st.tn + 2
    if said:
        return math.log((st.tp + 1) / positives) - math.log((st.fp + 1) / negatives)
    return math.log((st.fn + 1) / positives) - math.log((st.tn + 1) / negatives)


def votes_of(s: Session, episodes: list[int], channels: list[str]) -> dict[int, dict[str, Judgment]]:
    votes: dict[int, dict[str, Judgment]] = {e: {} for e in episodes}
    for j in s.scalars(
        select(Judgment)
        .where(Judgment.target == "episode", Judgment.target_id.in_(episodes), Judgment.critic.in_(channels))
        .order_by(Judgment.id)
    ):
        votes[j.target_id][j.critic] = j  # a channel's latest version wins
    return votes


def said_by(channels: dict[str, Judgment]) -> dict[str, bool]:
    return {c: j.label == "correct" for c, j in channels.items() if j.label in ("correct", "incorrect")}


def gather_evidence(s: Session, round_id: int, settings: CriticSettings) -> tuple[Evidence, dict[int, bool]]:
    """The calibration evidence of episodes up to the round, and the anchored outcome of each."""
    up_to = Episode.round_id <= round_id
    actual = {
        episode_id: decided.label == "success"
        for episode_id, found in anchors_by_episode(s, up_to).items()
        if (decided := deciding_anchor(found)) is not None
    }
    evidence = Evidence(settings.calibration_min_anchored)
    apps = episode_apps(s, up_to)
    for episode_id, channels in votes_of(s, list(actual), settings.channels).items():
        evidence.add(Anchored(episode_id, apps[episode_id], said_by(channels), actual[episode_id]))
    return evidence, actual


def compose_round(sessions: sessionmaker[Session], round_id: int, settings: CriticSettings) -> int:
    """Consensus rows for every episode of the round; the number judged correct."""
    with transaction(sessions) as s:
        episodes = list(s.scalars(select(Episode.id).where(Episode.round_id == round_id)).all())
        votes = votes_of(s, episodes, settings.channels)
        calibrated = settings.rule == "calibrated"
        evidence, actual = gather_evidence(s, round_id, settings) if calibrated else (None, {})
        apps = episode_apps(s, Episode.round_id == round_id)
        s.execute(
            delete(Judgment).where(
                Judgment.target == "episode",
                Judgment.target_id.in_(episodes),
                Judgment.critic == CONSENSUS[0],
                Judgment.critic_version == CONSENSUS[1],
            )
        )
        correct = 0
        for episode_id, channels in votes.items():
            said = said_by(channels)
            shown = " ".join(f"{c}:{j.critic_version}={j.label}" for c, j in sorted(channels.items()))
            own = actual.get(episode_id)
            agreed, weighed, confidence = _decide(
                evidence, settings, (episode_id, apps[episode_id]), said, own
            )
            summaries = CALIBRATED_SUMMARY if weighed and agreed is not None else SUMMARY
            correct += bool(agreed)
            s.add(
                Judgment(
                    critic=CONSENSUS[0],
                    critic_version=CONSENSUS[1],
                    target="episode",
                    target_id=episode_id,
                    label=label(agreed, "undecided"),
                    summary=summaries[label(agreed, "undecided")],
                    analysis=shown + weighed,
                    score=confidence,
                )
            )
    return correct


def _decide(
    evidence: Evidence | None,
    settings: CriticSettings,
    episode: tuple[int, str],
    said: dict[str, bool],
    own: bool | None,
) -> tuple[bool | None, str, float | None]:
    """One episode's (id, app) consensus; how the calibrated rule weighed its votes ("" by another
    rule); and its confidence, the probability of the verdict it gave (None by another rule),
    which `annotate.low_confidence` and the review queue's order read."""
    if evidence is not None:
        how = evidence.choose(episode[1], episode[0])
        score, terms = evidence.log_odds(episode[1], said, own, how)
        if score is not None:
            weighed = " ".join(f"{c} {t:+.2f}" for c, t in sorted(terms.items()))
            by = f"; {how} alone measured best" if how in said else ""
            return score > 0, f" | log-odds {score:+.2f} ({weighed}{by})", 1 / (1 + math.exp(-abs(score)))
    # AND, or the calibrated rule before any channel is calibrated
    verdicts = [ChannelVerdict(c, v, "") for c, v in sorted(said.items())]
    rule = "and" if settings.rule == "calibrated" else settings.rule
    return consensus(verdicts, rule, settings.weights), "", None
