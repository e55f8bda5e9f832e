"""CSRS answers written by a thinking model, anchored (Step-GUI §2.1.4): each knowledge prompt
is answered from the screenshots, told what the calibrated trajectory established; an answer
that is empty or contradicts the anchor is dropped with its reason."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from critics.llm import TEMPLATES
from storage.samples import CATEGORIES
from trajforge.domain import EMPTY_ANSWER, blank_answer
from trajforge.gateway import LLMGateway, image_part, text_part
from trajforge.sample import SampleDraft

_PROMPTS = TEMPLATES.get_template("csrs_prompts.j2").module

WRITTEN_BY_MODEL = CATEGORIES[:5]  # reasoning a thinking model writes; 6 and 7 are the recorded actions


async def write_with_model(
    drafts: list[SampleDraft], gateway: LLMGateway, frames: Callable[[str], bytes]
) -> None:
    """Step-GUI's extraction by a thinking model, anchored (§2.1.4): it answers each knowledge
    prompt from the screenshots before and after the step, told what the calibrated trajectory
    established (the outcome, the step's label, the steps done before).

    The template answer stays in the payload as `reference`; provenance gains the model and
    the request hash (the gateway's cache key). An empty answer drops the sample
    (`llm_empty_response`); a verdict that contradicts the anchor (a self-reflection whose label
    differs, a state verification whose yes/no differs) drops it (`llm_contradicts_anchor`).
    A draft dropped as `empty_answer` (its element tree had no text) is kept when the model
    reads something from the screenshots.
    """

    async def one(draft: SampleDraft) -> None:
        images = list(draft.payload["images"])
        after = draft.context.get("after")
        if after and after not in images and draft.category in ("effect_prediction", "progress_tracking"):
            images.append(after)
        content = [text_part(anchored_prompt(draft))] + [image_part(frames(sha)) for sha in images]
        result = await gateway.chat([{"role": "user", "content": content}], stage=f"csrs.{draft.category}")
        draft.payload = {
            **draft.payload,
            "reference": draft.payload["response"],
            "response": result.text.strip(),
        }
        draft.provenance = {
            **draft.provenance,
            "model": gateway.settings.model,
            "prompt_hash": result.request_hash,
        }
        if blank_answer(draft.payload["response"]):
            draft.reason = "llm_empty_response"
        elif contradicts(draft):
            draft.reason = "llm_contradicts_anchor"
        else:  # the model read the screenshot where the element tree had no text
            draft.reason = None

    await asyncio.gather(
        *(one(d) for d in drafts if d.category in WRITTEN_BY_MODEL and d.reason in (None, EMPTY_ANSWER))
    )


def anchored_prompt(draft: SampleDraft) -> str:
    """The knowledge prompt plus the facts the trajectory's calibration established."""
    facts = draft.context
    if not facts:
        return str(draft.payload["prompt"])
    anchored = getattr(_PROMPTS, "anchored")  # noqa: B009 (a Jinja2 macro)
    return str(
        anchored(
            draft.payload["prompt"],
            draft.category,
            "success" if facts["outcome"] else "failure",
            facts["label"],
            "; ".join(facts["history"]) or "none",
            draft.payload.get("polarity") if draft.category == "state_verification" else None,
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
