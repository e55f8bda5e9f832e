"""A training sample as the stages draft it, and how drafts are written.

CSRS extraction, curation (thoughts, recovery, corrections) and guidance all produce
`SampleDraft`s; `store_drafts` writes them idempotently (a sample's uid is what it asks),
kept or dropped, with an exclusion and its reason for every drop.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from storage.db import insert_ignore, record_exclusions, transaction
from storage.models import Sample


@dataclass
class SampleDraft:
    category: str
    step_index: int | None
    payload: dict[str, Any]
    provenance: dict[str, Any]
    reason: str | None = None  # set when the sample is dropped
    # what the template answer was derived from (outcome, step label, history, the screen after):
    # the anchor a model writing the answer is given and checked against; never stored
    context: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def uid(self) -> str:
        # identity is what is asked, not what was answered: a rewrite by a model keeps the uid
        asked: dict[str, Any] = {k: self.payload[k] for k in ("prompt", "images")}
        overrides = (self.provenance.get("anchor") or {}).get("overrides")
        if overrides:  # a human reversed the verifier: the answers differ, so do the identities
            asked["overrides"] = overrides
        key = json.dumps(
            [self.provenance["episode"], self.step_index, self.category, asked],
            sort_keys=True,
            ensure_ascii=False,
        )
        return hashlib.sha256(key.encode()).hexdigest()


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
