"""CSRS answers written by a thinking model, anchored (Step-GUI §2.1.4): each knowledge prompt
is answered from the screenshots, told what the calibrated trajectory established; an answer
that is empty or contradicts the anchor is dropped with its reason."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from critics.llm import TEMPLATES
from storage.samples import CATEGORIES
from trajforge.chat import image_part, text_part
from trajforge.domain import EMPTY_ANSWER, blank_answer
from trajforge.errors import LLMError
from trajforge.gateway import LLMGateway
from trajforge.progress import gather
from trajforge.sample import SampleDraft

_PROMPTS = TEMPLATES.get_template("csrs_prompts.j2").module

WRITTEN_BY_MODEL = CATEGORIES[:5]  # reasoning a thinking model writes; 6 and 7 are the recorded actions


async def write_with_model(
    drafts: list[SampleDraft],
    gateway: LLMGateway,
    frames: Callable[[str], bytes],
    share: float = 1.0,
    judged: dict[tuple[Any, int | None], Judged] | None = None,
) -> None:
    """Step-GUI's extraction by a thinking model, anchored (§2.1.4): it answers a step's knowledge
    prompts from the screenshots before and after the step, told what the calibrated trajectory
    established (the outcome, the step's label, the steps done before). One request per step answers
    all of that step's categories as one JSON object, for the `share` of steps `chosen` picks (the
    others keep their template answers): at most one call per step.

    The template answer stays in the payload as `reference`; provenance gains the model and
    the request hash (the gateway's cache key). An empty answer drops the sample
    (`llm_empty_response`); where the reply has no answer for a category (no JSON object, or no string
    under its name), the template answer stands and provenance says why (`writer_error`); a verdict
    that contradicts the anchor (a self-reflection whose label differs, a state verification whose
    yes/no differs) drops it (`llm_contradicts_anchor`). A draft dropped as `empty_answer` (its
    element tree had no text) is kept when the model reads something from the screenshots.

    `judged` holds, by (episode uid, step index), what the model critics' episode judge already
    answered for a step (`critics.llm.LLMEpisodeJudge`, on the writer's own endpoint and model): those
    steps take its answers and send no request of their own. Its request did not know the anchor,
    so the same verdict check holds its answers to it after the fact.
    """
    steps: dict[tuple[Any, int | None], list[SampleDraft]] = defaultdict(list)
    for d in drafts:
        if d.category in WRITTEN_BY_MODEL and d.reason in (None, EMPTY_ANSWER):
            steps[(d.provenance["episode"], d.step_index)].append(d)
    model = gateway.model_for(STAGE)

    async def one(key: tuple[Any, int | None], group: list[SampleDraft]) -> None:
        given = (judged or {}).get(key)
        if given is not None:
            _answer(group, given.answers, {"model": given.model, "judgment": given.version})
            return
        images = list(dict.fromkeys(sha for d in group for sha in d.payload["images"]))
        after = group[0].context.get("after")
        if after and after not in images and any(d.category in SHOWN_AFTER for d in group):
            images.append(after)
        content = [text_part(step_prompt(group))] + [image_part(frames(sha)) for sha in images]
        try:
            result = await gateway.chat([{"role": "user", "content": content}], stage=STAGE, json_mode=True)
        except LLMError as exc:  # recorded by the gateway; a rerun retries only this request
            for draft in group:  # the template answers stand, and say why
                draft.provenance = {**draft.provenance, "model": model, "writer_error": exc.reason}
            return
        answers = result.data if isinstance(result.data, dict) else {}
        _answer(group, answers, {"model": model, "prompt_hash": result.request_hash}, result.json_error)

    await gather("CSRS steps written", (one(key, g) for key, g in steps.items() if chosen(key, share)))


@dataclass(frozen=True)
class Judged:
    """A step's knowledge answers from the model critics' request (`critics.llm.knowledge`)."""

    answers: dict[str, Any]
    model: str
    version: str  # the judge's critic version


def _answer(
    group: list[SampleDraft], answers: dict[str, Any], source: dict[str, Any], error: str | None = None
) -> None:
    """A step's drafts take the model's answers; a category without one keeps its template answer
    and says why."""
    for draft in group:
        answer = answers.get(draft.category)
        if not isinstance(answer, str):  # no answer of its own: the template's stands, and says why
            why = error or "no_answer_for_category"
            draft.provenance = {**draft.provenance, "model": source["model"], "writer_error": why}
            continue
        draft.payload = {**draft.payload, "reference": draft.payload["response"], "response": answer.strip()}
        draft.provenance = {**draft.provenance, **source}
        draft.reason = _verdict(draft)


STAGE = "csrs.step"
SHOWN_AFTER = ("effect_prediction", "progress_tracking")


def chosen(step: tuple[Any, int | None], share: float) -> bool:
    """Whether the model writes this step's answers: a stable hash of the step under `share`."""
    digest = hashlib.sha256(json.dumps(step, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def _verdict(draft: SampleDraft) -> str | None:
    if blank_answer(draft.payload["response"]):
        return "llm_empty_response"
    if contradicts(draft):
        return "llm_contradicts_anchor"
    return None  # the model read the screenshot where the element tree had no text


def step_prompt(group: list[SampleDraft]) -> str:
    """One step's knowledge prompts in one request, with the facts its calibration established."""
    facts = group[0].context
    step = getattr(_PROMPTS, "step")  # noqa: B009 (a Jinja2 macro)
    return str(
        step(
            [(d.category, d.payload["prompt"], d.payload.get("polarity")) for d in group],
            ("success" if facts["outcome"] else "failure") if facts else None,
            facts.get("label"),
            "; ".join(facts.get("history") or []) or "none",
            any(d.category in SHOWN_AFTER for d in group) and bool(facts.get("after")),
        )
    ).strip()


def contradicts(draft: SampleDraft) -> bool:
    """Whether a model's verdict differs from the anchor: the step's label for a self-reflection,
    the structured yes/no of a state verification."""
    words = draft.payload["response"].strip().casefold()
    if draft.category == "self_reflection" and draft.context.get("label"):
        said = next((w for w in ("good", "neutral", "harmful") if words.startswith(w)), None)
        return said != str(draft.context["label"]).casefold()
    wanted = draft.payload.get("polarity")
    if draft.category == "state_verification" and wanted is not None:
        said = next((w for w in ("yes", "no") if words.startswith(w)), None)
        return said != ("yes" if wanted else "no")
    return False
