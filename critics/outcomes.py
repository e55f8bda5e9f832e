"""Where an episode's outcome comes from: an anchor, or the calibrated critics (CSRS used for real).

An anchor is a human's verdict, else the verifier's. Where a farm has no verifier (GUI-Owl's
setting, any real Android app) the offline critics' consensus decides where `critics.trust` lets
it: `error` (default), the largest set whose published labels' error stays under `max_label_error`
at its upper bound (`critics.error_control`); `precision`, an episode whose task's verdicts at that
confidence are estimated at least `target_precision` right (`critics.precision`); `gate`, every
episode of an app whose consensus has measured at least `trust_accuracy` on the app's anchored
episodes of this and earlier rounds (at least `trust_min_anchored` of them). Every other episode
stays undecided and goes to the human review queue. `critics.outcome` picks the rule:

- `anchor`: anchors only;
- `critic`: the trusted consensus decides every episode a human has not judged, and the
  verifier only calibrates it;
- `anchor_else_critic` (default): an anchor where there is one, else the trusted consensus.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from critics.audit import audit_record, audited_target
from critics.consensus import Anchored, gather_evidence, said_by, votes_of
from critics.error_control import Decision, Judged, decide, judge_episodes, teaching_order
from critics.precision import Precision
from storage.anchors import (
    anchors_by_episode,
    consensus_labels,
    consensus_verdicts,
    deciding_anchor,
    episode_apps,
    reversed_verifier,
)
from storage.models import Episode, Step
from storage.models import Query as QueryRow
from trajforge.domain import backend_of, goal_key
from trajforge.settings import CriticSettings
from trajforge.verdicts import UNDECIDED, UNTRUSTED, Outcome


@dataclass(frozen=True)
class Trust:
    correct: int
    anchored: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.anchored if self.anchored else 0.0


def measure_trust(s: Session, round_id: int) -> dict[str, Trust]:
    """Per app: the consensus against the deciding anchor on anchored episodes up to this round."""
    up_to = Episode.round_id <= round_id
    consensus = consensus_labels(s, up_to)
    apps = episode_apps(s, up_to)
    right: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for episode_id, found in anchors_by_episode(s, up_to).items():
        decided = deciding_anchor(found)
        if decided is None or consensus.get(episode_id) not in ("correct", "incorrect"):
            continue
        total[apps[episode_id]] += 1
        right[apps[episode_id]] += (consensus[episode_id] == "correct") == (decided.label == "success")
    return {app: Trust(right[app], n) for app, n in total.items()}


@dataclass
class CriticTrust:
    """Whether the consensus may decide an episode, by `critics.trust` (module docstring)."""

    settings: CriticSettings
    verdicts: dict[int, tuple[str, float | None]]  # the round's consensus label and confidence
    gate: dict[str, Trust]  # `trust: gate`: each app's measured accuracy
    precision: Precision | None  # `trust: precision`: the anchored verdicts up to the round
    error: ErrorControl | None = None  # `trust: error`: what the round's critics may decide

    @classmethod
    def of(cls, s: Session, round_id: int, settings: CriticSettings) -> CriticTrust:
        verdicts = consensus_verdicts(s, Episode.round_id == round_id)
        if settings.trust == "error":
            return cls(settings, verdicts, {}, None, ErrorControl.of(s, round_id, settings))
        if settings.trust == "precision":
            return cls(settings, verdicts, {}, Precision.up_to(s, round_id, settings))
        return cls(settings, verdicts, measure_trust(s, round_id), None)

    def decide(self, episode_id: int, app: str) -> Outcome:
        """The critic's outcome for the episode were it unlabelled (its own anchor left out)."""
        label, confidence = self.verdicts.get(episode_id, ("", None))
        if label not in ("correct", "incorrect"):
            return Outcome(None, UNDECIDED)
        if self.error is not None:
            return self.error.decide(episode_id, label == "correct")
        if self.precision is not None:
            if confidence is None:  # no calibrated channel yet (the AND rule): no precision to show
                return Outcome(None, UNTRUSTED, None, 0)
            est = self.precision.estimate(app, confidence, leave_out=episode_id)
            if est.precision < self.settings.target_precision:
                return Outcome(None, UNTRUSTED, est.precision, est.own)
            return Outcome(label == "correct", "critic", est.precision, est.own)
        measured = self.gate.get(app, Trust(0, 0))
        if (
            measured.anchored < self.settings.trust_min_anchored
            or measured.accuracy < self.settings.trust_accuracy
        ):
            return Outcome(None, UNTRUSTED, measured.accuracy, measured.anchored)
        return Outcome(label == "correct", "critic", measured.accuracy, measured.anchored)


@dataclass(frozen=True)
class ErrorControl:
    """`trust: error`: the round's consensus verdicts in their cells, and the cells whose episodes the
    critics may decide with the published labels' error kept under `critics.max_label_error`
    (`critics.error_control`)."""

    decision: Decision
    judged: dict[int, Judged]  # the round's episodes and every anchored one up to it
    target: float  # `max_label_error`, lowered where the people's audit showed more (`critics.audit`)

    @classmethod
    def of(cls, s: Session, round_id: int, settings: CriticSettings) -> ErrorControl:
        evidence, actual = gather_evidence(s, round_id, settings)
        apps = episode_apps(s, Episode.round_id == round_id)
        open_ = [e for e in sorted(apps) if e not in actual]
        votes = votes_of(s, open_, settings.channels)
        # an unlabelled episode's `actual` is never read: only the labelled (`known`) are weighed
        pool = evidence.anchored + [Anchored(e, apps[e], said_by(votes[e]), False) for e in open_]
        known = {a.episode_id for a in evidence.anchored}
        judged = judge_episodes(pool, known, settings.calibration_min_anchored)
        target = audited_target(settings.max_label_error, audit_record(s, round_id))
        return cls(decide(judged, target), {j.episode_id: j for j in judged}, target)

    def decide(self, episode_id: int, success: bool) -> Outcome:
        """The outcome the critics may publish: an unlabelled episode's where it was decided; a labelled
        one's (its own label left out, `success`) where its cell was."""
        j = self.judged.get(episode_id)
        if j is None:
            return Outcome(None, UNDECIDED)
        cell = self.decision.cells[j.cell]
        if j.episode_id not in self.decision.decided and j.cell not in self.decision.chosen:
            return Outcome(None, UNTRUSTED, 1 - cell.estimate, cell.labelled)
        return Outcome(success, "critic", 1 - (self.decision.claimed or 0.0), cell.labelled)


def label_order(s: Session, round_id: int, settings: CriticSettings) -> list[int]:
    """Under `trust: error`, the round's unlabelled episodes in the order a person's labels let the
    critics decide the most (`critics.error_control.teaching_order`); the review queue asks for the
    undecided ones so. Empty under another rule (the queue keeps its own order)."""
    if settings.trust != "error" or settings.outcome == "anchor":
        return []
    control = ErrorControl.of(s, round_id, settings)
    judged = list(control.judged.values())
    return [e for e in teaching_order(judged, control.target, round_id) if e in control.judged]


def decide_outcomes(s: Session, round_id: int, settings: CriticSettings) -> dict[int, Outcome]:
    """The outcome of every episode of the round, with where it came from."""
    in_round = Episode.round_id == round_id
    critic = CriticTrust.of(s, round_id, settings) if settings.outcome != "anchor" else None
    app_of = episode_apps(s, in_round)
    anchors = anchors_by_episode(s, in_round)
    out = {}
    for episode_id, app in app_of.items():
        found = anchors.get(episode_id, [])
        deciding = deciding_anchor(found)
        if deciding is not None and (settings.outcome != "critic" or deciding.source == "human"):
            overrides = reversed_verifier(found, deciding)
            out[episode_id] = Outcome(deciding.label == "success", deciding.source, overrides=overrides)
            continue
        out[episode_id] = Outcome(None, "none") if critic is None else critic.decide(episode_id, app)
    return out


def round_outcomes(
    sessions: sessionmaker[Session], round_id: int, settings: CriticSettings
) -> dict[int, Outcome]:
    """`decide_outcomes` in a session of its own: what curation is handed."""
    with sessions() as s:
        return decide_outcomes(s, round_id, settings)


def success_references(s: Session, round_id: int) -> dict[str, dict[str, set[str]]]:
    """End frames of episodes an anchor calls successful, this round and earlier, by goal and backend:
    {goal key: {end frame: uids of the queries of those episodes}}."""
    up_to = Episode.round_id <= round_id
    won = {
        episode_id
        for episode_id, found in anchors_by_episode(s, up_to).items()
        if (decided := deciding_anchor(found)) is not None and decided.label == "success"
    }
    out: dict[str, dict[str, set[str]]] = {}
    columns = (
        Episode.id,
        QueryRow.uid,
        Episode.device,
        QueryRow.goal,
        Step.screenshot_after,
        Step.screenshot,
    )
    for episode_id, uid, device, goal, after, before in s.execute(
        select(*columns)
        .join(QueryRow, QueryRow.id == Episode.query_id)
        .join(Step, (Step.episode_id == Episode.id) & (Step.index == Episode.num_steps - 1))
        .where(up_to)
    ):
        if episode_id in won:
            key = goal_key(goal, backend_of(device))
            out.setdefault(key, {}).setdefault(after or before, set()).add(uid)
    return out
