"""A VLM policy behind any OpenAI-compatible endpoint, through the gateway.

The prompt is a Jinja2 template for the configured action format; the user turn carries
the task, optional query-specific guidance (GUI-Owl §6.4), earlier steps as text (the
"conclusions" GUI-Owl keeps) and the last k screenshots as images.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pydantic import BaseModel, Field

from rollout.policies.base import PolicyOutput, observed
from trajforge.actions import CODECS
from trajforge.actions.space import system_prompt
from trajforge.domain import Observation, Query
from trajforge.gateway import LLMGateway, image_part, text_part

_TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"), undefined=StrictUndefined, autoescape=False
)


class VLMPolicyConfig(BaseModel):
    name: str = Field("vlm", min_length=1, description="Policy name recorded with every episode.")
    version: int = Field(0, ge=0)
    model: str | None = Field(None, description="Model name at the endpoint (default: TRAJFORGE_LLM_MODEL).")
    format: str = Field("qwen", description="Action format the model speaks (a codec name).")
    system_template: str = Field(
        "mobile_use.j2",
        description="Jinja2 system prompt stating the action space, in trajforge/actions/templates "
        "(the one exports put in every training row).",
    )
    history_images: int = Field(1, ge=1, le=16, description="Screenshots sent: the last k.")
    history_steps: int = Field(10, ge=0, le=100, description="Earlier steps sent as text.")
    temperatures: list[float] = Field(
        [0.0], min_length=1, description="Rollout k samples at temperatures[k % n]."
    )
    max_tokens: int | None = Field(512, ge=1)

    def model_post_init(self, _context: object) -> None:
        if self.format not in CODECS:
            raise ValueError(f"format {self.format!r} is not one of {', '.join(CODECS)}")


class VLMPolicy:
    """Args: frames maps a screenshot hash to its PNG bytes (the object store or the env's cache)."""

    def __init__(self, config: VLMPolicyConfig, gateway: LLMGateway, frames: Callable[[str], bytes]) -> None:
        self.config = config
        self.name, self.version = config.name, config.version
        self.gateway = gateway
        self.frames = frames
        self._query: Query | None = None
        self._guidance: str | None = None
        self._history: list[str] = []
        self._images: deque[str] = deque(maxlen=config.history_images)
        self._temperature = 0.0
        self._seed = 0

    def start(self, query: Query, seed: str, guidance: str | None = None, rollout: int = 0) -> None:
        self._query, self._guidance = query, guidance
        self._history, self._images = [], deque(maxlen=self.config.history_images)
        self._temperature = self.config.temperatures[rollout % len(self.config.temperatures)]
        self._seed = rollout

    async def act(self, observation: Observation) -> PolicyOutput:
        assert self._query is not None, "start() the policy before act()"
        self._images.append(observation.screenshot)
        system = system_prompt(self.config.format, observed(observation), self.config.system_template)
        history = self._history[-self.config.history_steps :] if self.config.history_steps else []
        user = _TEMPLATES.get_template("user_turn.j2").render(
            instruction=self._query.instruction,
            guidance=self._guidance,
            history=history,
            images=len(self._images),
        )
        content = [text_part(user)] + [image_part(self.frames(sha)) for sha in self._images]
        result = await self.gateway.chat(
            [{"role": "system", "content": system}, {"role": "user", "content": content}],
            stage="policy",
            model=self.config.model,
            temperature=self._temperature,
            max_tokens=self.config.max_tokens,
            seed=self._seed,
        )
        self._history.append(" ".join(result.text.split())[:300])
        return PolicyOutput(result.text, self.config.format, result.prompt_tokens, result.completion_tokens)
