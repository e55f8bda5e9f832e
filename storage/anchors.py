"""Anchors and verdicts read per episode: the deciding anchor, the consensus, the app, and the
end frames of successful episodes (the visual channel's references)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.models import Anchor, Episode, Judgment, Step
from storage.models import Query as QueryRow
from trajforge.domain import goal_key

CONSENSUS = ("consensus", "5")  # the configured channels combined (`critics.consensus`)


def deciding_anchor(anchors: Sequence[Anchor]) -> Anchor | None:
    """The anchor that decides an episode's outcome: a human's overrides the verifier's."""
    return next((a for a in anchors if a.source == "human"), anchors[0] if anchors else None)


def reversed_verifier(anchors: Sequence[Anchor], deciding: Anchor) -> str | None:
    """The verifier's label when the deciding anchor is a human who reversed it, else None."""
    verifier = next((a.label for a in anchors if a.source == "verifier"), None)
    return verifier if deciding.source == "human" and verifier not in (None, deciding.label) else None


def anchors_by_episode(s: Session, *where: Any) -> dict[int, list[Anchor]]:
    """Every anchor of the episodes `where` selects (conditions on `Episode`), by episode id."""
    out: dict[int, list[Anchor]] = {}
    for anchor in s.scalars(select(Anchor).join(Episode, Episode.id == Anchor.episode_id).where(*where)):
        out.setdefault(anchor.episode_id, []).append(anchor)
    return out


def consensus_labels(s: Session, *where: Any) -> dict[int, str]:
    """The offline consensus label of the episodes `where` selects, by episode id."""
    rows = s.execute(
        select(Judgment.target_id, Judgment.label)
        .join(Episode, Episode.id == Judgment.target_id)
        .where(
            Judgment.target == "episode",
            Judgment.critic == CONSENSUS[0],
            Judgment.critic_version == CONSENSUS[1],
            *where,
        )
    )
    return {episode_id: label for episode_id, label in rows}


def episode_apps(s: Session, *where: Any) -> dict[int, str]:
    """The app of each episode `where` selects, by episode id."""
    rows = s.execute(
        select(Episode.id, QueryRow.goal).join(QueryRow, QueryRow.id == Episode.query_id).where(*where)
    )
    return {episode_id: str(goal.get("app", "")) for episode_id, goal in rows}


def backend_of(device: str | None) -> str:
    """The kind of device an episode ran on ("sim-0#1" -> "sim"): frames compare only within one."""
    return str(device or "").split("-")[0]


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


SILENT = ("abstain", "undecided")  # episode labels that are no verdict (an unparsed one counts as "no")
