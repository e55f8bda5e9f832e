"""Critics behind a model, through the gateway (GUI-Owl §6.3).

The step critic sees the pre-action screenshot with the interaction point marked, the
post-action screenshot and the step history; the trajectory critic has a textual channel
(the step record) and a multimodal one (screenshots plus summaries). Every answer keeps
its raw text; an answer that does not parse is recorded with a reason, never raised.
Reruns are free: the gateway answers repeated requests from its cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from trajforge.actions import Screen
from trajforge.domain import STEP_LABELS, Query, StepView, describe
from trajforge.draw import mark_point
from trajforge.endpoints import fit_views
from trajforge.gateway import LLMGateway, image_part, text_part

TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"), undefined=StrictUndefined, autoescape=False
)


@dataclass(frozen=True)
class LLMJudgment:
    label: str | None  # None when the answer did not parse
    summary: str
    analysis: str
    raw: str
    parse_error: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0


def _parse(result: Any, key: str, allowed: tuple[str, ...]) -> tuple[str | None, str, str, str | None]:
    data, error = result.data, result.json_error
    if error is None and isinstance(data, dict):
        value = str(data.get(key, "")).strip()
        if value in allowed:
            summary = " ".join(str(data.get("summary", "")).split()[:30])
            return value, summary, str(data.get("analysis", "")), None
        error = f"bad_{key}: {value!r} is not one of {', '.join(allowed)}"
    return None, "", "", error or "not a JSON object"


class LLMStepCritic:
    """Args: frames maps a screenshot hash to PNG bytes (the object store)."""

    name = "llm_step"

    def __init__(self, gateway: LLMGateway, frames: Callable[[str], bytes], model: str | None = None) -> None:
        self.gateway, self.frames, self.model = gateway, frames, model
        self.version = f"1:{model or gateway.model_for('critic.step')}"

    async def judge(self, query: Query, view: StepView, history: list[str]) -> LLMJudgment:
        if (action := view.act) is None:
            return LLMJudgment("NEUTRAL", "The output could not be parsed; nothing happened.", "", "", None)
        # decoding and drawing a phone-sized PNG is CPU work: keep it off the event loop
        before = await asyncio.to_thread(
            mark_point, self.frames(view.before), action, Screen(view.width, view.height)
        )
        # an endpoint that takes one image gets the two screens side by side
        views, joined = fit_views([before, self.frames(view.after)], self.gateway.max_images("critic.step"))
        prompt = TEMPLATES.get_template("step_critic.j2").render(
            instruction=query.instruction, history=history, action=describe(action, view), joined=joined
        )
        content = [text_part(prompt), *(image_part(v) for v in views)]
        result = await self.gateway.chat(
            [{"role": "user", "content": content}], stage="critic.step", model=self.model, json_mode=True
        )
        label, summary, analysis, error = _parse(result, "label", STEP_LABELS)
        return LLMJudgment(
            label, summary, analysis, result.text, error, result.prompt_tokens, result.completion_tokens
        )


class LLMTrajectoryCritic:
    """One channel: "textual" (the step record) or "multimodal" (screenshots and summaries)."""

    def __init__(
        self,
        channel: str,
        gateway: LLMGateway,
        frames: Callable[[str], bytes],
        model: str | None = None,
        last_images: int = 3,
    ) -> None:
        if channel not in ("textual", "multimodal"):
            raise ValueError(f"channel must be textual or multimodal, not {channel!r}")
        self.channel, self.gateway, self.frames, self.model = channel, gateway, frames, model
        self.last_images = last_images
        self.name = f"llm_{channel}"
        self.version = f"1:{model or gateway.model_for('critic.step')}"

    async def judge(self, query: Query, steps: list[StepView], summaries: list[str]) -> LLMJudgment:
        if self.channel == "textual":
            prompt = TEMPLATES.get_template("trajectory_textual.j2").render(
                instruction=query.instruction, steps=summaries
            )
            content: list[dict[str, Any]] = [text_part(prompt)]
        else:
            shots = [steps[0].before] + [s.after for s in steps[-self.last_images :]] if steps else []
            views, joined = fit_views(
                [self.frames(sha) for sha in shots], self.gateway.max_images(f"critic.{self.channel}")
            )
            prompt = TEMPLATES.get_template("trajectory_multimodal.j2").render(
                instruction=query.instruction, steps=summaries, images=len(shots), joined=joined
            )
            content = [text_part(prompt)] + [image_part(v) for v in views]
        result = await self.gateway.chat(
            [{"role": "user", "content": content}],
            stage=f"critic.{self.channel}",
            model=self.model,
            json_mode=True,
        )
        label, _, analysis, error = _parse(result, "verdict", ("correct", "incorrect"))
        return LLMJudgment(
            label,
            analysis[:200],
            analysis,
            result.text,
            error,
            result.prompt_tokens,
            result.completion_tokens,
        )
