"""Push a round's uncertain trajectories (plus an audit sample) to Label Studio.

The review queue is what CSRS sends to humans: trajectory channels that disagree, a
consensus that disagrees with the verifier, verdicts that did not parse, and verdicts
scored below `annotate.low_confidence`. A seeded random share of the other episodes
(`annotate.audit_fraction`) is pushed too, so calibration is measured beyond hard cases.
A trajectory is never pushed twice: `annotation_task` is unique per episode, and tasks a
crashed push created in Label Studio are found again by their episode uid.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from annotation import config as cfg
from annotation.client import PREDICTIONS, Studio, project_key
from annotation.images import ImageLinks
from critics.anchors import CONSENSUS
from critics.csrs import OUTCOME_STAGE
from critics.judge import SILENT
from storage.db import transaction
from storage.models import Anchor, AnnotationProject, AnnotationTask, Episode, Exclusion, Judgment, Step
from storage.models import Query as QueryRow
from storage.objectstore import ObjectStore, S3ObjectStore
from trajforge.actions import Action
from trajforge.errors import AnnotationError
from trajforge.logs import counts
from trajforge.settings import AnnotationSettings, S3Settings

# why an episode needs a human, most urgent first; no_outcome: no anchor and no trusted critic decided it
REASONS = (
    "no_outcome",
    "verifier_disagreement",
    "channel_disagreement",
    "unparsed",
    "low_confidence",
    "audit",
)
BATCH = 20  # tasks per import request: each carries its screenshots


@dataclass
class Candidate:
    episode_id: int
    uid: str
    app: str
    reasons: list[str]


@dataclass
class PushReport:
    queued: Counter[str] = field(default_factory=Counter)  # by reason
    pushed: Counter[str] = field(default_factory=Counter)  # by project title
    already: int = 0
    recovered: int = 0  # tasks a crashed push had created, now recorded
    limited: int = 0

    def render(self) -> str:
        return (
            f"pushed {sum(self.pushed.values())} trajectories ({counts(self.pushed)}); "
            f"review queue by reason: {counts(self.queued)}; already pushed: {self.already}; "
            f"recovered: {self.recovered}; "
            f"left for later by --limit: {self.limited}"
        )


def _audited(uid: str, seed: int, fraction: float) -> bool:
    digest = hashlib.sha256(f"{seed}:{uid}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def review_queue(s: Session, round_id: int, settings: AnnotationSettings) -> list[Candidate]:
    """Every episode of the round that needs a human, with why; hardest reasons first."""
    out = []
    consensus = ":".join(CONSENSUS)
    rows = s.execute(
        select(Episode.id, Episode.uid, QueryRow.goal)
        .join(QueryRow, QueryRow.id == Episode.query_id)
        .where(Episode.round_id == round_id, Episode.status == "done")
        .order_by(Episode.id)
    ).all()
    in_round = select(Episode.id).where(Episode.round_id == round_id).scalar_subquery()
    judgments: dict[int, dict[str, Judgment]] = {}
    for j in s.scalars(
        select(Judgment).where(Judgment.target == "episode", Judgment.target_id.in_(in_round))
    ):
        judgments.setdefault(j.target_id, {})[f"{j.critic}:{j.critic_version}"] = j
    verifiers = dict(
        s.execute(
            select(Anchor.episode_id, Anchor.label).where(
                Anchor.source == "verifier", Anchor.episode_id.in_(in_round)
            )
        ).all()
    )
    undecided = set(
        s.scalars(
            select(Exclusion.item_key).where(
                Exclusion.round_id == round_id,
                Exclusion.stage == OUTCOME_STAGE,
                Exclusion.item_type == "episode",
            )
        )
    )
    for episode_id, uid, goal in rows:
        judged = judgments.get(episode_id, {})
        verifier = verifiers.get(episode_id)
        reasons = ["no_outcome"] if uid in undecided else []
        agreed = judged.get(consensus)
        if (
            verifier is not None
            and agreed is not None
            and (agreed.label == "correct") != (verifier == "success")
        ):
            reasons.append("verifier_disagreement")
        channels = {
            j.label for k, j in judged.items() if k != consensus and j.label not in ("unparsed", *SILENT)
        }
        if len(channels) > 1:
            reasons.append("channel_disagreement")
        if any(j.label == "unparsed" for j in judged.values()):
            reasons.append("unparsed")
        if any(j.score is not None and j.score < settings.low_confidence for j in judged.values()):
            reasons.append("low_confidence")
        if not reasons and judged and _audited(uid, settings.seed, settings.audit_fraction):
            reasons.append("audit")
        if reasons:
            out.append(Candidate(episode_id, uid, str(goal.get("app", "")), reasons))
    out.sort(key=lambda c: (min(REASONS.index(r) for r in c.reasons), c.episode_id))
    return out


def _verdict(label: str) -> str:
    return {"correct": "success", "incorrect": "failure"}.get(label, "unsure")


def _action_text(action: dict[str, Any] | None, parse_error: str | None) -> str:
    if action is None:
        return f"(no action: {parse_error or 'none'})"
    parsed = Action.model_validate(action)
    core = parsed.core().to_json()
    return f"action {core}" + (f"\nthought: {parsed.thought}" if parsed.thought else "")


def build_task(s: Session, candidate: Candidate, images: ImageLinks) -> dict[str, Any]:
    """The Label Studio task of one trajectory, with the critics' verdicts as a prediction."""
    episode = s.get(Episode, candidate.episode_id)
    assert episode is not None
    query = s.get(QueryRow, episode.query_id)
    assert query is not None
    steps = list(s.scalars(select(Step).where(Step.episode_id == episode.id).order_by(Step.index)))
    episode_judgments = list(
        s.scalars(select(Judgment).where(Judgment.target == "episode", Judgment.target_id == episode.id))
    )
    step_judgments: dict[int, dict[str, Judgment]] = {}
    for j in s.scalars(
        select(Judgment).where(Judgment.target == "step", Judgment.target_id.in_([st.id for st in steps]))
    ):
        step_judgments.setdefault(j.target_id, {})[f"{j.critic}:{j.critic_version}"] = j
    anchors = {a.source: a.label for a in s.scalars(select(Anchor).where(Anchor.episode_id == episode.id))}

    critics_line = [f"{j.critic}:{j.critic_version} = {_verdict(j.label)}" for j in episode_judgments]
    if "verifier" in anchors:
        critics_line.insert(0, f"verifier = {anchors['verifier']}")
    task_steps = []
    result: list[dict[str, object]] = []
    for i, st in enumerate(steps):
        labels = step_judgments.get(st.id, {})
        judged = "; ".join(
            f"{k}: {j.label}" + (f" ({j.summary})" if j.summary else "") for k, j in labels.items()
        )
        task_steps.append(
            {
                "image": images(st.screenshot, st.action),
                "text": f"Step {i + 1}: {_action_text(st.action, st.parse_error)}\n"
                f"critics: {judged or 'none'}",
            }
        )
        preferred = sorted(labels.items(), key=lambda kv: (not kv[0].startswith("llm"), kv[0]))
        label = next((j.label for _, j in preferred if j.label in cfg.STEP_LABELS), None)
        if label is not None:
            result.append(cfg.choice(cfg.step_label(i), cfg.screen(i), label))
    consensus = next((j for j in episode_judgments if (j.critic, j.critic_version) == CONSENSUS), None)
    if consensus is not None:
        result.insert(0, cfg.choice(cfg.VERDICT, cfg.INSTRUCTION, _verdict(consensus.label)))
    decided = [j for j in episode_judgments if (j.critic, j.critic_version) != CONSENSUS]
    agreeing = sum(1 for j in decided if consensus is not None and j.label == consensus.label)
    score = consensus.score if consensus is not None and consensus.score is not None else None
    if score is None:
        score = agreeing / len(decided) if decided else 0.0
    return {
        "data": {
            "instruction": query.instruction,
            "critics": " · ".join(critics_line) + f"\nqueued for: {', '.join(candidate.reasons)}",
            "steps": task_steps,
            "trajforge": {
                "episode": episode.uid,
                "round": episode.round_id,
                "app": candidate.app,
                "query": query.uid,
                "reasons": candidate.reasons,
            },
        },
        "predictions": [{"model_version": PREDICTIONS, "score": round(score, 4), "result": result}],
    }


def _connect_storage(
    studio: Studio, project: AnnotationProject, store: S3ObjectStore, s3: S3Settings
) -> None:
    """An S3 source storage on the project, so Label Studio resolves the tasks' s3:// URIs itself."""
    existing = studio.call(
        "list storage connections", lambda: studio.ls.import_storage.s3.list(project=project.ls_project_id)
    )
    if any(getattr(c, "bucket", None) == store.bucket for c in existing):
        return
    scheme = "https" if s3.secure else "http"
    endpoint = studio.settings.storage_endpoint or f"{scheme}://{s3.endpoint}"
    studio.call(
        "connect the project to the S3 store",
        lambda: studio.ls.import_storage.s3.create(
            project=project.ls_project_id,
            title="trajforge screenshots",
            bucket=store.bucket,
            prefix="blobs/",
            s3endpoint=endpoint,
            aws_access_key_id=s3.access_key.get_secret_value(),
            aws_secret_access_key=s3.secret_key.get_secret_value(),
            region_name=s3.region or "us-east-1",
            presign=True,
            presign_ttl=60,
            use_blob_urls=False,
            recursive_scan=False,
        ),
    )


def _recover(
    s: Session, studio: Studio, project: AnnotationProject, round_of: dict[str, tuple[int, int]]
) -> int:
    """Record tasks that exist in Label Studio but not here (a push that crashed mid-way)."""
    known = set(s.scalars(select(AnnotationTask.ls_task_id).where(AnnotationTask.project_id == project.id)))
    recovered = 0
    for task in studio.tasks(project.ls_project_id):
        meta = (task.data or {}).get("trajforge") or {}
        found = round_of.get(str(meta.get("episode")))
        if task.id in known or found is None:
            continue
        episode_id, round_id = found
        if s.scalar(select(AnnotationTask.id).where(AnnotationTask.episode_id == episode_id)) is None:
            s.add(
                AnnotationTask(
                    episode_id=episode_id,
                    round_id=round_id,
                    project_id=project.id,
                    ls_task_id=int(task.id),
                    reasons=list(meta.get("reasons") or []),
                )
            )
            recovered += 1
    s.flush()
    return recovered


def push_round(
    sessions: sessionmaker[Session],
    round_id: int,
    store: ObjectStore,
    settings: AnnotationSettings,
    s3: S3Settings,
    limit: int | None = None,
    studio: Studio | None = None,
) -> PushReport:
    """Push the round's review queue; idempotent (see the module docstring)."""
    studio = studio or Studio(settings)
    images = ImageLinks(store, settings)
    report = PushReport()
    with transaction(sessions) as s:
        queue = review_queue(s, round_id, settings)
        report.queued.update(r for c in queue for r in c.reasons)
        by_project: dict[tuple[str, str], list[Candidate]] = {}
        for c in queue:
            by_project.setdefault(project_key(settings, c.app), []).append(c)
        projects = {key: studio.ensure_project(s, *key) for key in by_project}
        if images.mode == "storage":
            assert isinstance(store, S3ObjectStore)
            for project in projects.values():
                _connect_storage(studio, project, store, s3)
        round_of = {c.uid: (c.episode_id, round_id) for c in queue}
        for project in projects.values():
            report.recovered += _recover(s, studio, project, round_of)
    budget = limit if limit is not None else len(queue)
    for key, candidates in by_project.items():
        project_id = projects[key].id
        with sessions() as s:
            pushed = set(
                s.scalars(
                    select(AnnotationTask.episode_id).where(
                        AnnotationTask.episode_id.in_([c.episode_id for c in candidates])
                    )
                )
            )
        fresh = [c for c in candidates if c.episode_id not in pushed]
        report.already += len(candidates) - len(fresh)
        take, budget = fresh[:budget], budget - min(budget, len(fresh))
        report.limited += len(fresh) - len(take)
        for start in range(0, len(take), BATCH):
            _push_batch(
                sessions, studio, projects[key], project_id, round_id, take[start : start + BATCH], images
            )
            report.pushed[key[1]] += len(take[start : start + BATCH])
    return report


def _push_batch(
    sessions: sessionmaker[Session],
    studio: Studio,
    project: AnnotationProject,
    project_id: int,
    round_id: int,
    batch: Sequence[Candidate],
    images: ImageLinks,
) -> None:
    with sessions() as s:
        tasks = [build_task(s, c, images) for c in batch]
    request = cast(Any, tasks)  # the SDK types each task as ImportApiRequest; plain dicts are what it sends
    answer = studio.call(
        "import tasks",
        lambda: studio.ls.projects.import_tasks(
            id=project.ls_project_id, request=request, return_task_ids=True
        ),
    )
    task_ids = list(getattr(answer, "task_ids", None) or [])
    if len(task_ids) != len(batch):
        raise AnnotationError(
            f"Label Studio created {len(task_ids)} tasks for {len(batch)} sent; rerun "
            "`trajforge annotate push`, which records the tasks it finds by episode uid"
        )
    with transaction(sessions) as s:
        for c, task_id in zip(batch, task_ids, strict=True):
            s.add(
                AnnotationTask(
                    episode_id=c.episode_id,
                    round_id=round_id,
                    project_id=project_id,
                    ls_task_id=int(task_id),
                    reasons=c.reasons,
                )
            )
