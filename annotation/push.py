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
import html
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from annotation import config as cfg
from annotation.client import PREDICTIONS, Studio, project_key
from annotation.images import ImageLinks, image_mode
from critics.anchors import CONSENSUS
from critics.csrs import OUTCOME_STAGE
from critics.judge import SILENT
from storage.db import transaction
from storage.models import Anchor, AnnotationProject, AnnotationTask, Episode, Exclusion, Judgment, Step
from storage.models import Query as QueryRow
from storage.objectstore import ObjectStore, S3ObjectStore
from trajforge.actions import Action, ActionKind, Screen
from trajforge.actions.compare import target_element
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


def blind(candidate: Candidate, settings: AnnotationSettings) -> bool:
    """Whether the task hides the critics: every task under blind=all, else the pure audit sample."""
    return settings.blind == "all" or candidate.reasons == ["audit"]


@dataclass
class StepShown:
    """What the annotator sees of one step: the action in words, and its target element."""

    short: str  # under the filmstrip thumbnail
    text: str  # above the step's page
    box: list[int] | None  # the target element's pixel bounds, outlined on the screen


def show_step(st: Step, i: int, n: int) -> StepShown:
    if st.action is None:
        note = f"no action: {st.parse_error or 'none'}"
        return StepShown(note, f"Step {i + 1} of {n}: {note}", None)
    action = Action.model_validate(st.action)
    screen = Screen(st.width, st.height)
    element = target_element(action.point, st.elements or [], screen) if action.point is not None else None
    label = str(element.get("text") or element.get("id") or element.get("kind") or "") if element else ""
    what = action.kind.value
    if action.kind == ActionKind.SWIPE:
        (x, y), (ex, ey) = action.point or (0, 0), action.swipe_end()
        what = f"swipe from ({x}, {y}) to ({ex}, {ey}), the arrow points where the finger ends"
    elif action.text:
        what += f" {action.text!r}"
    elif action.key:
        what += f" {action.key}"
    elif action.status:
        what += f" {action.status}"
    short = f"{action.kind.value} {label!r}" if label else what.split(",")[0]
    lines = [f"Step {i + 1} of {n}: {what}", f"exact: {action.core().to_json()}"]
    box = None
    if element is not None:
        x1, y1, x2, y2 = element["bounds"]
        (a, b), (c, d) = screen.from_px(x1, y1), screen.from_px(x2, y2)
        kind = element.get("kind", "element")
        lines.append(f"target: {kind} {label!r}, box [{a}, {b}, {c}, {d}] per mille")
        box = [x1, y1, x2, y2]
    if action.thought:
        lines.append(f"thought: {action.thought}")
    return StepShown(short, "\n".join(lines), box)


def filmstrip(frames: list[tuple[str, str]], links: bool) -> str:
    """The whole trajectory in one row: (screen URL, caption) per step, then the final screen."""
    out = ['<div class="tf-strip">']
    for i, (url, caption) in enumerate(frames):
        number = str(i + 1) if i < len(frames) - 1 else "end"
        picture = f'<a href="{html.escape(url)}" target="_blank"><img src="{html.escape(url)}"/></a>'
        out.append(
            f"<figure>{picture if links else ''}"
            f"<figcaption><b>{number}</b> {html.escape(caption)}</figcaption></figure>"
        )
    out.append("</div>")
    return "".join(out)


def build_task(
    s: Session, candidate: Candidate, images: ImageLinks, hidden: bool = False
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The Label Studio task of one trajectory, and what it pre-fills (None when blind): the
    critics' verdicts as a prediction, unless `hidden` (a blind task shows no critic at all)."""
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
    frames: list[tuple[str, str]] = []
    prefill: dict[str, Any] = {"verdict": None, "steps": {}}
    result: list[dict[str, object]] = []
    for i, st in enumerate(steps):
        labels = step_judgments.get(st.id, {})
        shown = show_step(st, i, len(steps))
        text = shown.text
        if not hidden:
            judged = "; ".join(
                f"{k}: {j.label}" + (f" ({j.summary})" if j.summary else "") for k, j in labels.items()
            )
            text += f"\ncritics: {judged or 'none'}"
        before = images(st.screenshot, st.action, shown.box)
        after_sha = st.screenshot_after or (steps[i + 1].screenshot if i + 1 < len(steps) else None)
        after = images(after_sha) if after_sha else before
        task_steps.append({"image": before, "after": after, "text": text})
        frames.append((before, shown.short))
        preferred = sorted(labels.items(), key=lambda kv: (not kv[0].startswith("llm"), kv[0]))
        label = next((j.label for _, j in preferred if j.label in cfg.STEP_LABELS), None)
        if label is not None:
            result.append(cfg.choice(cfg.step_label(i), cfg.screen(i), label))
            prefill["steps"][str(i)] = label
    if steps:
        frames.append((task_steps[-1]["after"], "after the last action"))
    consensus = next((j for j in episode_judgments if (j.critic, j.critic_version) == CONSENSUS), None)
    if consensus is not None:
        result.insert(0, cfg.choice(cfg.VERDICT, cfg.INSTRUCTION, _verdict(consensus.label)))
        prefill["verdict"] = _verdict(consensus.label)
    decided = [j for j in episode_judgments if (j.critic, j.critic_version) != CONSENSUS]
    agreeing = sum(1 for j in decided if consensus is not None and j.label == consensus.label)
    score = consensus.score if consensus is not None and consensus.score is not None else None
    if score is None:
        score = agreeing / len(decided) if decided else 0.0
    verdicts = "hidden: blind audit" if hidden else " · ".join(critics_line)
    task: dict[str, Any] = {
        "data": {
            "instruction": query.instruction,
            "critics": f"Blind audit: the critics' verdicts are hidden. {len(steps)} steps."
            if hidden
            else " · ".join(critics_line) + f"\nqueued for: {', '.join(candidate.reasons)}",
            "filmstrip": filmstrip(frames, links=images.mode in ("upload", "presign")),
            "steps": task_steps,
            # flat columns for the task list
            "app": candidate.app,
            "reasons": ", ".join(candidate.reasons),
            "n_steps": len(steps),
            "verdicts": verdicts,
            "trajforge": {
                "episode": episode.uid,
                "round": episode.round_id,
                "app": candidate.app,
                "query": query.uid,
                "reasons": candidate.reasons,
            },
        }
    }
    if hidden:
        return task, None
    task["predictions"] = [{"model_version": PREDICTIONS, "score": round(score, 4), "result": result}]
    return task, prefill


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


def signature(s: Session, episode_ids: list[int]) -> dict[int, str]:
    """A digest per episode of its query, screens and actions: equal digests, identical trajectories."""
    parts: dict[int, list[Any]] = {}
    for e, q in s.execute(
        select(Episode.id, QueryRow.uid)
        .join(QueryRow, QueryRow.id == Episode.query_id)
        .where(Episode.id.in_(episode_ids))
    ):
        parts[e] = [q]
    for e, shot, after, action in s.execute(
        select(Step.episode_id, Step.screenshot, Step.screenshot_after, Step.action)
        .where(Step.episode_id.in_(episode_ids))
        .order_by(Step.episode_id, Step.index)
    ):
        parts[e].append([shot, after, action])
    return {e: hashlib.sha256(json.dumps(p, sort_keys=True).encode()).hexdigest() for e, p in parts.items()}


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
        keys = {c.episode_id: project_key(settings, c.app) for c in queue}
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
                duplicate_of=task.episode_id,
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
        built = [build_task(s, c, images, blind(c, settings)) for c, _ in batch]
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
