"""Anchors, consensus labels and apps read per episode (what they decide is `critics.outcomes`')."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.models import Anchor, Episode, Judgment
from storage.models import Query as QueryRow
from trajforge.verdicts import CONSENSUS


def anchors_by_episode(s: Session, *where: Any) -> dict[int, list[Anchor]]:
    """Every anchor of the episodes `where` selects (conditions on `Episode`), by episode id."""
    out: dict[int, list[Anchor]] = {}
    for anchor in s.scalars(select(Anchor).join(Episode, Episode.id == Anchor.episode_id).where(*where)):
        out.setdefault(anchor.episode_id, []).append(anchor)
    return out


def consensus_labels(s: Session, *where: Any) -> dict[int, str]:
    """The offline consensus label of the episodes `where` selects, by episode id."""
    return {episode_id: label for episode_id, (label, _) in consensus_verdicts(s, *where).items()}


def consensus_verdicts(s: Session, *where: Any) -> dict[int, tuple[str, float | None]]:
    """The offline consensus label and confidence (its score) of the episodes `where` selects."""
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


def episode_apps(s: Session, *where: Any) -> dict[int, str]:
    """The app of each episode `where` selects, by episode id."""
    rows = s.execute(
        select(Episode.id, QueryRow.goal).join(QueryRow, QueryRow.id == Episode.query_id).where(*where)
    )
    return {episode_id: str(goal.get("app", "")) for episode_id, goal in rows}


def deciding_anchor(anchors: Sequence[Anchor]) -> Anchor | None:
    """The anchor that decides an episode's outcome: a human's overrides the verifier's."""
    return next((a for a in anchors if a.source == "human"), anchors[0] if anchors else None)


def reversed_verifier(anchors: Sequence[Anchor], deciding: Anchor) -> str | None:
    """The verifier's label when the deciding anchor is a human who reversed it, else None."""
    verifier = next((a.label for a in anchors if a.source == "verifier"), None)
    return verifier if deciding.source == "human" and verifier not in (None, deciding.label) else None
