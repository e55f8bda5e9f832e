"""The learned critic over a round: fitted on the anchors so far, judged out of sample, stored.

Training data are the anchored episodes (a human's verdict, else the verifier's) of this round
and earlier. Each episode of the round is judged by a model fitted without any episode of its
query (`critics.learned.cross_judge`); the model fitted on them all is the round's checkpoint,
stored in the object store under its content hash and named in `round.stats["learned_critic"]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from critics.episode_features import features
from critics.learned import NAME, SUCCESS_AT, Checkpoint, Prediction, TrainRow, cross_judge, fit_all
from critics.prior import with_prior
from critics.view import critic_view
from storage.anchors import anchors_by_episode, deciding_anchor
from storage.episodes import steps_by_episode
from storage.keys import critic_checkpoint_key
from storage.models import Episode, Round
from storage.models import Query as QueryRow
from storage.objectstore import ObjectStore
from trajforge.metrics import ChannelStats


@dataclass(frozen=True)
class Seen:
    episode_id: int
    round_id: int
    query: str  # the query's uid: the unit of out-of-sample folds
    features: list[float]
    app: str = ""


def seen_episodes(s: Session, *where: Any) -> list[Seen]:
    """Features of the episodes `where` selects (conditions on `Episode`), from their critic views."""
    rows = s.execute(
        select(Episode.id, Episode.round_id, QueryRow.uid, QueryRow.instruction, QueryRow.goal)
        .join(QueryRow, QueryRow.id == Episode.query_id)
        .where(*where)
        .order_by(Episode.id)
    ).all()
    steps = steps_by_episode(s, *where)
    return [
        Seen(eid, rid, uid, features(critic_view(instruction, steps.get(eid, []))), str(goal.get("app", "")))
        for eid, rid, uid, instruction, goal in rows
    ]


def anchored_truth(s: Session, up_to: Any) -> dict[int, bool]:
    """The deciding anchor's verdict (success?) of every anchored episode `up_to` selects."""
    return {
        episode_id: decided.label == "success"
        for episode_id, found in anchors_by_episode(s, up_to).items()
        if (decided := deciding_anchor(found)) is not None
    }


def training_rows(seen: Sequence[Seen], truth: dict[int, bool]) -> list[TrainRow]:
    """A training row of every episode in `seen` that `truth` (the deciding anchors' verdicts) decides."""
    return [TrainRow(e.query, e.app, e.features, truth[e.episode_id]) for e in seen if e.episode_id in truth]


def anchored_training(s: Session, seen: Sequence[Seen], up_to: Any) -> list[TrainRow]:
    """A training row of every episode in `seen` an anchor decides."""
    return training_rows(seen, anchored_truth(s, up_to))


def leave_one_app_out(
    s: Session, round_id: int, every_round: bool = False, seen: Sequence[Seen] | None = None
) -> dict[str, dict[str, Any]]:
    """Per app: the learned critic fitted on the anchored episodes of the *other* apps (this round and
    earlier), scored on this app's anchored episodes of this round (of every round so far with
    `every_round`): how it judges an app it has never seen. `seen`: the episodes' features when
    the caller already has them (of these rounds), else they are read."""
    up_to = Episode.round_id <= round_id
    if seen is None:
        seen = seen_episodes(s, up_to)
    truth = anchored_truth(s, up_to)
    anchored = [e for e in seen if e.episode_id in truth]
    out: dict[str, dict[str, Any]] = {}
    for app in sorted({e.app for e in anchored}):
        mine = [e for e in anchored if e.app == app and (every_round or e.round_id == round_id)]
        others = training_rows([e for e in anchored if e.app != app], truth)
        model = fit_all(with_prior(others, leave_out=app))  # the app's own correction: none
        if model is None or not mine:
            continue
        stats = ChannelStats()
        for e, p in zip(mine, model.prob(np.array([e.features for e in mine]), app), strict=True):
            stats.add(bool(p >= SUCCESS_AT), truth[e.episode_id])
        out[app] = {**stats.summary(), "trained_on": model.trained_on}
    return out


def learned_round(s: Session, round_id: int, store: ObjectStore | None) -> dict[int, Prediction]:
    """Out-of-sample verdicts on the round's episodes, by episode id; stores the round's checkpoint."""
    up_to = Episode.round_id <= round_id
    seen = seen_episodes(s, up_to)
    train = with_prior(anchored_training(s, seen, up_to))
    mine = [e for e in seen if e.round_id == round_id]
    predictions = cross_judge(train, [(e.query, e.app, e.features) for e in mine])
    checkpoint = fit_all(train)
    rnd = s.get(Round, round_id)
    if rnd is not None:
        stats = dict(rnd.stats or {})
        own = sum(r.query is not None for r in train)
        stats["learned_critic"] = _record(checkpoint, store, own) | {"prior": len(train) - own}
        rnd.stats = stats
    return {e.episode_id: p for e, p in zip(mine, predictions, strict=True)}


def _record(checkpoint: Checkpoint | None, store: ObjectStore | None, anchored: int) -> dict[str, Any]:
    if checkpoint is None:
        return {"version": None, "anchored": anchored, "why": "too few anchored episodes of both outcomes"}
    key = critic_checkpoint_key(NAME, checkpoint.version)
    if store is not None and not store.exists(key):
        store.put(key, checkpoint.to_json(), "application/json")
    return {
        "version": checkpoint.version,
        "key": key if store is not None else None,
        "anchored": checkpoint.trained_on,
        "positives": checkpoint.positives,
    }
