"""Push a round's review queue (see `annotation.queue`) to Label Studio.

A trajectory is never pushed twice: `annotation_task` is unique per episode, and tasks a
crashed push created in Label Studio are found again by their episode uid. Identical
trajectories are merged into one task; `--limit` is spent in priority order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from annotation.client import Studio, project_key
from annotation.images import ImageLinks, image_mode
from annotation.queue import Candidate, review_queue, signature
from annotation.tasks import blind, build_task
from storage.db import transaction
from storage.keys import BLOBS
from storage.models import AnnotationProject, AnnotationTask
from storage.objectstore import ObjectStore, S3ObjectStore
from trajforge.errors import AnnotationError
from trajforge.logs import counts
from trajforge.settings import AnnotationSettings, S3Settings

BATCH = 20  # tasks per import request


@dataclass
@dataclass
class PushReport:
    queued: Counter[str] = field(default_factory=Counter)  # by reason
    pushed: Counter[str] = field(default_factory=Counter)  # by project title
    already: int = 0
    merged: int = 0  # identical trajectories recorded under another episode's task
    recovered: int = 0  # tasks a crashed push had created, now recorded
    limited: int = 0

    def render(self) -> str:
        return (
            f"pushed {sum(self.pushed.values())} trajectories ({counts(self.pushed)}); "
            f"review queue by reason: {counts(self.queued)}; already pushed: {self.already}; "
            f"identical trajectories merged: {self.merged}; recovered: {self.recovered}; "
            f"left for later by --limit: {self.limited}"
        )


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
            prefix=BLOBS,
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
    """Push the round's review queue in priority order, `limit` tasks at most; idempotent (see
    the module docstring). An identical trajectory (same query, screens and actions) is merged
    into the task of the first one, so a human judges it once; projects are created only for
    tasks that are pushed."""
    studio = studio or Studio(settings)
    image_mode(settings, store)  # a mode the store cannot serve fails before anything is written
    report = PushReport()
    with transaction(sessions) as s:
        queue = review_queue(s, round_id, settings)
        report.queued.update(r for c in queue for r in c.reasons)
        keys = {c.episode_id: project_key(settings, c.app, "audit_published" in c.reasons) for c in queue}
        for project in s.scalars(
            select(AnnotationProject).where(AnnotationProject.key.in_({k for k, _ in keys.values()}))
        ):
            if studio.project_exists(project.ls_project_id):
                round_of = {c.uid: (c.episode_id, round_id) for c in queue}
                report.recovered += _recover(s, studio, project, round_of)
        recorded = {
            t.episode_id: t
            for t in s.scalars(
                select(AnnotationTask).where(AnnotationTask.episode_id.in_([c.episode_id for c in queue]))
            )
        }
        fresh = _group_twins(s, queue, recorded, report)
        report.already = sum(1 for c in queue if c.episode_id in recorded)
    fresh.sort(key=lambda pair: queue.index(pair[0]))
    take = fresh if limit is None else fresh[:limit]
    report.limited = len(fresh) - len(take)
    by_project: dict[tuple[str, str], list[tuple[Candidate, list[Candidate]]]] = {}
    for pair in take:
        by_project.setdefault(keys[pair[0].episode_id], []).append(pair)
    for key, pairs in by_project.items():
        with transaction(sessions) as s:
            project = studio.ensure_project(s, *key)
        images = ImageLinks(store, settings, upload=studio.upload)
        if images.mode == "storage":
            assert isinstance(store, S3ObjectStore)
            _connect_storage(studio, project, store, s3)
        for start in range(0, len(pairs), BATCH):
            batch = pairs[start : start + BATCH]
            _push_batch(sessions, studio, project, round_id, batch, images, settings, report)
            report.pushed[key[1]] += len(batch)
    return report


def _group_twins(
    s: Session, queue: list[Candidate], recorded: dict[int, AnnotationTask], report: PushReport
) -> list[tuple[Candidate, list[Candidate]]]:
    """The queue's identical trajectories grouped (same query, screens and actions): those of a
    task pushed before are merged into it; the rest are returned as (task, its twins)."""
    digests = signature(s, [c.episode_id for c in queue])
    groups: dict[str, list[Candidate]] = {}
    for c in queue:  # in priority order: a group's first member is its task
        groups.setdefault(digests[c.episode_id], []).append(c)
    fresh: list[tuple[Candidate, list[Candidate]]] = []
    for members in groups.values():
        primary = next((c for c in members if c.episode_id in recorded), members[0])
        twins = [c for c in members if c is not primary and c.episode_id not in recorded]
        if primary.episode_id in recorded:
            _merge(s, recorded[primary.episode_id], twins, report)
        else:
            fresh.append((primary, twins))
    return fresh


def _merge(s: Session, task: AnnotationTask, twins: list[Candidate], report: PushReport) -> None:
    """Record identical trajectories as covered by `task`: its verdict will stand for them too."""
    for twin in twins:
        s.add(
            AnnotationTask(
                episode_id=twin.episode_id,
                round_id=task.round_id,
                project_id=task.project_id,
                ls_task_id=task.ls_task_id,
                reasons=twin.reasons,
                blind=task.blind,
                prefill=task.prefill,
                duplicate_of=task.duplicate_of or task.episode_id,  # the root, never a copy
            )
        )
        report.merged += 1
    s.flush()


def _push_batch(
    sessions: sessionmaker[Session],
    studio: Studio,
    project: AnnotationProject,
    round_id: int,
    batch: Sequence[tuple[Candidate, list[Candidate]]],
    images: ImageLinks,
    settings: AnnotationSettings,
    report: PushReport,
) -> None:
    with sessions() as s:
        built = images.resolve([build_task(s, c, images, blind(c, settings)) for c, _ in batch])
    request = cast(Any, [task for task, _ in built])  # the SDK types each task as ImportApiRequest
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
        for i, (c, twins) in enumerate(batch):
            prefill, task_id = built[i][1], task_ids[i]
            task = AnnotationTask(
                episode_id=c.episode_id,
                round_id=round_id,
                project_id=project.id,
                ls_task_id=int(task_id),
                reasons=c.reasons,
                blind=prefill is None,
                prefill=prefill,
            )
            s.add(task)
            _merge(s, task, twins, report)
