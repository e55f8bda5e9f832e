"""Critics behind a model, through the gateway (GUI-Owl §6.3), one request per episode.

The episode judge sees each step's pre-action screenshot with the interaction point marked and
the screen after the last step, labels every step, writes its CSRS knowledge answers, and gives
the episode's verdict (the multimodal trajectory channel). One request per episode (or per window
of steps) instead of one per step and one per channel: a model round's calls stay near one per
rolled-out step, the policy's. Every answer keeps its raw text; an answer that does not parse is
recorded with a reason, never raised. Reruns are free: the gateway answers repeated requests from
its cache.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from trajforge.chat import image_part, text_part
from trajforge.domain import STEP_LABELS, Query, StepView, describe
from trajforge.draw import episode_screens
from trajforge.endpoints import fit_views
from trajforge.gateway import LLMGateway
from trajforge.json_output import numbered

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


KNOWLEDGE = (
    "state_summary",
    "progress_tracking",
    "state_verification",
    "effect_prediction",
    "self_reflection",
)
STAGE = "critic.episode"
JUDGE_VERSION = "2:"  # the judge's critic version: this, then the model's name
WINDOW = 8  # steps one request judges: an episode of 8 steps is one request of 9 screens


@dataclass(frozen=True)
class EpisodeJudgment:
    """One episode judged: a judgment per step (its `raw` the step's own JSON object, with its
    knowledge answers, where it parsed) and the episode's verdict."""

    steps: list[LLMJudgment]
    verdict: LLMJudgment


class LLMEpisodeJudge:
    """The model critics of an episode in one request per window of `window` steps (GUI-Owl §6.3's
    step critic and multimodal trajectory critic, and Step-GUI's CSRS knowledge answers, asked
    together): the screen before each step with its interaction point marked, then the screen after
    the window's last step; the reply labels each step, answers its knowledge questions
    (`KNOWLEDGE`, which the CSRS writer takes instead of asking again) and, in the last window, gives
    the episode's verdict. Earlier windows' steps are listed in words. A step whose output did not
    parse is NEUTRAL without the model's word, as it changed nothing.

    Args: frames maps a screenshot hash to PNG bytes (the object store).
    """

    name = "llm_step"  # the step labels' critic
    channel = "llm_multimodal"  # the episode verdict's trajectory channel

    def __init__(
        self,
        gateway: LLMGateway,
        frames: Callable[[str], bytes],
        model: str | None = None,
        window: int = WINDOW,
    ) -> None:
        self.gateway, self.frames, self.model, self.window = gateway, frames, model, window
        self.version = f"{JUDGE_VERSION}{model or gateway.model_for(STAGE)}"

    async def judge(self, query: Query, views: list[StepView]) -> EpisodeJudgment:
        words = [describe(v.act, v) if v.act else "(unparseable output: nothing happened)" for v in views]
        starts = list(range(0, len(views), self.window))
        parts = await asyncio.gather(
            *(self._window(query, views, words, start, start == starts[-1]) for start in starts)
        )
        steps = [j for judged, _ in parts for j in judged]
        verdict = parts[-1][1] if parts else None
        return EpisodeJudgment(steps, verdict or LLMJudgment(None, "", "", "", "no_steps"))

    async def _window(
        self, query: Query, views: list[StepView], words: list[str], start: int, last: bool
    ) -> tuple[list[LLMJudgment], LLMJudgment | None]:
        part = views[start : start + self.window]
        # decoding and drawing phone-sized PNGs is CPU work: keep it off the event loop
        screens = await asyncio.to_thread(episode_screens, part, self.frames)
        images, joined = fit_views(screens, self.gateway.max_images(STAGE))
        prompt = TEMPLATES.get_template("episode_judge.j2").render(
            instruction=query.instruction,
            earlier=words[:start],
            steps=[(start + i + 1, words[start + i]) for i in range(len(part))],
            joined=joined,
            screens=len(screens),
            verdict=last,
        )
        content = [text_part(prompt), *(image_part(v) for v in images)]
        result = await self.gateway.chat(
            [{"role": "user", "content": content}], stage=STAGE, model=self.model, json_mode=True
        )
        by_number = numbered(result.data if result.json_error is None else None)
        judged = [_step(view, by_number.get(str(start + i + 1)), result) for i, view in enumerate(part)]
        if judged:  # the request's tokens, once
            judged[0] = replace(
                judged[0], prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens
            )
        if not last:
            return judged, None
        label, _, analysis, error = _parse(result, "verdict", ("correct", "incorrect"))
        return judged, LLMJudgment(label, analysis[:200], analysis, result.text, error)


def _step(view: StepView, entry: dict[str, Any] | None, result: Any) -> LLMJudgment:
    """A step's judgment from its entry in the reply (None: the reply had none for it)."""
    if view.act is None:  # its knowledge answers still stand: the screen was there
        raw = json.dumps(entry, ensure_ascii=False) if entry is not None else ""
        return LLMJudgment("NEUTRAL", "The output could not be parsed; nothing happened.", "", raw, None)
    if entry is None:
        return LLMJudgment(None, "", "", result.text, (result.json_error or "no_verdict_for_step")[:64])
    value = str(entry.get("label", "")).strip()
    raw = json.dumps(entry, ensure_ascii=False)
    if value not in STEP_LABELS:
        return LLMJudgment(None, "", "", raw, f"bad_label: {value[:40]!r}")
    summary = " ".join(str(entry.get("summary", "")).split()[:30])
    return LLMJudgment(value, summary, str(entry.get("analysis", "")), raw, None)


def knowledge(raw: str) -> dict[str, str]:
    """The knowledge answers a step's stored judgment holds (`LLMEpisodeJudge`), by category."""
    try:
        entry = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    if not isinstance(entry, dict):
        return {}
    return {c: entry[c] for c in KNOWLEDGE if isinstance(entry.get(c), str)}
