"""Episodes in the database: the one place a kernel `Episode` and its `Step`s become rows
(`store_episode`) and rows become `Step`s again (`round_episodes`, `steps_by_episode`).

An episode is written with its steps, its verifier anchor and every dropped attempt and
unparsed step (with its reason) in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import insert_ignore, transaction
from storage.models import Anchor, Episode, Exclusion, Judgment
from storage.models import Query as QueryRow
from storage.models import Step as StepRow
from trajforge.domain import STEP_LABELS, Query, StepVerdict
from trajforge.episode import Attempt, Step
from trajforge.episode import Episode as Played
from trajforge.errors import StageError

EXCLUSION_KEY = ["stage", "item_type", "item_key", "reason"]

STEP_CRITICS = ("llm_step", "route_check", "learned_step")  # preference order of stored step labels


def store_episode(
    sessions: sessionmaker[Session], round_id: int, policy_id: int, query_id: int, episode: Played
) -> bool:
    """Write one finished episode; False when it was stored already (by another worker or run)."""
    with transaction(sessions) as s:
        if not insert_ignore(
            s, Episode, [_episode_row(round_id, policy_id, query_id, episode)], ["uid"], count=True
        ):
            return False  # another worker stored it
        episode_id = s.scalars(select(Episode.id).where(Episode.uid == episode.uid)).one()
        steps = [{"episode_id": episode_id, **st.row()} for st in episode.steps]
        insert_ignore(s, StepRow, steps, ["episode_id", "index"])
        if (verdict := episode.anchor_verdict) is not None:
            anchor = {
                "episode_id": episode_id,
                "source": "verifier",
                "annotator": "",
                # the episode's outcome: the goal state reached *and* the episode ended by the
                # policy's success; a goal reached but never ended (max_steps) is no demonstration
                "label": "success" if episode.outcome == "success" else "failure",
                "confidence": 1.0,
                "meta": {**verdict.to_json(), "ended": episode.reason or "success"},
            }
            insert_ignore(s, Anchor, [anchor], ["episode_id", "source", "annotator"])
        insert_ignore(s, Exclusion, _exclusion_rows(round_id, episode), EXCLUSION_KEY)
    return True


def _episode_row(round_id: int, policy_id: int, query_id: int, episode: Played) -> dict[str, Any]:
    verdict = episode.anchor_verdict  # no verifier for this app: the critics and humans decide
    meta: dict[str, Any] = {
        "device_failures": [a.model_dump() for a in episode.failures],
        "policy_failure": episode.policy_failure,
        **({"sampling": episode.sampling} if episode.sampling else {}),
        **({"observed": list(episode.observed)} if episode.observed else {}),
    }
    return {
        "uid": episode.uid,
        "round_id": round_id,
        "query_id": query_id,
        "policy_id": policy_id,
        "attempt": episode.rollout,
        "device": episode.device,
        "status": "done" if episode.device else "failed",
        "outcome": episode.outcome,
        "verifier_success": verdict.success if verdict else None,
        "num_steps": len(episode.steps),
        "reason": episode.reason,
        "meta": meta,
    }


def _exclusion_rows(round_id: int, episode: Played) -> list[dict[str, Any]]:
    """What the rollout dropped, with reasons: failed attempts, unparsed steps, a model fault."""
    rows = attempt_rows(round_id, episode.uid, episode.failures)
    rows += [
        {
            "round_id": round_id,
            "stage": "rollout",
            "item_type": "step",
            "item_key": f"{episode.uid}:{st.index}",
            "reason": st.parse_error,
            "detail": {"raw_output": st.raw_output},
        }
        for st in episode.steps
        if st.parse_error
    ]
    if episode.policy_failure:
        rows.append(
            {
                "round_id": round_id,
                "stage": "rollout",
                "item_type": "episode",
                "item_key": episode.uid,
                "reason": episode.reason,
                "detail": episode.policy_failure,
            }
        )
    return rows


def attempt_rows(round_id: int, uid: str, failures: Sequence[Attempt]) -> list[dict[str, Any]]:
    """Exclusion rows of an episode's failed attempts (device crashed, hung, timed out)."""
    return [
        {
            "round_id": round_id,
            "stage": "rollout",
            "item_type": "episode_attempt",
            "item_key": f"{uid}:{f.attempt}",
            "reason": f.reason,
            "detail": f.model_dump(),
        }
        for f in failures
    ]


def record_attempts(
    sessions: sessionmaker[Session], round_id: int, uid: str, failures: Sequence[Attempt]
) -> None:
    """The failed attempts of an episode that found no device afterwards (a rerun plays it)."""
    if failures:
        with transaction(sessions) as s:
            insert_ignore(s, Exclusion, attempt_rows(round_id, uid, failures), EXCLUSION_KEY)


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
        select(StepRow)
        .join(Episode, Episode.id == StepRow.episode_id)
        .where(*where)
        .order_by(StepRow.episode_id, StepRow.index)
    ):
        steps.setdefault(st.episode_id, []).append(Step.model_validate(st))
    return steps


def round_step_judgments(s: Session, round_id: int) -> dict[int, dict[str, Judgment]]:
    """Every stored step-critic judgment of the round by step id and critic, in one query (a
    critic's latest version wins)."""
    stored: dict[int, dict[str, Judgment]] = {}
    for j in s.scalars(
        select(Judgment)
        .join(StepRow, StepRow.id == Judgment.target_id)
        .join(Episode, Episode.id == StepRow.episode_id)
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
    found = [stored.get(st.id) for st in steps]
    if not all(found):
        raise StageError(
            f"round {round_id} is not judged yet; run `trajforge critics run --round {round_id}` first"
        )
    out = []
    for critics in filter(None, found):
        j = next(critics[c] for c in STEP_CRITICS if c in critics)
        label = j.label if j.label in STEP_LABELS else "NEUTRAL"
        out.append(StepVerdict(label, j.analysis or "stored", j.summary or ""))
    return out
