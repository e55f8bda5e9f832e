"""Which stored episodes a rerun plays again: those the policy's endpoint failed, which no
later stage has used (`storage.episodes` writes and reads the episodes themselves)."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import transaction
from storage.models import Anchor, Episode, Exclusion, Judgment, Sample, Step

MODEL_FAULTS = ("policy_error", "policy_timeout")  # episodes a rerun plays again


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
