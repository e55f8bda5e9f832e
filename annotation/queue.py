"""The review queue: which trajectories of a round need a human, and why.

It is what CSRS sends to humans: episodes nothing could decide, trajectory channels that
disagree, a consensus that disagrees with the verifier, verdicts that did not parse, and
verdicts scored below `annotate.low_confidence` (the calibrated consensus scores its
verdict by the probability it gives it). A seeded random share of the other episodes
(`annotate.audit_fraction`) joins as `audit`, so calibration is measured beyond hard cases.
Within a reason, the episodes whose consensus is least sure come first: a human's verdict
there teaches the channels' weights the most. The episodes nothing decided (`no_outcome`, the
critic abstained) are ordered, under `critics.trust: error`, as the round's decision left them
(`LABEL_ORDER` in its stats, `critics.error_control.teaching_order`: the cells a label could let the
most be decided first, at random within a cell); under the other rules by what a label teaches the
per-task trust (`critics.precision`): the tasks with the fewest labels first, taking turns, and within
a task `teaching_order`. The round's audit sample of what the critics published (`critics.audit`)
goes alone and blind as `audit_published`, to a project of its own.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.anchors import anchors_by_episode, deciding_anchor, episode_apps
from storage.models import Anchor, Episode, Exclusion, Judgment, Round, Step
from storage.models import Query as QueryRow
from storage.samples import OUTCOME_STAGE
from trajforge.settings import AnnotationSettings
from trajforge.verdicts import AUDIT, CONSENSUS, LABEL_ORDER, SILENT

# why an episode needs a human, most urgent first; no_outcome: no anchor and no trusted critic decided it
REASONS = (
    "no_outcome",
    "verifier_disagreement",
    "channel_disagreement",
    "unparsed",
    "low_confidence",
    "audit_published",  # the round's random sample of what the critics decided (`critics.audit`): own project
    "audit",
)


@dataclass
class Candidate:
    episode_id: int
    uid: str
    app: str
    reasons: list[str]
    confidence: float = 1.0  # the calibrated consensus's probability of its own verdict
    verdict: bool | None = None  # the consensus's: success (True), failure (False), none


def _audited(uid: str, seed: int, fraction: float) -> bool:
    digest = hashlib.sha256(f"{seed}:{uid}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def review_queue(s: Session, round_id: int, settings: AnnotationSettings) -> list[Candidate]:
    """Every episode of the round that needs a human, with why; hardest reasons first."""
    out = []
    consensus = ":".join(CONSENSUS)
    rows = s.execute(
        select(Episode.id, Episode.uid, QueryRow.goal)
        .join(QueryRow, QueryRow.id == Episode.query_id)
        .where(Episode.round_id == round_id, Episode.status == "done")
        .order_by(Episode.id)
    ).all()
    in_round = select(Episode.id).where(Episode.round_id == round_id).scalar_subquery()
    judgments: dict[int, dict[str, Judgment]] = {}
    for j in s.scalars(
        select(Judgment).where(Judgment.target == "episode", Judgment.target_id.in_(in_round))
    ):
        judgments.setdefault(j.target_id, {})[f"{j.critic}:{j.critic_version}"] = j
    verifiers, undecided = _verifiers_and_undecided(s, round_id, in_round)
    stats = s.scalar(select(Round.stats).where(Round.id == round_id)) or {}
    published = {int(e) for e in stats.get(AUDIT) or {}}  # the round's audit of what the critics decided
    asked = {e: i for i, e in enumerate(stats.get(LABEL_ORDER) or [])}  # the error rule's label order
    for episode_id, uid, goal in rows:
        judged = judgments.get(episode_id, {})
        verifier = verifiers.get(episode_id)
        reasons = ["no_outcome"] if uid in undecided else []
        agreed = judged.get(consensus)
        if (
            verifier is not None
            and agreed is not None
            and (agreed.label == "correct") != (verifier == "success")
        ):
            reasons.append("verifier_disagreement")
        channels = {
            j.label for k, j in judged.items() if k != consensus and j.label not in ("unparsed", *SILENT)
        }
        if len(channels) > 1:
            reasons.append("channel_disagreement")
        if any(j.label == "unparsed" for j in judged.values()):
            reasons.append("unparsed")
        if any(j.score is not None and j.score < settings.low_confidence for j in judged.values()):
            reasons.append("low_confidence")
        if episode_id in published:  # blind and alone: the person's verdict measures the published error
            reasons = ["audit_published"]
        elif not reasons and judged and _audited(uid, settings.seed, settings.audit_fraction):
            reasons.append("audit")
        if reasons:
            sure = agreed.score if agreed is not None and agreed.score is not None else 1.0
            said = agreed.label == "correct" if agreed is not None and agreed.label not in SILENT else None
            out.append(Candidate(episode_id, uid, str(goal.get("app", "")), reasons, sure, said))
    # hardest reasons first; within one, the verdicts the critics are least sure of, which teach the most
    out.sort(key=lambda c: (min(REASONS.index(r) for r in c.reasons), c.confidence, c.episode_id))
    first = [c for c in out if c.reasons[0] == "no_outcome"]  # a list's reasons run in REASONS order
    if asked:  # the error rule's order (`critics.error_control.teaching_order`), kept with the round
        ordered = sorted(first, key=lambda c: (asked.get(c.episode_id, len(asked)), c.episode_id))
        return ordered + out[len(first) :]
    return _teaching(first, _labels_by_app(s, round_id)) + out[len(first) :]


def teaching_order(ranked: list[tuple[int, float, bool]]) -> list[int]:
    """The episodes of one task, (id, confidence, verdict), in the order their labels teach its trust
    most: the most confident verdicts first, since a label at confidence c counts for every decision
    at c or below, taking turns between the two verdicts, so the first labels show both whether the
    task's successes and its failures are read right (a task read the wrong way shows at once)."""
    by_verdict = {
        said: sorted((r for r in ranked if r[2] == said), key=lambda r: (-r[1], r[0]))
        for said in (True, False)
    }
    order = []
    for pair in itertools.zip_longest(by_verdict[True], by_verdict[False]):
        order += [r[0] for r in sorted(filter(None, pair), key=lambda r: (-r[1], r[0]))]
    return order


def _teaching(candidates: list[Candidate], labels: Counter[str]) -> list[Candidate]:
    """Undecided episodes in teaching order: tasks with the fewest labels first, taking turns."""
    by_app: dict[str, list[Candidate]] = {}
    for c in candidates:
        by_app.setdefault(c.app, []).append(c)
    queues = []
    for app in sorted(by_app, key=lambda a: (labels[a], a)):
        by_id = {c.episode_id: c for c in by_app[app]}
        ranked = [(c.episode_id, c.confidence, bool(c.verdict)) for c in by_app[app]]
        queues.append([by_id[e] for e in teaching_order(ranked)])
    return [c for turn in itertools.zip_longest(*queues) for c in turn if c is not None]


def _labels_by_app(s: Session, round_id: int) -> Counter[str]:
    """Each task's anchored episodes up to the round."""
    up_to = Episode.round_id <= round_id
    apps = episode_apps(s, up_to)
    return Counter(apps[e] for e, found in anchors_by_episode(s, up_to).items() if deciding_anchor(found))


def _verifiers_and_undecided(s: Session, round_id: int, in_round: Any) -> tuple[dict[int, str], set[str]]:
    """The verifier's label per episode of the round, and the uids of episodes nothing decided."""
    verifiers = dict(
        s.execute(
            select(Anchor.episode_id, Anchor.label).where(
                Anchor.source == "verifier", Anchor.episode_id.in_(in_round)
            )
        )
        .tuples()
        .all()
    )
    undecided = set(
        s.scalars(
            select(Exclusion.item_key).where(
                Exclusion.round_id == round_id,
                Exclusion.stage == OUTCOME_STAGE,
                Exclusion.item_type == "episode",
            )
        )
    )
    return verifiers, undecided


def signature(s: Session, episode_ids: list[int]) -> dict[int, str]:
    """A digest per episode of its query, screens and actions: equal digests, identical trajectories."""
    parts: dict[int, list[Any]] = {}
    for e, q in s.execute(
        select(Episode.id, QueryRow.uid)
        .join(QueryRow, QueryRow.id == Episode.query_id)
        .where(Episode.id.in_(episode_ids))
    ):
        parts[e] = [q]
    for e, shot, after, action in s.execute(
        select(Step.episode_id, Step.screenshot, Step.screenshot_after, Step.action)
        .where(Step.episode_id.in_(episode_ids))
        .order_by(Step.episode_id, Step.index)
    ):
        parts[e].append([shot, after, action.stored() if action is not None else None])
    return {e: hashlib.sha256(json.dumps(p, sort_keys=True).encode()).hexdigest() for e, p in parts.items()}
