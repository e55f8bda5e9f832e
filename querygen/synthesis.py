"""Instruction synthesis and refinement (GUI-Owl §6.2 steps 3-4, AgentCPM-GUI §3.4).

Offline: a constrained step-by-step instruction from widget phrases, refined with the
terminal screen's parameterised intent templates when one covers the path. Online:
the same metadata through the gateway, synthesised then refined few-shot; a malformed
model answer drops that query with a reason, keeping the raw output.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from querygen.sampling import SampledPath, goal_of
from trajforge.appspec import AppSpec
from trajforge.errors import LLMError
from trajforge.gateway import LLMGateway
from trajforge.world.model import fill
from trajforge.world.verify import Goal

_TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"), undefined=StrictUndefined, autoescape=False
)
_REF = re.compile(r"\{(\w+)\}")
_DEFAULT_PHRASE = {
    "en": {
        "button": "tap {label}",
        "list": "choose {value}",
        "input": "search for {value}",
        "toggle": "turn {label} {value}",
    },
    "zh": {
        "button": "点{label}",
        "list": "选择{value}",
        "input": "搜索{value}",
        "toggle": "把{label}设为{value}",
    },
}


@dataclass
class Draft:
    """A query candidate: its path, its words, what it requires, where the words came from."""

    path: SampledPath
    instruction: str
    constrained: str
    goal: Goal
    source: str  # intent | template | llm
    raw: dict[str, str] = field(default_factory=dict)  # model outputs, kept beside the result
    reason: str | None = None  # set when the draft is dropped
    detail: str = ""


def metadata(spec: AppSpec, path: SampledPath) -> dict[str, Any]:
    """Screen descriptions and slot-value pairs along the path (GUI-Owl §6.2 step 2)."""
    screens = []
    for sid in path.screens():
        screen = spec.screens[sid]
        screens.append(
            {"id": sid, "title": fill(screen.title, path.state), "description": screen.description}
        )
    return {
        "app": spec.title,
        "locale": spec.locale,
        "screens": screens,
        "slots": dict(path.state),
        "steps": [step_phrase(spec, path, i) for i in range(len(path.moves))],
    }


def step_phrase(spec: AppSpec, path: SampledPath, index: int) -> str:
    move = path.moves[index]
    widget = spec.widget(move.screen, move.widget)
    template = widget.phrase or _DEFAULT_PHRASE[spec.locale][widget.kind]
    text = template.replace("{label}", fill(widget.label, path.state))
    return fill(text, path.state, move.value)


def constrained_instruction(spec: AppSpec, path: SampledPath) -> str:
    steps = [step_phrase(spec, path, i) for i in range(len(path.moves))]
    if spec.locale == "zh":
        return f"打开{spec.title}，然后" + "，然后".join(steps)
    return f"Open {spec.title}, then " + ", then ".join(steps)


def template_draft(spec: AppSpec, path: SampledPath, rng: random.Random) -> Draft:
    """Offline: an intent template that covers the path, else the constrained instruction."""
    constrained = constrained_instruction(spec, path)
    usable = [t for t in spec.screens[path.end].intents if set(_REF.findall(t)) <= set(path.state)]
    if usable:
        # Prefer the intents that state most of what the path chose, so the task is not vaguer
        # than the path (a search-then-sort path should say so); pick among them at random.
        best = max(len(set(_REF.findall(t))) for t in usable)
        intent = rng.choice([t for t in usable if len(set(_REF.findall(t))) == best])
        return Draft(
            path, fill(intent, path.state), constrained, goal_of(path, _REF.findall(intent)), "intent"
        )
    return Draft(path, constrained, constrained, goal_of(path, list(path.state)), "template")


def missing_values(text: str, goal: Goal) -> list[str]:
    """Goal values the instruction does not mention (case-insensitive)."""
    folded = text.casefold()
    return [v for v in goal.state.values() if v.casefold() not in folded]


async def llm_draft(spec: AppSpec, path: SampledPath, gateway: LLMGateway) -> Draft:
    """Synthesis then few-shot refinement through the gateway; failures set `reason`."""
    draft = Draft(path, "", constrained_instruction(spec, path), goal_of(path, list(path.state)), "llm")
    instruction = await _ask(gateway, draft, "synthesize", "instruction", **metadata(spec, path))
    if instruction is None:
        return draft
    values = list(draft.goal.state.values())
    query = await _ask(gateway, draft, "refine", "query", instruction=instruction, values=values)
    if query is None:
        return draft
    draft.instruction = query
    lost = missing_values(query, draft.goal)
    if lost:
        draft.reason, draft.detail = "refinement_lost_constraint", f"missing {lost}"
    return draft


_MALFORMED = {"synthesize": "synthesis_malformed", "refine": "refinement_malformed"}


async def _ask(gateway: LLMGateway, draft: Draft, step: str, key: str, **context: Any) -> str | None:
    """One JSON-mode call with `{step}.j2`; the raw answer is kept, a malformed one sets the reason."""
    prompt = _TEMPLATES.get_template(f"{step}.j2").render(**context)
    try:
        result = await gateway.chat(
            [{"role": "user", "content": prompt}], stage=f"querygen.{step}", json_mode=True
        )
    except LLMError as exc:  # this query is dropped with the endpoint's answer; the others go on
        draft.raw[step] = ""
        draft.reason = exc.reason
        draft.detail = f"{exc} (HTTP {exc.status})" if exc.status is not None else str(exc)
        return None
    draft.raw[step] = result.text
    value = _field(result.data, key)
    if value is None:
        draft.reason, draft.detail = _MALFORMED[step], result.json_error or f"no {key!r} string"
    return value


def _field(data: Any, key: str) -> str | None:
    value = data.get(key) if isinstance(data, dict) else None
    return value.strip() if isinstance(value, str) and value.strip() else None
