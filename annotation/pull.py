"""Pull annotations back from Label Studio as human anchors and corrections.

Each pull compares Label Studio with what was pulled before: new and updated annotations
are stored, annotations and tasks deleted there are withdrawn here, skips are kept as
skips (no verdict). Per episode, the verdicts of its annotations resolve to one human
anchor by `annotate.resolve`; the anchor overrides the verifier's (see
`critics.judge.deciding_anchor`). Corrected actions are parsed with every known codec;
one that parses nowhere is kept with `parse_error`, never dropped silently.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from annotation import config as cfg
from annotation.client import Studio
from storage.db import transaction
from storage.models import Anchor, AnnotationProject, AnnotationTask, Correction, HumanAnnotation, Step
from trajforge.actions import CODECS, Screen
from trajforge.errors import ActionError
from trajforge.logs import counts
from trajforge.settings import AnnotationSettings

_STEP_FIELD = re.compile(r"^(step_label|corrected_action|corrected_thought)_(\d+)$")
# Tried in order on a corrected action; canonical JSON first, then the model formats.
CORRECTION_CODECS = ("canonical", "qwen", "mobiler1", "uitars", "agentcpm", "androidworld")


@dataclass
class Parsed:
    verdict: str | None = None
    step_labels: dict[str, str] = field(default_factory=dict)
    actions: dict[int, str] = field(default_factory=dict)
    thoughts: dict[int, str] = field(default_factory=dict)
    ignored: Counter[str] = field(default_factory=Counter)  # result items not understood, by reason


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


def _text(value: dict[str, Any]) -> str | None:
    text = value.get("text")
    if isinstance(text, list):
        text = "\n".join(str(t) for t in text)
    return str(text).strip() or None if text is not None else None


def parse_result(result: list[dict[str, Any]]) -> Parsed:
    """An annotation's result list as a verdict, step labels and corrections."""
    out = Parsed()
    for item in result or []:
        name, value = item.get("from_name", ""), item.get("value") or {}
        choices = value.get("choices") if isinstance(value, dict) else None
        if name == cfg.VERDICT:
            choice = choices[0] if choices else None
            if choice in cfg.VERDICTS:
                out.verdict = choice
            else:
                out.ignored["bad_verdict"] += 1
            continue
        match = _STEP_FIELD.match(name)
        if match is None:
            out.ignored["unknown_field"] += 1
            continue
        kind, index = match.group(1), int(match.group(2))
        if kind == "step_label":
            label = choices[0] if choices else None
            if label in cfg.STEP_LABELS:
                out.step_labels[str(index)] = label
            else:
                out.ignored["bad_step_label"] += 1
        elif (text := _text(value)) is not None:
            (out.actions if kind == "corrected_action" else out.thoughts)[index] = text
    return out


def parse_correction(text: str, screen: Screen) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(canonical action, codec name, parse error) of a corrected action as typed."""
    for name in CORRECTION_CODECS:
        try:
            action = CODECS[name].parse(text, screen)
        except ActionError:
            continue
        return action.core().model_dump(mode="json", exclude_none=True), name, None
    return None, None, "unparseable_correction"


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


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _when(annotation: dict[str, Any]) -> datetime:
    stamp = annotation.get("updated_at") or annotation.get("created_at")
    return _utc(datetime.fromisoformat(str(stamp))) if stamp else datetime.now(UTC)


def pull(
    sessions: sessionmaker[Session], settings: AnnotationSettings, studio: Studio | None = None
) -> PullReport:
    """Bring every project's annotations up to date here (see the module docstring)."""
    studio = studio or Studio(settings)
    report = PullReport()
    with sessions() as s:
        projects = list(s.scalars(select(AnnotationProject)))
    for project in projects:
        with transaction(sessions) as s:
            touched = _pull_project(s, studio, project, report)
            for episode_id in sorted(touched):
                _anchor(s, episode_id, settings.resolve, report)
    return report


def _pull_project(s: Session, studio: Studio, project: AnnotationProject, report: PullReport) -> set[int]:
    ours = {
        t.ls_task_id: t
        for t in s.scalars(
            select(AnnotationTask).where(
                AnnotationTask.project_id == project.id, AnnotationTask.status == "pushed"
            )
        )
    }
    exists = studio.project_exists(project.ls_project_id)
    live = {int(t.id): t for t in studio.tasks(project.ls_project_id)} if exists else {}
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
    if row is not None and not row.withdrawn and _utc(row.ls_updated_at) == when:
        report.annotations["unchanged"] += 1
        return False
    skipped = bool(annotation.get("was_cancelled"))
    parsed = parse_result([] if skipped else annotation.get("result") or [])
    report.ignored.update(parsed.ignored)
    fields = {
        "annotator": studio.annotator(annotation.get("completed_by")),
        "verdict": parsed.verdict,
        "step_labels": parsed.step_labels,
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
    s.execute(delete(Correction).where(Correction.annotation_id == row.id))
    corrected = sorted(set(parsed.actions) | set(parsed.thoughts))
    if not corrected:
        return True
    steps = {st.index: st for st in s.scalars(select(Step).where(Step.episode_id == task.episode_id))}
    for index in corrected:
        step = steps.get(index)
        if step is None:
            report.ignored["correction_of_unknown_step"] += 1
            continue
        text = parsed.actions.get(index)
        action, codec, error = (None, None, None)
        if text is not None:
            action, codec, error = parse_correction(text, Screen(step.width, step.height))
            report.corrections["unparseable" if error else "parsed"] += 1
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
                parse_error=error,
            )
        )
    return True


def _anchor(s: Session, episode_id: int, rule: str, report: PullReport) -> None:
    """Replace the episode's human anchor with what its current annotations resolve to."""
    rows = list(
        s.scalars(
            select(HumanAnnotation).where(
                HumanAnnotation.episode_id == episode_id,
                HumanAnnotation.withdrawn.is_(False),
                HumanAnnotation.skipped.is_(False),
                HumanAnnotation.verdict.is_not(None),
            )
        )
    )
    votes = [(r.annotator, str(r.verdict), _utc(r.ls_updated_at)) for r in rows]
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
