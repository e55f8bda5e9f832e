"""The policy protocol: given the task and what the device shows, say the next action as text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from trajforge.actions import Screen
from trajforge.domain import Observation, Query


def observed(observation: Observation) -> Screen:
    """The screen an observation shows. A policy formats its action for this screen, because the
    runner parses it for this screen: a web page or a device need not be the default 1080x2400."""
    return Screen(observation.width, observation.height)


@dataclass(frozen=True)
class PolicyOutput:
    """The model's raw words; the runner parses them with `format` and keeps both."""

    text: str
    format: str  # a codec name: qwen, agentcpm, uitars, mobiler1, androidworld, canonical
    prompt_tokens: int = 0
    completion_tokens: int = 0
    sampling: dict[str, Any] | None = None  # temperature, top_p, seed of a sampled model call
    # The pixel space the text's coordinates live in (a model's smart-resized image); None: the
    # observation's own screen, which the built-in policies format for.
    screen: Screen | None = None


class Policy(Protocol):
    """A versioned policy. `start` begins an episode; `act` is called once per step."""

    name: str
    version: int

    def start(self, query: Query, seed: str, guidance: str | None = None, rollout: int = 0) -> None:
        """Begin an episode: `seed` makes its randomness repeatable, `rollout` is k of K for the query."""
        ...

    async def act(self, observation: Observation) -> PolicyOutput: ...
