"""Annotators' corrections (Mobile-R1) as training samples.

A step an annotator corrected becomes a `corrected_action` sample: the step's screen, the
task and history, and the corrected action (or the original action with the corrected
thought), with Mobile-R1's clear low-level instruction when the annotator wrote one. The
step's model-made action samples (`action_prediction`, `intent_execution`) are then dropped
as `superseded_by_human_correction` when the action itself was corrected. Corrections that
did not parse stay in the `correction` table with their `parse_error` and are counted here,
never turned into samples.
"""

from __future__ import annotations

import json
from collections import Counter

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from storage.db import record_exclusions, transaction
from storage.episodes import round_episodes
from storage.models import Correction, Episode, HumanAnnotation, Sample
from trajforge.actions import Screen
from trajforge.actions.compare import target_bbox
from trajforge.domain import Query, StepView, describe
from trajforge.sample import SampleDraft

CATEGORY = "corrected_action"
SUPERSEDED = "superseded_by_human_correction"
REPLACED = ("action_prediction", "intent_execution")


Batches = list[tuple[int, list[SampleDraft]]]  # (episode id, its samples), as store_drafts takes them


def correction_samples(sessions: sessionmaker[Session], round_id: int) -> tuple[Batches, Counter[str]]:
    """The round's corrected steps as samples, per episode; counts by outcome."""
    tally: Counter[str] = Counter()
    batches: Batches = []
    with sessions() as s:
        live = (
            select(Correction, HumanAnnotation.ls_annotation_id)
            .join(HumanAnnotation, HumanAnnotation.id == Correction.annotation_id)
            .join(Episode, Episode.id == Correction.episode_id)
            .where(HumanAnnotation.withdrawn.is_(False), Episode.round_id == round_id)
        )
        by_episode: dict[int, list[tuple[Correction, int]]] = {}
        for correction, ls_id in s.execute(live):
            by_episode.setdefault(correction.episode_id, []).append((correction, ls_id))
        if not by_episode:
            return batches, tally
        for episode, query, steps in round_episodes(s, round_id):
            if episode.id in by_episode:
                views = [st.view() for st in steps]
                done = [describe(v.act, v) if v.act else "(no action)" for v in views]
                drafts = [
                    draft
                    for correction, ls_id in by_episode[episode.id]
                    if (draft := _corrected(episode.uid, query, views, done, correction, ls_id, tally))
                    is not None
                ]
                batches.append((episode.id, drafts))
    return batches, tally


def _corrected(
    episode: str,
    query: Query,
    views: list[StepView],
    done: list[str],
    correction: Correction,
    ls_id: int,
    tally: Counter[str],
) -> SampleDraft | None:
    """The sample of one corrected step (`done`: the episode's steps in words); None, counted by
    why, when there is nothing to teach."""
    if correction.parse_error is not None:
        tally[correction.parse_error] += 1
        return None
    view = views[correction.step_index]
    original = view.act
    action = correction.action or (original.core() if original else None)
    if action is None:
        tally["no_action_to_explain"] += 1
        return None
    target = action.stored()
    thought = correction.thought or (original.thought if original else None)
    tally["action" if correction.action else "thought_or_instruction_only"] += 1
    payload = {
        "images": [view.before],
        "prompt": f"Task: {query.instruction}\nHistory: "
        + ("; ".join(done[: correction.step_index]) or "none"),
        "response": json.dumps(target, ensure_ascii=False),
        "action": target,
        "intent": correction.instruction or describe(action, view),  # the clear action
        "screen": [view.width, view.height],
        "bbox": target_bbox(action, view.elements, Screen(view.width, view.height)),
        **({"thought": thought} if thought else {}),
        **({"instruction": correction.instruction} if correction.instruction else {}),
    }
    provenance = {
        "episode": episode,
        "steps": [correction.step_index],
        "query": query.uid,
        "source": "human_correction",
        "annotator": correction.annotator,
        "annotation": ls_id,
        "corrected": [k for k in ("action", "thought", "instruction") if getattr(correction, k)],
        **({"given": correction.source} if correction.source else {}),
    }
    return SampleDraft(CATEGORY, correction.step_index, payload, provenance)


def supersede(sessions: sessionmaker[Session], round_id: int, batches: Batches) -> int:
    """Drop the model-made action samples of steps whose action a human corrected."""
    steps = sorted(
        {(e, d.step_index) for e, drafts in batches for d in drafts if "action" in d.provenance["corrected"]}
    )
    dropped = 0
    with transaction(sessions) as s:
        for episode_id, index in steps:
            rows = list(
                s.scalars(
                    select(Sample).where(
                        Sample.episode_id == episode_id,
                        Sample.step_index == index,
                        Sample.category.in_(REPLACED),
                        Sample.status == "kept",
                    )
                )
            )
            if not rows:
                continue
            s.execute(
                update(Sample)
                .where(Sample.id.in_([r.id for r in rows]))
                .values(status="dropped", reason=SUPERSEDED)
            )
            record_exclusions(
                s,
                round_id,
                "curate",
                "sample",
                ((r.uid, SUPERSEDED, {"category": r.category, "step": index}) for r in rows),
            )
            dropped += len(rows)
    return dropped
