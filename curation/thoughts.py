"""Thought synthesis by hint-guided rejection sampling (GUI-Owl §2.2.3).

For each accepted step (an action-prediction sample that passed the critic filter):

1. the model writes reasoning from the task, the preceding history and the screen, in
   one of several hint styles;
2. the reasoning alone (with the screen, without the task or history) is given back to
   predict the action, and the reasoning is kept only if the prediction matches the
   recorded action (`trajforge.actions.compare.mismatch`: same kind, point inside the
   target element or within tolerance);
3. a step no style matches gets a second pass with the ground-truth action as a hint.

A step whose policy gave its own thought (a model that reasons) keeps that thought: nothing is
written over it and no model call is made (pass `policy`).

Every sample records the pass and style that produced it and every attempt's outcome;
a step that never matches is kept as a dropped sample with the shared reason code
`thought_action_mismatch`. Offline, a template writes the thought and the same check
reads the action back out of it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from curation.bottleneck import Bottleneck, measure, prediction_mismatch
from curation.guidance import TEMPLATES
from curation.rollouts import Rollout
from trajforge.actions import Action, ActionKind, Screen
from trajforge.actions.compare import THOUGHT_ACTION_MISMATCH, mismatch, target_bbox
from trajforge.chat import image_part, text_part
from trajforge.domain import StepView, describe, screen_text
from trajforge.errors import LLM_FAULTS, LLMError
from trajforge.gateway import LLMGateway
from trajforge.logs import counts
from trajforge.progress import gather
from trajforge.sample import SampleDraft, said

CATEGORY = "reasoning"
STYLES = {
    "cot": "Reason step by step: what the screen shows, what the task still needs, then what to do next.",
    "concise": "Give the simplest reasoning possible, in one or two sentences.",
    "observe_then_act": "First say what you observe that matters for the task, then decide.",
}
TEMPLATE_VERSION = "thought-templates-1"
POLICY = "policy"  # the pass (and style) of a thought the policy itself gave with the step


StepAt = tuple[Rollout, int]  # a step a thought is written for: its rollout, and its index there


def view_of(step: StepAt) -> StepView:
    return step[0].steps[step[1]]


def history_of(step: StepAt) -> list[str]:
    """The steps before it in words: the history a policy is shown (`Rollout.words`)."""
    return step[0].words(step[1])


def action_of(step: StepAt) -> Action:
    """Its recorded action (a step is accepted only where its action parsed, `curation.pipeline`)."""
    action = view_of(step).act
    assert action is not None, "a step with no parsed action has no thought to write"
    return action


@dataclass
class ThoughtReport:
    kept: Counter[str] = field(default_factory=Counter)  # by pass
    dropped: Counter[str] = field(default_factory=Counter)  # by reason
    attempts: Counter[str] = field(default_factory=Counter)  # attempt outcomes (match or mismatch code)
    bottleneck: Counter[str] = field(default_factory=Counter)  # steps by verdict (`curation.bottleneck`)

    def render(self) -> str:
        return (
            f"thoughts: kept {counts(self.kept)}; dropped {counts(self.dropped)}; "
            f"attempts {counts(self.attempts)}; reasoning bottlenecks {counts(self.bottleneck)}"
        )


_QUOTED = re.compile(
    r"\b(tap|type|press|swipe|finish)\b[^'\n.;]*?(?:'([^']*)'|\b(back|home|enter|menu|up|down|left|right)\b|\((success|failure)\))",
    re.I,
)


def template_thought(step: StepAt, style: str) -> str:
    view, task = view_of(step), step[0].query.instruction
    words = describe(action_of(step), view)
    done = "; ".join(history_of(step)) or "nothing yet"
    screen = screen_text(view.elements)[:200]
    if style == "concise":
        return f"To {task.rstrip('.')}, next: {words}."
    if style == "observe_then_act":
        return f"The screen shows: {screen}. The task still needs work, so: {words}."
    return (
        f"The task is: {task} Done so far: {done}. The screen shows: {screen}. "
        f"The next move on the way to the goal: {words}."
    )


def read_action(thought: str, view: StepView) -> Action | None:
    """The offline predictor: the last action the thought names, resolved on the screen."""
    screen = Screen(view.width, view.height)
    found = None
    for verb, quoted, word, status in _QUOTED.findall(thought):
        verb = verb.lower()
        if verb == "tap" and quoted:
            element = next((e for e in view.elements if quoted in (e.get("text"), e.get("id"))), None)
            if element is not None:
                x1, y1, x2, y2 = element["bounds"]
                found = Action(kind=ActionKind.CLICK, point=screen.from_px((x1 + x2) / 2, (y1 + y2) / 2))
        elif verb == "type" and quoted:
            found = Action(kind=ActionKind.TYPE, text=quoted)
        elif verb == "press" and word.lower() in ("back", "home", "enter", "menu"):
            found = Action(kind=ActionKind.PRESS, key=word.lower())
        elif verb == "swipe" and word.lower() in ("up", "down", "left", "right"):
            found = Action(kind=ActionKind.SWIPE, point=(500, 500), direction=word.lower())
        elif verb == "finish" and status:
            found = Action(kind=ActionKind.TERMINATE, status=status.lower())
    return found


def check(predicted: Action | None, step: StepAt, tolerance: int) -> str | None:
    if predicted is None:
        return "prediction_unparseable"
    view = view_of(step)
    return mismatch(predicted, action_of(step), view.elements, Screen(view.width, view.height), tolerance)


async def think_with_model(
    step: StepAt,
    style: str,
    hint: str | None,
    gateway: LLMGateway,
    frames: Callable[[str], bytes],
    tolerance: int,
) -> tuple[str, str | None]:
    """(thought, None when it predicts the recorded action, else the mismatch code)."""
    image = image_part(frames(view_of(step).before))
    prompt = TEMPLATES.get_template("thought.j2").render(
        instruction=step[0].query.instruction,
        history=history_of(step),
        style=STYLES.get(style, style),
        hint=hint,
    )
    stage = "thought.hinted" if hint else "thought.write"
    try:
        written = await gateway.chat([{"role": "user", "content": [text_part(prompt), image]}], stage=stage)
    except LLMError as exc:  # recorded by the gateway; the attempt counts under its reason
        return "", exc.reason
    thought = written.text.strip()
    if not thought:
        return "", "llm_empty_response"
    ask = TEMPLATES.get_template("predict.j2").render(thought=thought)
    try:
        predicted = await gateway.chat(
            [{"role": "user", "content": [text_part(ask), image]}], stage="thought.predict", json_mode=True
        )
    except LLMError as exc:
        return thought, exc.reason
    return thought, prediction_mismatch(predicted.text, action_of(step), view_of(step), tolerance)


async def synthesise(
    steps: list[StepAt],
    styles: list[str],
    tolerance: int,
    gateway: LLMGateway | None = None,
    frames: Callable[[str], bytes] | None = None,
    only_bottlenecks: bool = False,
) -> tuple[list[SampleDraft], ThoughtReport]:
    """Thoughts for `steps`; with a model, each step's reasoning-bottleneck verdict first
    (`curation.bottleneck`), and with `only_bottlenecks` thoughts for bottleneck steps only."""
    report = ThoughtReport()

    async def attempt(step: StepAt, style: str, hint: str | None) -> tuple[str, str | None]:
        if gateway is not None and frames is not None:
            return await think_with_model(step, style, hint, gateway, frames, tolerance)
        thought = template_thought(step, style)
        return thought, check(read_action(thought, view_of(step)), step, tolerance)

    async def one(step: StepAt) -> SampleDraft:
        view, action = view_of(step), action_of(step)
        if action.thought:  # the policy's own reasoning for this step: kept, never written over
            report.kept[POLICY] += 1
            own = (POLICY, POLICY, action.thought)
            return _draft(step, own, [{"pass": POLICY, "style": POLICY, "result": "match"}], gateway)
        measured = None
        if gateway is not None and frames is not None:
            measured = await measure(
                step[0].query, view, history_of(step), action, gateway, frames, tolerance
            )
            report.bottleneck[measured.verdict] += 1
            if only_bottlenecks and not measured.is_bottleneck:
                report.dropped[measured.verdict] += 1
                skipped = _draft(step, None, [], gateway, measured)
                skipped.reason = measured.verdict
                return skipped
        tries: list[dict[str, Any]] = []
        plan = [("free", s, None) for s in styles] + [("hinted", styles[0], describe(action, view))]
        chosen: tuple[str, str, str] | None = None
        for phase, style, hint in plan:
            thought, code = await attempt(step, style, hint)
            tries.append({"pass": phase, "style": style, "result": code or "match"})
            report.attempts[code or "match"] += 1
            if code is None:
                chosen = (phase, style, thought)
                break
        draft = _draft(step, chosen, tries, gateway, measured)
        if chosen is None:  # every try failed; when each ended on the same model fault, that is why
            results = {t["result"] for t in tries}
            fault = results.pop() if len(results) == 1 else None
            draft.reason = fault if fault in LLM_FAULTS else THOUGHT_ACTION_MISMATCH
            report.dropped[draft.reason] += 1
        else:
            report.kept[chosen[0] if gateway is not None else "template"] += 1
        return draft

    drafts = await gather("thoughts written", (one(s) for s in steps))
    return drafts, report


def _draft(
    step: StepAt,
    chosen: tuple[str, str, str] | None,
    tries: list[dict[str, Any]],
    gateway: Any,
    measured: Bottleneck | None = None,
) -> SampleDraft:
    (rollout, index), view, action = step, view_of(step), action_of(step)
    core = action.core()  # what is done, not why
    thought = chosen[2] if chosen else ""
    own = chosen is not None and chosen[0] == POLICY
    return SampleDraft(
        CATEGORY,
        index,
        {
            "images": [view.before],
            "prompt": f"Task: {rollout.query.instruction}\nHistory: "
            + ("; ".join(history_of(step)) or "none"),
            "thought": thought,
            "intent": describe(action, view),  # Mobile-R1's clear low-level action
            "action": core.stored(),
            "screen": [view.width, view.height],
            "bbox": target_bbox(action, view.elements, Screen(view.width, view.height)),
            "response": f"<think>{thought}</think>\n{core.to_json()}",
            "bottleneck": measured.is_bottleneck if measured else None,
            **({"said": said(action)} if own else {}),
        },
        {
            "episode": rollout.uid,
            "steps": [index],
            "query": rollout.query.uid,
            "pass": (chosen[0] if gateway is not None or own else "template") if chosen else None,
            "style": chosen[1] if chosen else None,
            "attempts": tries,
            "bottleneck": measured.as_dict() if measured else None,
            "model": None
            if own
            else gateway.model_for("thought.write")
            if gateway is not None
            else TEMPLATE_VERSION,
        },
    )
