"""One trajectory as a Label Studio task: what the annotator sees, and what is pre-filled.

A blind task (the audit sample, or every task under `annotate.blind: all`) shows no critic
and pre-fills nothing; a review task shows the critics' verdicts and pre-fills them as a
prediction (`model_version=trajforge-critics`).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from annotation import config as cfg
from annotation.client import PREDICTIONS
from annotation.images import ImageLinks
from annotation.queue import Candidate
from storage.episodes import steps_by_episode
from storage.models import Anchor, Episode, Judgment
from storage.models import Query as QueryRow
from trajforge.actions import ActionKind, Screen
from trajforge.actions.compare import element_at
from trajforge.episode import Step
from trajforge.settings import AnnotationSettings
from trajforge.verdicts import CONSENSUS


def _verdict(label: str) -> str:
    return {"correct": "success", "incorrect": "failure"}.get(label, "unsure")


def blind(candidate: Candidate, settings: AnnotationSettings) -> bool:
    """Whether the task hides the critics: every task under blind=all, else the pure audit sample."""
    return settings.blind == "all" or candidate.reasons in (["audit"], ["audit_published"])


def show_step(st: Step, i: int, n: int) -> tuple[str, str, list[int] | None]:
    """What the annotator sees of step `i` of `n`: the caption under its filmstrip thumbnail, the
    text above its page (the action in words, exactly, and its target), and the target element's
    pixel bounds, outlined on the screen (None: no target)."""
    if st.action is None:
        note = f"no action: {st.parse_error or 'none'}"
        return note, f"Step {i + 1} of {n}: {note}", None
    action = st.action
    screen = Screen(st.width, st.height)
    element = element_at(st.elements or [], action.point, screen) if action.point is not None else None
    label = str(element.get("text") or element.get("id") or element.get("kind") or "") if element else ""
    what = short = action.kind.value
    if action.kind == ActionKind.SWIPE:
        (x, y), (ex, ey) = action.point or (0, 0), action.swipe_end()
        what = f"swipe from ({x}, {y}) to ({ex}, {ey}), the arrow points where the finger ends"
        short = f"swipe {action.swipe_direction()}"
    elif action.text or action.key or action.status:
        what = short = f"{what} {action.text!r}" if action.text else f"{what} {action.key or action.status}"
    if label and action.kind != ActionKind.SWIPE and not action.text:
        short = f"{action.kind.value} {label!r}"
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
    return short, "\n".join(lines), box


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


@dataclass
class _Shown:
    """The steps as the task shows them, and the step labels the critics would pre-fill."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    frames: list[tuple[str, str]] = field(default_factory=list)  # (image, caption) of the filmstrip
    result: list[dict[str, object]] = field(default_factory=list)  # the prediction's choices
    labels: dict[str, str] = field(default_factory=dict)  # step index -> pre-filled label


def build_task(
    s: Session, candidate: Candidate, images: ImageLinks, hidden: bool = False
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The Label Studio task of one trajectory, and what it pre-fills (None when blind): the
    critics' verdicts as a prediction, unless `hidden` (a blind task shows no critic at all)."""
    episode = s.get(Episode, candidate.episode_id)
    assert episode is not None
    query = s.get(QueryRow, episode.query_id)
    assert query is not None
    steps = steps_by_episode(s, Episode.id == episode.id).get(episode.id, [])
    episode_judgments = list(
        s.scalars(select(Judgment).where(Judgment.target == "episode", Judgment.target_id == episode.id))
    )
    anchors = {a.source: a.label for a in s.scalars(select(Anchor).where(Anchor.episode_id == episode.id))}
    critics_line = [f"{j.critic}:{j.critic_version} = {_verdict(j.label)}" for j in episode_judgments]
    if "verifier" in anchors:
        critics_line.insert(0, f"verifier = {anchors['verifier']}")
    shown = _show_steps(steps, _step_judgments(s, steps), images, hidden)
    task: dict[str, Any] = {
        "data": {
            "instruction": query.instruction,
            "critics": f"Blind audit: the critics' verdicts are hidden. {len(steps)} steps."
            if hidden
            else " · ".join(critics_line) + f"\nqueued for: {', '.join(candidate.reasons)}",
            "filmstrip": filmstrip(shown.frames, links=images.mode in ("upload", "presign")),
            "steps": shown.steps,
            # flat columns for the task list
            "app": candidate.app,
            "reasons": ", ".join(candidate.reasons),
            "n_steps": len(steps),
            "verdicts": "hidden: blind audit" if hidden else " · ".join(critics_line),
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
    prefill: dict[str, Any] = {"verdict": None, "steps": shown.labels}
    consensus = next((j for j in episode_judgments if (j.critic, j.critic_version) == CONSENSUS), None)
    if consensus is not None:
        shown.result.insert(0, cfg.choice(cfg.VERDICT, cfg.INSTRUCTION, _verdict(consensus.label)))
        prefill["verdict"] = _verdict(consensus.label)
    score = _score(episode_judgments, consensus)
    task["predictions"] = [{"model_version": PREDICTIONS, "score": round(score, 4), "result": shown.result}]
    return task, prefill


def _step_judgments(s: Session, steps: list[Step]) -> dict[int, dict[str, Judgment]]:
    """Every step critic's judgment of these steps, by step id and critic:version."""
    out: dict[int, dict[str, Judgment]] = {}
    for j in s.scalars(
        select(Judgment).where(Judgment.target == "step", Judgment.target_id.in_([st.id for st in steps]))
    ):
        out.setdefault(j.target_id, {})[f"{j.critic}:{j.critic_version}"] = j
    return out


def _show_steps(
    steps: list[Step], judged: dict[int, dict[str, Judgment]], images: ImageLinks, hidden: bool
) -> _Shown:
    out = _Shown()
    for i, st in enumerate(steps):
        labels = judged.get(st.id, {})
        caption, text, box = show_step(st, i, len(steps))
        if not hidden:
            said = "; ".join(
                f"{k}: {j.label}" + (f" ({j.summary})" if j.summary else "") for k, j in labels.items()
            )
            text += f"\ncritics: {said or 'none'}"
        before = images(st.screenshot, st.action, box)
        after_sha = st.screenshot_after or (steps[i + 1].screenshot if i + 1 < len(steps) else None)
        after = images(after_sha) if after_sha else before
        out.steps.append({"image": before, "after": after, "text": text})
        out.frames.append((before, caption))
        preferred = sorted(labels.items(), key=lambda kv: (not kv[0].startswith("llm"), kv[0]))
        label = next((j.label for _, j in preferred if j.label in cfg.STEP_LABELS), None)
        if label is not None:
            out.result.append(cfg.choice(cfg.step_label(i), cfg.screen(i), label))
            out.labels[str(i)] = label
    if steps:
        out.frames.append((out.steps[-1]["after"], "after the last action"))
    return out


def _score(episode_judgments: list[Judgment], consensus: Judgment | None) -> float:
    """The prediction's score: the consensus's own, else the share of critics agreeing with it."""
    if consensus is not None and consensus.score is not None:
        return consensus.score
    decided = [j for j in episode_judgments if (j.critic, j.critic_version) != CONSENSUS]
    agreeing = sum(1 for j in decided if consensus is not None and j.label == consensus.label)
    return agreeing / len(decided) if decided else 0.0
