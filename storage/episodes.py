"""A round's episodes as every stage reads them: loaded in bulk, steps as `StepView`s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.models import Episode, Judgment, Step
from storage.models import Query as QueryRow
from trajforge.domain import STEP_LABELS, Query, StepVerdict, StepView
from trajforge.errors import StageError

STEP_CRITICS = ("llm_step", "route_check", "learned_step")  # preference order of stored step labels


def round_episodes(s: Session, round_id: int) -> list[tuple[Episode, Query, list[Step]]]:
    """Every episode of the round with its query and steps, in two queries (not one per episode)."""
    pairs = s.execute(
        select(Episode, QueryRow)
        .join(QueryRow, QueryRow.id == Episode.query_id)
        .where(Episode.round_id == round_id)
        .order_by(Episode.id)
    ).all()
    steps = steps_by_episode(s, Episode.round_id == round_id)
    return [(e, row.to_domain(row.goal.get("app", "")), steps.get(e.id, [])) for e, row in pairs]


def steps_by_episode(s: Session, *where: Any) -> dict[int, list[Step]]:
    """The steps of the episodes `where` selects (conditions on `Episode`), in order, by episode id."""
    steps: dict[int, list[Step]] = {}
    for st in s.scalars(
        select(Step)
        .join(Episode, Episode.id == Step.episode_id)
        .where(*where)
        .order_by(Step.episode_id, Step.index)
    ):
        steps.setdefault(st.episode_id, []).append(st)
    return steps


def step_view(step: Step) -> StepView:
    return StepView(
        step.action,
        step.parse_error,
        step.screenshot,
        step.screenshot_after or step.screenshot,
        step.elements or [],
        step.width,
        step.height,
    )


def round_step_judgments(s: Session, round_id: int) -> dict[int, dict[str, Judgment]]:
    """Every stored step-critic judgment of the round by step id and critic, in one query (a
    critic's latest version wins)."""
    stored: dict[int, dict[str, Judgment]] = {}
    for j in s.scalars(
        select(Judgment)
        .join(Step, Step.id == Judgment.target_id)
        .join(Episode, Episode.id == Step.episode_id)
        .where(Judgment.target == "step", Episode.round_id == round_id, Judgment.critic.in_(STEP_CRITICS))
        .order_by(Judgment.critic_version)
    ):
        stored.setdefault(j.target_id, {})[j.critic] = j
    return stored


def stored_step_verdicts(
    stored: dict[int, dict[str, Judgment]], round_id: int, steps: Sequence[Step]
) -> list[StepVerdict]:
    """An episode's step-critic labels from `round_step_judgments` (a model critic's where present).

    Raises:
        StageError: a step has no label: the round is not judged yet (names the command).
    """
    if not all(st.id in stored for st in steps):
        raise StageError(
            f"round {round_id} is not judged yet; run `trajforge critics run --round {round_id}` first"
        )
    out = []
    for st in steps:
        j = next(stored[st.id][c] for c in STEP_CRITICS if c in stored[st.id])
        label = j.label if j.label in STEP_LABELS else "NEUTRAL"
        out.append(StepVerdict(label, j.analysis or "stored", j.summary or ""))
    return out
