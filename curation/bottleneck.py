"""Reasoning-bottleneck selection (InfiGUI-R1 §3.1.1).

A step is a reasoning bottleneck when the model, shown the screen and the task, predicts the
wrong action (a_high), yet predicts the right one once it is also told the step's sub-goal
(a_low: the step's clear low-level instruction, Mobile-R1's "clear action"). Its difficulty is
inferring what to do next, which is what reasoning teaches; a step the model gets wrong either
way fails at perception or execution, and one it gets right without help needs no reasoning.

Each accepted step is measured before thoughts are written, and the verdict is kept with the
thought sample (`bottleneck` in its payload, the two predictions' outcomes in its provenance).
With `curate.thoughts_for: bottleneck`, only bottleneck steps get thoughts, as in the paper;
the others are kept as dropped samples with their verdict as the reason. Offline (no model)
nothing is measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from curation.guidance import TEMPLATES
from trajforge.actions import Action, Screen, get_codec
from trajforge.actions.compare import mismatch
from trajforge.chat import image_part, text_part
from trajforge.domain import Query, StepView, describe
from trajforge.errors import LLMError, ParseError
from trajforge.gateway import LLMGateway

BOTTLENECK = "reasoning_bottleneck"
SOLVED = "solved_without_subgoal"  # a_high is right: no reasoning needed
BEYOND = "wrong_with_subgoal"  # a_low is wrong too: perception or execution, not reasoning
UNMEASURED = "bottleneck_not_measured"  # a model call failed (its reason is kept as the outcome)
VERDICTS = (BOTTLENECK, SOLVED, BEYOND)


@dataclass(frozen=True)
class Bottleneck:
    verdict: str
    without: str  # "match" or the mismatch code of a_high
    with_subgoal: str | None  # the same for a_low (None: not asked, a_high was right)

    @property
    def is_bottleneck(self) -> bool:
        return self.verdict == BOTTLENECK

    def as_dict(self) -> dict[str, str | None]:
        return {"verdict": self.verdict, "without_subgoal": self.without, "with_subgoal": self.with_subgoal}


def prediction_mismatch(text: str, action: Action, view: StepView, tolerance: int) -> str | None:
    """A model's predicted action (canonical JSON) against the recorded one: None when it
    matches, else the mismatch code (`prediction_unparseable` when it does not parse)."""
    screen = Screen(view.width, view.height)
    try:
        predicted = get_codec("canonical").parse(text, screen)
    except ParseError:
        return "prediction_unparseable"
    return mismatch(predicted, action, view.elements, screen, tolerance)


async def measure(
    query: Query,
    view: StepView,
    history: list[str],
    action: Action,
    gateway: LLMGateway,
    frames: Callable[[str], bytes],
    tolerance: int,
) -> Bottleneck:
    """a_high, then (only when it is wrong) a_low; the verdict from the two."""

    async def predict(subgoal: str | None) -> str:
        prompt = TEMPLATES.get_template("act.j2").render(
            instruction=query.instruction, history=history, subgoal=subgoal
        )
        content = [text_part(prompt), image_part(frames(view.before))]
        stage = "bottleneck.subgoal" if subgoal else "bottleneck.task"
        reply = await gateway.chat([{"role": "user", "content": content}], stage=stage, json_mode=True)
        return prediction_mismatch(reply.text, action, view, tolerance) or "match"

    try:
        high = await predict(None)
        if high == "match":
            return Bottleneck(SOLVED, high, None)
        low = await predict(describe(action, view))
    except LLMError as exc:  # recorded by the gateway: no verdict rather than a wrong one
        return Bottleneck(UNMEASURED, exc.reason, None)
    return Bottleneck(BOTTLENECK if low == "match" else BEYOND, high, low)
