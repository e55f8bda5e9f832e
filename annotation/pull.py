"""Pull annotations back from Label Studio as human anchors and corrections.

Each pull compares Label Studio with what was pulled before: new and updated annotations
are stored, annotations and tasks deleted there are withdrawn here, skips are kept as
skips (no verdict). Per episode, the verdicts of its annotations resolve to one human
anchor by `annotate.resolve`; the anchor overrides the verifier's (see
`critics.outcomes.deciding_anchor`). Corrected actions are parsed with every known codec;
one that parses nowhere is kept with `parse_error`, never dropped silently.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from annotation.client import Studio
from annotation.results import Parsed, clicked_action, independence, parse_correction, parse_result
from storage.base import as_utc
from storage.db import transaction
from storage.models import Anchor, AnnotationProject, AnnotationTask, Correction, HumanAnnotation, Step
from trajforge.actions import Screen
from trajforge.errors import AnnotationError
from trajforge.logs import counts, redact
from trajforge.settings import AnnotationSettings


@dataclass
class PullReport:
    annotations: Counter[str] = field(default_factory=Counter)  # new, updated, unchanged, withdrawn, skipped
    tasks_deleted: int = 0
    anchors: Counter[str] = field(default_factory=Counter)  # set, changed, removed, unchanged
    unresolved: Counter[str] = field(default_factory=Counter)  # by reason
    corrections: Counter[str] = field(default_factory=Counter)  # parsed, unparseable
    ignored: Counter[str] = field(default_factory=Counter)

    def render(self) -> str:
        return "\n".join(
            [
                f"annotations: {counts(self.annotations)}; "
                f"tasks deleted in Label Studio: {self.tasks_deleted}",
                f"human anchors: {counts(self.anchors)}; unresolved episodes: {counts(self.unresolved)}",
                f"corrections: {counts(self.corrections)}; result items ignored: {counts(self.ignored)}",
            ]
        )


def resolve(votes: list[tuple[str, str, datetime]], rule: str) -> tuple[str | None, str]:
    """One verdict from (annotator, verdict, time) votes: (label, "") or (None, why not)."""
    if not votes:
        return None, "no_verdict"
    if rule == "latest":
        label = max(votes, key=lambda v: v[2])[1]
        return (label, "") if label != "unsure" else (None, "unsure")
    decisive = Counter(v for _, v, _ in votes if v != "unsure")
    if not decisive:
        return None, "unsure"
    if rule == "unanimous":
        return (next(iter(decisive)), "") if len(decisive) == 1 else (None, "disagreement")
    (top, n), *rest = decisive.most_common()
    if rest and rest[0][1] == n:
        return None, "tie"
    return top, ""


def _when(annotation: dict[str, Any]) -> datetime:
    stamp = annotation.get("updated_at") or annotation.get("created_at")
    return as_utc(datetime.fromisoformat(str(stamp))) if stamp else datetime.now(UTC)


def pull(
    sessions: sessionmaker[Session], settings: AnnotationSettings, studio: Studio | None = None
) -> PullReport:
    """Bring every project's annotations up to date here (see the module docstring)."""
    studio = studio or Studio(settings)
    report = PullReport()
    with sessions() as s:
        projects = list(s.scalars(select(AnnotationProject)))
    _require_projects(studio, projects, settings)
    for project in projects:
        with transaction(sessions) as s:
            touched = _pull_project(s, studio, project, report)
            twins = s.execute(
                select(AnnotationTask.episode_id, AnnotationTask.duplicate_of).where(
                    AnnotationTask.duplicate_of.in_(touched)
                )
            ).all()
            for episode_id in sorted(touched):
                _anchor(s, episode_id, episode_id, settings.resolve, report)
            for episode_id, primary in twins:  # an identical trajectory takes its task's verdict
                _anchor(s, episode_id, primary or episode_id, settings.resolve, report)
    return report


def _require_projects(
    studio: Studio, projects: list[AnnotationProject], settings: AnnotationSettings
) -> None:
    """Every project pushed from here must answer before anything changes: a project the server does
    not know means another instance or organisation, not that its tasks were deleted."""
    missing = [p for p in projects if not studio.project_exists(p.ls_project_id)]
    if missing:
        named = ", ".join(f"{p.ls_project_id} ({p.title})" for p in missing)
        raise AnnotationError(
            f"Label Studio at {redact(settings.url)} has no project {named}, which this home pushed to; "
            "annotate.url or the access token points at another instance or organisation: set them to "
            "the one the tasks were pushed to and pull again (nothing was changed)"
        )


def _pull_project(s: Session, studio: Studio, project: AnnotationProject, report: PullReport) -> set[int]:
    ours = {
        t.ls_task_id: t
        for t in s.scalars(
            select(AnnotationTask).where(
                AnnotationTask.project_id == project.id,
                AnnotationTask.status == "pushed",
                AnnotationTask.duplicate_of.is_(None),
            )
        )
    }
    live = {int(t.id): t for t in studio.tasks(project.ls_project_id)}
    touched: set[int] = set()
    for ls_id, task in ours.items():
        if ls_id not in live:  # deleted in Label Studio: what it said no longer stands
            task.status = "deleted"
            report.tasks_deleted += 1
            touched.add(task.episode_id)
            _withdraw(s, select(HumanAnnotation).where(HumanAnnotation.task_id == task.id), report)
            continue
        seen = []
        for annotation in live[ls_id].annotations or []:
            annotation = dict(annotation)
            seen.append(int(annotation["id"]))
            if _store(s, studio, task, annotation, report):
                touched.add(task.episode_id)
        gone = select(HumanAnnotation).where(
            HumanAnnotation.task_id == task.id, HumanAnnotation.ls_annotation_id.not_in(seen)
        )
        if _withdraw(s, gone, report):
            touched.add(task.episode_id)
    return touched


def _withdraw(s: Session, query: Any, report: PullReport) -> int:
    n = 0
    for row in s.scalars(query):
        if not row.withdrawn:
            row.withdrawn = True
            s.execute(delete(Correction).where(Correction.annotation_id == row.id))
            report.annotations["withdrawn"] += 1
            n += 1
    return n


def _store(
    s: Session, studio: Studio, task: AnnotationTask, annotation: dict[str, Any], report: PullReport
) -> bool:
    """Insert or update one annotation; True when anything changed."""
    when = _when(annotation)
    row = s.scalar(select(HumanAnnotation).where(HumanAnnotation.ls_annotation_id == int(annotation["id"])))
    if row is not None and not row.withdrawn and as_utc(row.ls_updated_at) == when:
        report.annotations["unchanged"] += 1
        return False
    skipped = bool(annotation.get("was_cancelled"))
    parsed = parse_result([] if skipped else annotation.get("result") or [])
    report.ignored.update(parsed.ignored)
    independent = independence(parsed, task.prefill)
    if independent.accepted_as_is:
        report.annotations["accepted_as_is"] += 1
    fields = {
        "annotator": studio.annotator(annotation.get("completed_by")),
        "verdict": parsed.verdict,
        "step_labels": parsed.step_labels,
        "independent_verdict": independent.verdict,
        "independent_steps": independent.steps,
        "accepted_as_is": independent.accepted_as_is,
        "first_wrong_step": parsed.first_wrong_step,
        "skipped": skipped,
        "withdrawn": False,
        "lead_time_s": annotation.get("lead_time"),
        "ls_updated_at": when,
    }
    if row is None:
        row = HumanAnnotation(
            ls_annotation_id=int(annotation["id"]), task_id=task.id, episode_id=task.episode_id
        )
        s.add(row)
        report.annotations["new"] += 1
    else:
        report.annotations["updated"] += 1
    for key, value in fields.items():
        setattr(row, key, value)
    if skipped:
        report.annotations["skipped"] += 1
    s.flush()
    _store_corrections(s, row, task, parsed, report)
    return True


def _store_corrections(
    s: Session, row: HumanAnnotation, task: AnnotationTask, parsed: Parsed, report: PullReport
) -> None:
    """The annotation's corrections (actions typed or clicked, thoughts, instructions), replacing
    what an earlier version of it said."""
    s.execute(delete(Correction).where(Correction.annotation_id == row.id))
    corrected = sorted(
        set(parsed.actions) | set(parsed.thoughts) | set(parsed.instructions) | set(parsed.points)
    )
    if not corrected:
        return
    steps = {st.index: st for st in s.scalars(select(Step).where(Step.episode_id == task.episode_id))}
    for index in corrected:
        step = steps.get(index)
        if step is None:
            report.ignored["correction_of_unknown_step"] += 1
            continue
        text, clicks = parsed.actions.get(index), parsed.points.get(index)
        action, codec, error, source = None, None, None, None
        if text is not None:  # typed wins over clicked: it can say what a click cannot (text, keys)
            action, codec, error = parse_correction(text, Screen(step.width, step.height))
            source = "typed"
            if clicks:
                report.ignored["clicks_under_a_typed_action"] += 1
        elif clicks:
            action, error = clicked_action(clicks)
            text, codec, source = json.dumps(clicks), "clicked" if action else None, "clicked"
        if source is not None:
            report.corrections[f"{source}_unparseable" if error else source] += 1
        s.add(
            Correction(
                annotation_id=row.id,
                episode_id=task.episode_id,
                step_index=index,
                annotator=row.annotator,
                action_text=text,
                action=action,
                action_format=codec,
                thought=parsed.thoughts.get(index),
                instruction=parsed.instructions.get(index),
                source=source,
                parse_error=error,
            )
        )


def _anchor(s: Session, episode_id: int, annotated: int, rule: str, report: PullReport) -> None:
    """Replace the episode's human anchor with what the current annotations of episode
    `annotated` (itself, or the identical trajectory whose task it was merged into) resolve to."""
    rows = list(
        s.scalars(
            select(HumanAnnotation).where(
                HumanAnnotation.episode_id == annotated,
                HumanAnnotation.withdrawn.is_(False),
                HumanAnnotation.skipped.is_(False),
                HumanAnnotation.verdict.is_not(None),
            )
        )
    )
    votes = [(r.annotator, str(r.verdict), as_utc(r.ls_updated_at)) for r in rows]
    label, why = resolve(votes, rule)
    old = s.scalar(select(Anchor).where(Anchor.episode_id == episode_id, Anchor.source == "human"))
    if label is None:
        report.unresolved[why] += 1
        if old is not None:
            s.delete(old)
            report.anchors["removed"] += 1
        return
    agreeing = sorted(a for a, v, _ in votes if v == label)
    fields = {
        "annotator": ",".join(agreeing)[:128],
        "label": label,
        "confidence": len(agreeing) / len(votes),
        "meta": {"rule": rule, "votes": {a: v for a, v, _ in votes}},
        "annotated_at": max(t for _, _, t in votes),
    }
    if old is None:
        s.add(Anchor(episode_id=episode_id, source="human", **fields))
        report.anchors["set"] += 1
        return
    changed = old.label != label
    for key, value in fields.items():
        setattr(old, key, value)
    report.anchors["changed" if changed else "unchanged"] += 1
