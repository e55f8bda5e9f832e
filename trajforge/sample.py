"""A training sample as the stages draft it, before it is stored.

CSRS extraction, curation (thoughts, recovery, corrections) and guidance all produce
`SampleDraft`s; `storage.samples.store_drafts` writes them. A sample's identity is what it asks
(its prompt and images), not what it answers, so a model's rewrite of the answer keeps its uid.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trajforge.actions.model import Action


def said(action: Action) -> dict[str, str]:
    """The policy's own notes with an action (its thought, its conclusion): a sample keeps them as
    `said`, and an export answers with them (`publish.export_rows.answer_notes`)."""
    return {note: value for note in ("thought", "intent") if (value := getattr(action, note))}


def target_action(target: Mapping[str, Any]) -> Action:
    """A sample's target action, read back from its stored JSON (the payload's `action`, an exported
    row's ground truth, a knn memory row made from one). The one place such a target is parsed."""
    return Action.model_validate(target)


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
