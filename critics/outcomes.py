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
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.anchors import anchors_by_episode, consensus_labels, episode_apps
from storage.models import Anchor, Episode, Step
from storage.models import Query as QueryRow
from trajforge.domain import backend_of, goal_key
from trajforge.settings import CriticSettings
from trajforge.verdicts import UNDECIDED, UNTRUSTED, Outcome


def deciding_anchor(anchors: Sequence[Anchor]) -> Anchor | None:
    """The anchor that decides an episode's outcome: a human's overrides the verifier's."""
    return next((a for a in anchors if a.source == "human"), anchors[0] if anchors else None)


def reversed_verifier(anchors: Sequence[Anchor], deciding: Anchor) -> str | None:
    """The verifier's label when the deciding anchor is a human who reversed it, else None."""
    verifier = next((a.label for a in anchors if a.source == "verifier"), None)
    return verifier if deciding.source == "human" and verifier not in (None, deciding.label) else None


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


def round_outcomes(
    sessions: sessionmaker[Session], round_id: int, settings: CriticSettings
) -> dict[int, Outcome]:
    """`decide_outcomes` in a session of its own: what curation is handed."""
    with sessions() as s:
        return decide_outcomes(s, round_id, settings)


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
