"""Query-specific guidance (GUI-Owl §6.4) for the queries the policy keeps failing.

A query whose pass rate over the round's rollouts is at or below the threshold gets a
reference trajectory: its shortest successful rollout (model-made), else its
ground-truth path replayed in the simulator (standing in for a human demonstration).

1. Each action's outcome is described: by a VLM from the pre-action screenshots with the
   interaction points circled and the screen after the last step, or offline from the step
   record.
2. For a model-made reference, steps whose outcome does not match the model's stated
   intent (or that do nothing) are dropped, each with a reason.
3. The essential steps are summarised into guidance: by the same VLM request (one call per
   hard query: it is told to leave out what did not help), or offline as the numbered kept
   steps.

Guidance is stored per query and round; `load_guidance` gives the latest per query to
the next rollouts of that query (`EpisodeRunner(guidance=...)`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from curation.rollouts import Rollout, pass_rate
from storage.db import insert_ignore, transaction
from storage.models import Guidance
from trajforge.actions import Screen
from trajforge.actions.compare import target_bbox
from trajforge.chat import image_part, text_part
from trajforge.domain import Query, StepView, describe, screen_text
from trajforge.draw import episode_screens
from trajforge.endpoints import fit_views
from trajforge.errors import LLMError
from trajforge.gateway import LLMGateway
from trajforge.json_output import numbered
from trajforge.logs import counts
from trajforge.progress import gather

TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"), undefined=StrictUndefined, autoescape=False
)
REPLAY = "replay"  # the reference is a demonstration: the ground-truth path replayed in the simulator
# A query's demonstration, recorded as steps; None where there is none (a suite task's query).
Demonstrator = Callable[[Query], list[StepView] | None]


@dataclass
class Described:
    index: int
    action: str  # the action in words
    outcome: str
    kept: bool = True
    reason: str | None = None


@dataclass
class GuidanceReport:
    queries: int = 0  # queries at or below the pass-rate threshold
    written: Counter[str] = field(default_factory=Counter)  # by source
    references: Counter[str] = field(default_factory=Counter)  # rollout | replay
    dropped_steps: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)  # queries left without guidance, by reason

    def render(self) -> str:
        return (
            f"guidance: {sum(self.written.values())} of {self.queries} hard queries "
            f"({counts(self.written)}); "
            f"references: {counts(self.references)}; steps dropped: {counts(self.dropped_steps)}; "
            f"no guidance: {counts(self.failed)}"
        )


def hard_queries(
    groups: dict[str, list[Rollout]], threshold: float, min_rollouts: int
) -> list[tuple[list[Rollout], float]]:
    out = []
    for group in groups.values():
        rate = pass_rate(group)
        if len(group) >= min_rollouts and rate <= threshold:
            out.append((group, rate))
    return out


def pick_reference(
    group: list[Rollout], demonstrate: Demonstrator | None
) -> tuple[str, list[StepView], list[str] | None] | None:
    """(reference id, steps, the critic's labels when the reference is model-made); None when no
    rollout succeeded and there is no demonstrator."""
    won = [r for r in group if r.success]
    if won:
        best = min(won, key=lambda r: (len(r.steps), r.uid))
        return best.uid, best.steps, best.labels
    replay = demonstrate(group[0].query) if demonstrate is not None else None
    return (REPLAY, replay, None) if replay is not None else None


def describe_offline(views: list[StepView], labels: list[str] | None) -> list[Described]:
    out = []
    for i, view in enumerate(views):
        if view.act is None:
            out.append(Described(i, "(unparsed output)", "nothing happens", False, "unparsed_action"))
            continue
        words = describe(view.act, view)
        changed = view.after != view.before
        shows = screen_text(views[i + 1].elements)[:160] if i + 1 < len(views) else ""
        outcome = f"{words}; the screen then shows: {shows}" if changed and shows else words
        step = Described(i, words, outcome if changed else f"{words}; nothing visible changes")
        if labels is not None and labels[i] == "HARMFUL":
            step.kept, step.reason = False, "outcome_not_intended"
        elif labels is not None and not changed and labels[i] != "GOOD":
            step.kept, step.reason = False, "no_effect"
        out.append(step)
    return out


def summarise_offline(query: Query, steps: list[Described]) -> str:
    kept = [s.action for s in steps if s.kept]
    lines = [f"{i}. {a}." for i, a in enumerate(kept, 1)]
    return (
        f"To {query.instruction[0].lower()}{query.instruction[1:]}, the essential steps are:\n"
        + "\n".join(lines)
    )


STAGE = "guidance.write"


async def guide_with_model(
    query: Query,
    views: list[StepView],
    model_made: bool,
    gateway: LLMGateway,
    frames: Callable[[str], bytes],
) -> tuple[list[Described], str, str]:
    """A reference's steps described and the guidance written in one request: the screen before each
    step with its interaction point circled, then the screen after the last, with the steps in
    words (and, for a model-made reference, the agent's stated reasons). Each step's outcome, the
    guidance text, and why there is none ("" when there is). A step whose outcome did not parse,
    or whose outcome the model says was not the agent's intent, is dropped with its reason."""
    words = [describe(v.act, v) if v.act else "(unparsed output)" for v in views]
    rationale = [(v.act.thought or v.act.intent or "") if model_made and v.act else "" for v in views]
    screens = await asyncio.to_thread(episode_screens, views, frames)
    images, joined = fit_views(screens, gateway.max_images(STAGE))
    prompt = TEMPLATES.get_template("guidance.j2").render(
        instruction=query.instruction,
        steps=[(i + 1, words[i], rationale[i]) for i in range(len(views))],
        model_made=model_made,
        joined=joined,
        screens=len(screens),
    )
    content = [text_part(prompt), *(image_part(png) for png in images)]
    try:
        result = await gateway.chat([{"role": "user", "content": content}], stage=STAGE, json_mode=True)
    except LLMError as exc:  # recorded by the gateway; the next run retries it
        return [], "", exc.reason
    data = result.data if result.json_error is None and isinstance(result.data, dict) else {}
    by_number = numbered(data)
    steps = []
    for i, view in enumerate(views):
        entry = by_number.get(str(i + 1), {})
        outcome = str(entry.get("outcome", "")).strip()
        if view.act is None:
            steps.append(Described(i, words[i], "nothing happens", False, "unparsed_action"))
        elif not outcome:
            steps.append(Described(i, words[i], result.text[:200], False, "unparseable_description"))
        elif rationale[i] and entry.get("as_intended") is not True:
            steps.append(Described(i, words[i], outcome, False, "outcome_not_intended"))
        else:
            steps.append(Described(i, words[i], outcome))
    text = data.get("guidance")
    text = text.strip() if isinstance(text, str) else ""
    return steps, text, "" if text else (result.json_error or "llm_empty_response")


async def write_guidance(
    sessions: sessionmaker[Session],
    round_id: int,
    groups: dict[str, list[Rollout]],
    demonstrate: Demonstrator | None,
    threshold: float,
    min_rollouts: int,
    gateway: LLMGateway | None = None,
    frames: Callable[[str], bytes] | None = None,
) -> GuidanceReport:
    """Guidance for every hard query of the round; idempotent (one row per query and round)."""
    report = GuidanceReport()
    hard = hard_queries(groups, threshold, min_rollouts)
    report.queries = len(hard)

    async def one(group: list[Rollout], rate: float) -> dict[str, Any] | None:
        query = group[0].query
        picked = pick_reference(group, demonstrate)
        if picked is None:  # unsolved, and nothing to replay: never a made-up reference
            report.failed["unsolved_no_reference"] += 1
            return None
        ref, views, labels = picked
        report.references["rollout" if labels is not None else REPLAY] += 1
        if gateway is not None and frames is not None:
            steps, text, why = await guide_with_model(query, views, labels is not None, gateway, frames)
            source = "llm"
        else:
            steps, source = describe_offline(views, labels), "template"
            text, why = summarise_offline(query, steps), ""
        report.dropped_steps.update(s.reason for s in steps if s.reason)
        if not why and not any(s.kept for s in steps):  # (a failed request has no steps, and says why)
            report.failed["no_usable_steps"] += 1
            return None
        if not text:
            report.failed[why or "llm_empty_response"] += 1
            return None
        report.written[source] += 1
        return {
            "query_uid": query.uid,
            "round_id": round_id,
            "text": text,
            "source": source,
            "reference": ref,
            "steps": [asdict(s) | {"demonstration": demonstration(views[s.index])} for s in steps],
            "provenance": {
                "pass_rate": round(rate, 4),
                "rollouts": len(group),
                "model": gateway.model_for(STAGE) if gateway is not None else None,
            },
        }

    rows = [r for r in await gather("guidance written", (one(g, rate) for g, rate in hard)) if r is not None]
    with transaction(sessions) as s:
        insert_ignore(s, Guidance, rows, ["query_uid", "round_id"])
    return report


def demonstration(view: StepView) -> dict[str, Any] | None:
    """A reference step as a demonstration a policy can learn from: the screenshot before it, the
    action, and the 0-1000 bbox of the element it targets (None for unparsed output)."""
    if (action := view.act) is None:
        return None
    screen = Screen(view.width, view.height)
    return {
        "screenshot": view.before,
        "action": action.core().stored(),
        "bbox": target_bbox(action, view.elements, screen),
    }


def load_guidance(sessions: sessionmaker[Session], query_uids: list[str]) -> dict[str, str]:
    """The latest guidance of each query (for its next rollouts)."""
    out: dict[str, str] = {}
    with sessions() as s:
        for uid, text in s.execute(
            select(Guidance.query_uid, Guidance.text)
            .where(Guidance.query_uid.in_(query_uids))
            .order_by(Guidance.round_id)
        ):
            out[uid] = text
    return out
