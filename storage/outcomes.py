"""Where an episode's outcome comes from: an anchor, or the calibrated critics (CSRS used for real).

An anchor is a human's verdict, else the verifier's. Where a farm has no verifier (GUI-Owl's
setting, any real Android app) the offline critics' consensus decides, but only for an app
whose consensus has measured at least `trust_accuracy` on the app's anchored episodes of
this and earlier rounds (at least `trust_min_anchored` of them). Every other episode stays
undecided and goes to the human review queue. `critics.outcome` picks the rule:

- `anchor`: anchors only;
- `critic`: the trusted consensus decides every episode a human has not judged, and the
  verifier only calibrates it;
- `anchor_else_critic` (default): an anchor where there is one, else the trusted consensus.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from storage.anchors import (
    anchors_by_episode,
    consensus_labels,
    deciding_anchor,
    episode_apps,
    reversed_verifier,
)
from storage.models import Episode
from trajforge.settings import CriticSettings

UNTRUSTED = "critic_untrusted"  # no anchor, and the app's consensus is not (yet) trusted
UNDECIDED = "critic_undecided"  # no anchor, and every critic channel abstained


@dataclass(frozen=True)
class Outcome:
    success: bool | None  # None: nobody may decide it; a human must
    source: str  # verifier | human | critic | UNTRUSTED | UNDECIDED | "none"
    accuracy: float | None = None  # the consensus's measured accuracy, when the critic decided
    anchored: int = 0  # the anchored episodes that accuracy was measured on
    overrides: str | None = None  # the verifier's label a human reversed

    def provenance(self) -> dict[str, Any]:
        """What a sample records about its outcome (`provenance.anchor`)."""
        out: dict[str, Any] = {"source": self.source, "label": "success" if self.success else "failure"}
        if self.accuracy is not None:
            out.update(accuracy=round(self.accuracy, 4), anchored=self.anchored)
        if self.overrides is not None:
            out["overrides"] = self.overrides
        return out


@dataclass(frozen=True)
class Trust:
    correct: int
    anchored: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.anchored if self.anchored else 0.0


def measure_trust(s: Session, round_id: int) -> dict[str, Trust]:
    """Per app: the consensus against the deciding anchor on anchored episodes up to this round."""
    up_to = Episode.round_id <= round_id
    consensus = consensus_labels(s, up_to)
    apps = episode_apps(s, up_to)
    right: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for episode_id, found in anchors_by_episode(s, up_to).items():
        decided = deciding_anchor(found)
        if decided is None or consensus.get(episode_id) not in ("correct", "incorrect"):
            continue
        total[apps[episode_id]] += 1
        right[apps[episode_id]] += (consensus[episode_id] == "correct") == (decided.label == "success")
    return {app: Trust(right[app], n) for app, n in total.items()}


def decide_outcomes(s: Session, round_id: int, settings: CriticSettings) -> dict[int, Outcome]:
    """The outcome of every episode of the round, with where it came from."""
    trust = measure_trust(s, round_id) if settings.outcome != "anchor" else {}
    in_round = Episode.round_id == round_id
    app_of = episode_apps(s, in_round)
    anchors = anchors_by_episode(s, in_round)
    consensus = consensus_labels(s, in_round)
    out = {}
    for episode_id, app in app_of.items():
        found = anchors.get(episode_id, [])
        deciding = deciding_anchor(found)
        if deciding is not None and (settings.outcome != "critic" or deciding.source == "human"):
            overrides = reversed_verifier(found, deciding)
            out[episode_id] = Outcome(deciding.label == "success", deciding.source, overrides=overrides)
            continue
        if settings.outcome == "anchor":
            out[episode_id] = Outcome(None, "none")
            continue
        label = consensus.get(episode_id)
        measured = trust.get(app, Trust(0, 0))
        if label not in ("correct", "incorrect"):
            out[episode_id] = Outcome(None, UNDECIDED)
        elif measured.anchored < settings.trust_min_anchored or measured.accuracy < settings.trust_accuracy:
            out[episode_id] = Outcome(None, UNTRUSTED, measured.accuracy, measured.anchored)
        else:
            out[episode_id] = Outcome(label == "correct", "critic", measured.accuracy, measured.anchored)
    return out
