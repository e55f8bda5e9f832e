"""A VLM policy behind any OpenAI-compatible endpoint, through the gateway.

The prompt is a Jinja2 template for the configured action format; the user turn carries
the task, optional query-specific guidance (GUI-Owl §6.4), earlier steps as text (the parsed
action in words and the "conclusion" GUI-Owl keeps, §3) and the last k screenshots as images.

With `family` set (`policy.family`, `--family`), the request is the family's own instead
(`trajforge.families`): its published prompt, its history of screenshots and its own earlier
outputs, its image preprocessing, and its coordinate space, in which the runner parses the answer.
Without it, the prompt states and the runner reads coordinates in the format's coordinate space
(`coordinate_screen`: the smart-resized pixels for Qwen-style pixel formats), the same space the
exports write, so a model fine-tuned on an export is rolled out as it was trained.

Rollout 0 of a query is greedy; the others sample at `temperature`/`top_p` with a seed drawn
from the episode's id, so K rollouts differ (group statistics, GRPO) and a rerun repeats them; a
request the episode sent before goes with the next seed (`VLMPolicy._ask`). The settings each
episode used travel with every output (`PolicyOutput.sampling`).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pydantic import BaseModel, Field

from rollout.policies.base import PolicyOutput, observed
from trajforge.actions import CODECS, Screen, get_codec
from trajforge.actions.space import coordinate_screen, system_prompt
from trajforge.chat import image_part, text_part
from trajforge.domain import Observation, Query, StepView, describe
from trajforge.episode import Step
from trajforge.errors import ParseError
from trajforge.families import FAMILY_NAMES, PROMPT_VERSION, get_family
from trajforge.gateway import LLMGateway, LLMResult, request_hash
from trajforge.settings import PolicySettings

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
    history: Literal["actions", "conclusion", "raw"] = Field(
        "conclusion", description="What an earlier step says in the prompt (`policy.history`)."
    )
    temperature: float = Field(0.8, ge=0, le=2, description="Temperature of rollouts after the first.")
    top_p: float = Field(0.95, gt=0, le=1)
    greedy_first: bool = Field(True, description="Rollout 0 is greedy.")
    seed: int = Field(0, description="Base of the per-episode sampling seed.")
    max_tokens: int | None = Field(1024, ge=1)
    family: str | None = Field(None, description="A model family (`trajforge.families`); sets `format`.")

    def model_post_init(self, _context: object) -> None:
        if self.family is not None:
            if self.family not in FAMILY_NAMES:
                raise ValueError(f"family {self.family!r} is not one of {', '.join(FAMILY_NAMES)}")
            self.format = get_family(self.family).action_format
        if self.format not in CODECS:
            raise ValueError(f"format {self.format!r} is not one of {', '.join(CODECS)}")

    @classmethod
    def from_settings(cls, policy: PolicySettings, **fields: Any) -> VLMPolicyConfig:
        """The run config's `policy:` section, plus name, model, format (a family in `fields` wins)."""
        return cls(**{**policy.model_dump(), **fields})

    def sampling(self, rollout: int, episode_seed: str) -> Sampling:
        """Rollout k's sampling: greedy for the first (when `greedy_first`), else temperature and
        top_p with a seed from the episode's id, so a rerun repeats the request (and hits the cache)."""
        if rollout == 0 and self.greedy_first:
            return Sampling(0.0, None, None)
        digest = hashlib.sha256(f"{self.seed}:{episode_seed}".encode()).hexdigest()
        return Sampling(self.temperature, self.top_p, int(digest[:8], 16) & 0x7FFFFFFF)


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_p: float | None
    seed: int | None

    def as_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}


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
        self._sampling = Sampling(0.0, None, None)
        self._parts: dict[str, dict[str, Any]] = {}  # the window's screenshots, encoded
        self._turns: list[Step] = []  # a family's history: each step's screenshot and own output
        self._asked: Counter[str] = Counter()  # the episode's requests, by their messages' hash
        self.family = get_family(config.family) if config.family else None

    def start(self, query: Query, seed: str, guidance: str | None = None, rollout: int = 0) -> None:
        self._query, self._guidance = query, guidance
        self._history, self._images = [], deque(maxlen=self.config.history_images)
        self._parts, self._turns, self._asked = {}, [], Counter()
        self._sampling = self.config.sampling(rollout, seed)

    async def act(self, observation: Observation) -> PolicyOutput:
        assert self._query is not None, "start() the policy before act()"
        if self.family is not None:
            return await self._act_as_family(observation)
        self._images.append(observation.screenshot)
        screen = coordinate_screen(self.config.format, observation.width, observation.height)
        system = system_prompt(self.config.format, screen, self.config.system_template)
        history = self._history[-self.config.history_steps :] if self.config.history_steps else []
        user = _TEMPLATES.get_template("user_turn.j2").render(
            instruction=self._query.instruction,
            guidance=self._guidance,
            history=history,
            images=len(self._images),
        )
        # each screenshot is read and encoded once, however many steps it stays in the window
        self._parts = {sha: self._parts.get(sha) or image_part(self.frames(sha)) for sha in self._images}
        content = [text_part(user)] + [self._parts[sha] for sha in self._images]
        result = await self._ask(
            [{"role": "system", "content": system}, {"role": "user", "content": content}]
        )
        self._history.append(
            history_line(result.text, self.config.format, observation, self.config.history, screen)
        )
        return PolicyOutput(
            result.text,
            self.config.format,
            result.prompt_tokens,
            result.completion_tokens,
            sampling=self._sampling.as_dict(),
            screen=screen,
        )

    async def _ask(self, messages: list[dict[str, Any]]) -> LLMResult:
        """One policy call with the episode's sampling.

        A sampled request the episode already sent (the same screen and no history that changed, as
        AgentCPM-GUI sends after an answer that did nothing) goes with the next seed: a model that
        samples would draw again, where the same seed would repeat the reply, and the response cache
        would answer it without a call. A rerun sends the same seeds in the same order (and hits the
        cache). A greedy request is the same answer however often it is sent."""
        seed = self._sampling.seed
        if seed is not None:
            asked = request_hash({"messages": messages})
            seed = (seed + self._asked[asked]) & 0x7FFFFFFF
            self._asked[asked] += 1
        return await self.gateway.chat(
            messages,
            stage="policy",
            model=self.config.model,
            temperature=self._sampling.temperature,
            top_p=self._sampling.top_p,
            max_tokens=self.config.max_tokens,
            seed=seed,
        )

    async def _act_as_family(self, observation: Observation) -> PolicyOutput:
        """One step as the family's own inference code asks it: its messages, its images, its space."""
        assert self.family is not None and self._query is not None
        family, used = self.family, dict[str, dict[str, Any]]()

        def image(sha: str) -> dict[str, Any]:
            # each screenshot is read and encoded once, however many steps the family keeps it
            used[sha] = used.get(sha) or self._parts.get(sha) or family.image(self.frames(sha))
            return used[sha]

        messages = family.messages(
            self._query.instruction, observed(observation), self._turns, observation.screenshot, image
        )
        self._parts = used  # the window the family sent: older screenshots are let go
        result = await self._ask(messages)
        self._turns.append(
            Step(
                index=len(self._turns),
                screenshot=observation.screenshot,
                width=observation.width,
                height=observation.height,
                raw_output=result.text,
            )
        )
        return PolicyOutput(
            result.text,
            family.action_format,
            result.prompt_tokens,
            result.completion_tokens,
            sampling={**self._sampling.as_dict(), "family": family.name, "prompt_version": PROMPT_VERSION},
            screen=family.coordinate_screen(observation.width, observation.height),
        )


_CONCLUSION_TAG = re.compile(r"<conclusion>(.*?)(?:</conclusion>|$)", re.S | re.I)
_CONCLUSION_LINE = re.compile(r"^\s*conclusion\s*[:：]\s*(.+)$", re.I | re.M)
RAW_CHARS = 300


def history_line(
    text: str, fmt: str, observation: Observation, mode: str, screen: Screen | None = None
) -> str:
    """What the prompt's history says about one step: the raw output (cut), the parsed action in
    words, or the model's own conclusion (a `<conclusion>` block or a `Conclusion:` line, else the
    format's intent, e.g. Mobile-R1's <action>) with the action in words. `screen`: the space the
    output's coordinates live in (default: the observation's pixels)."""
    if mode == "raw":
        return " ".join(text.split())[:RAW_CHARS]
    try:
        action = get_codec(fmt).parse(text, screen or observed(observation))
    except ParseError as exc:
        return f"(the output could not be parsed: {exc.reason})"
    words = describe(action, StepView.observed(action, observation, observation))
    if mode == "actions":
        return words
    found = _CONCLUSION_TAG.search(text) or _CONCLUSION_LINE.search(text)
    conclusion = found[1] if found else action.intent
    conclusion = " ".join((conclusion or "").split())[:RAW_CHARS]
    return f"{words}. {conclusion}" if conclusion else words
