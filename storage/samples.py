"""How drafted samples (`trajforge.sample.SampleDraft`) are written: `store_drafts` writes them
idempotently (a sample's uid is what it asks), kept or dropped, with an exclusion and its reason
for every drop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import insert_ignore, record_exclusions, transaction
from storage.models import Sample
from trajforge.sample import SampleDraft


def store_drafts(
    sessions: sessionmaker[Session],
    round_id: int,
    batches: Sequence[tuple[int | None, list[SampleDraft]]],
    stage: str,
) -> dict[str, Counter[str]]:
    """Write samples (kept or dropped) and an exclusion per drop, idempotently.

    Returns counts: "kept" by category, "dropped" by reason.
    """
    tally: dict[str, Counter[str]] = {"kept": Counter(), "dropped": Counter()}
    with transaction(sessions) as s:
        for episode_id, drafts in batches:
            rows = [
                {
                    "uid": d.uid,
                    "round_id": round_id,
                    "episode_id": episode_id,
                    "step_index": d.step_index,
                    "category": d.category,
                    "payload": d.payload,
                    "provenance": d.provenance,
                    "status": "dropped" if d.reason else "kept",
                    "reason": d.reason,
                }
                for d in drafts
            ]
            for d in drafts:
                if d.reason:
                    tally["dropped"][d.reason] += 1
                else:
                    tally["kept"][d.category] += 1
            insert_ignore(s, Sample, rows, ["uid"])
            _replace_template_answers(s, rows)
            record_exclusions(
                s,
                round_id,
                stage,
                "sample",
                (
                    (d.uid, d.reason, {"category": d.category, "step": d.step_index})
                    for d in drafts
                    if d.reason
                ),
            )
    return tally


def _replace_template_answers(s: Session, rows: list[dict[str, Any]]) -> None:
    """A sample stored with its template answer (written offline, or its model request failed)
    takes the model's answer once a run gets one; a model-written sample is never rewritten."""
    written = {r["uid"]: r for r in rows if "prompt_hash" in r["provenance"]}
    if not written:
        return
    for sample in s.scalars(select(Sample).where(Sample.uid.in_(written))):
        if "prompt_hash" not in (sample.provenance or {}):
            new = written[sample.uid]
            sample.payload, sample.provenance = new["payload"], new["provenance"]
            sample.status, sample.reason = new["status"], new["reason"]


CATEGORIES = (
    "progress_tracking",
    "state_summary",
    "effect_prediction",
    "self_reflection",
    "state_verification",
    "intent_execution",
    "action_prediction",
)

OUTCOME_STAGE = "outcome"  # exclusion stage of episodes no anchor or trusted critic decided
