"""An episode as the runner stores it: the episode row, its steps, its verifier anchor and
every dropped attempt and unparsed step with its reason, in one transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import insert_ignore, transaction
from storage.models import Anchor, Episode, Exclusion, Judgment, Sample, Step
from trajforge.world.verify import UNVERIFIABLE

MODEL_FAULTS = ("policy_error", "policy_timeout")  # episodes a rerun plays again

EXCLUSION_KEY = ["stage", "item_type", "item_key", "reason"]


def store_episode(
    sessions: sessionmaker[Session],
    uid: str,
    round_id: int,
    policy_id: int,
    query_id: int,
    k: int,
    device: str | None,
    result: dict[str, Any],
    failures: list[dict[str, Any]],
) -> bool:
    """Write one finished episode; False when it was stored already (by another worker or run)."""
    verdict = result["verdict"]
    if verdict is not None and verdict.failed == UNVERIFIABLE:
        verdict = None  # no verifier for this app: no anchor, the critics and humans decide
    policy_failure = result.get("policy_failure")  # the model error (HTTP status, message) or timeout
    with transaction(sessions) as s:
        inserted = insert_ignore(
            s,
            Episode,
            [
                {
                    "uid": uid,
                    "round_id": round_id,
                    "query_id": query_id,
                    "policy_id": policy_id,
                    "attempt": k,
                    "device": device,
                    "status": "done" if device else "failed",
                    "outcome": result["outcome"],
                    "verifier_success": verdict.success if verdict else None,
                    "num_steps": len(result["steps"]),
                    "reason": result["reason"],
                    "meta": {
                        "device_failures": failures,
                        "policy_failure": policy_failure,
                        **({"sampling": result["sampling"]} if result.get("sampling") else {}),
                    },
                }
            ],
            ["uid"],
            count=True,
        )
        if not inserted:
            return False  # another worker stored it
        episode_id = s.scalars(select(Episode.id).where(Episode.uid == uid)).one()
        insert_ignore(
            s,
            Step,
            [{"episode_id": episode_id, **row} for row in result["steps"]],
            ["episode_id", "index"],
        )
        if verdict is not None:
            insert_ignore(
                s,
                Anchor,
                [
                    {
                        "episode_id": episode_id,
                        "source": "verifier",
                        "annotator": "",
                        # the episode's outcome: the goal state reached *and* the episode ended by the
                        # policy's success; a goal reached but never ended (max_steps) is no demonstration
                        "label": "success" if result["outcome"] == "success" else "failure",
                        "confidence": 1.0,
                        "meta": {**verdict.to_json(), "ended": result["reason"] or "success"},
                    }
                ],
                ["episode_id", "source", "annotator"],
            )
        insert_ignore(
            s,
            Exclusion,
            attempt_rows(round_id, uid, failures)
            + [
                {
                    "round_id": round_id,
                    "stage": "rollout",
                    "item_type": "step",
                    "item_key": f"{uid}:{row['index']}",
                    "reason": row["parse_error"],
                    "detail": {"raw_output": row["raw_output"]},
                }
                for row in result["steps"]
                if row["parse_error"]
            ]
            + (
                [
                    {
                        "round_id": round_id,
                        "stage": "rollout",
                        "item_type": "episode",
                        "item_key": uid,
                        "reason": result["reason"],
                        "detail": policy_failure,
                    }
                ]
                if policy_failure
                else []
            ),
            EXCLUSION_KEY,
        )
    return True


def attempt_rows(round_id: int, uid: str, failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Exclusion rows of an episode's failed attempts (device crashed, hung, timed out)."""
    return [
        {
            "round_id": round_id,
            "stage": "rollout",
            "item_type": "episode_attempt",
            "item_key": f"{uid}:{f['attempt']}",
            "reason": f["reason"],
            "detail": f,
        }
        for f in failures
    ]


def record_attempts(
    sessions: sessionmaker[Session], round_id: int, uid: str, failures: list[dict[str, Any]]
) -> None:
    """The failed attempts of an episode that found no device afterwards (a rerun plays it)."""
    if failures:
        with transaction(sessions) as s:
            insert_ignore(s, Exclusion, attempt_rows(round_id, uid, failures), EXCLUSION_KEY)


def forget_model_faults(sessions: sessionmaker[Session], round_id: int, mine: set[str]) -> set[str]:
    """The round's stored episode uids, less those of `mine` (this run's episodes; other shards
    of the round are not touched) that the policy's endpoint failed (an HTTP error or a timeout)
    and no later stage has used yet: those are deleted, to be played again."""
    with transaction(sessions) as s:
        rows = s.execute(
            select(Episode.uid, Episode.id).where(
                Episode.round_id == round_id, Episode.reason.in_(MODEL_FAULTS)
            )
        )
        faulted = {uid: id_ for uid, id_ in rows if uid in mine}
        used = set(s.scalars(select(Sample.episode_id).where(Sample.episode_id.in_(faulted.values())))) | set(
            s.scalars(
                select(Judgment.target_id).where(
                    Judgment.target == "episode", Judgment.target_id.in_(faulted.values())
                )
            )
        )
        retry = {uid: id_ for uid, id_ in faulted.items() if id_ not in used}
        if retry:
            s.execute(delete(Step).where(Step.episode_id.in_(retry.values())))
            s.execute(delete(Anchor).where(Anchor.episode_id.in_(retry.values())))
            s.execute(
                delete(Exclusion).where(
                    Exclusion.stage == "rollout",
                    Exclusion.item_type == "episode",
                    Exclusion.item_key.in_(retry),
                )
            )
            s.execute(delete(Episode).where(Episode.id.in_(retry.values())))
        return set(s.scalars(select(Episode.uid).where(Episode.round_id == round_id)))
