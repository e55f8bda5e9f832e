"""Domain types shared by every stage: Query, Observation, Step, Episode, Judgment.

These are the in-memory shapes stages pass to each other; `storage.models` holds
their rows. Screenshots travel as sha256 hashes into the object store, never as bytes
inside these types.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trajforge.actions import Action

Sha256 = str


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    UNKNOWN = "unknown"


class StepLabel(StrEnum):
    """GUI-Owl §6.3 step critic labels."""

    GOOD = "GOOD"
    NEUTRAL = "NEUTRAL"
    HARMFUL = "HARMFUL"


class Query(BaseModel):
    """A task for the policy, sampled from an app's navigation DAG."""

    model_config = ConfigDict(frozen=True)

    uid: str = Field(description="Content hash of app, instruction and path; stable across reruns.")
    app: str
    instruction: str = Field(min_length=1)
    slots: dict[str, str] = Field(default_factory=dict)
    path: list[dict[str, Any]] = Field(
        default_factory=list, description="Ground-truth moves: {screen, widget, value} from the app's start."
    )
    goal: dict[str, Any] = Field(
        default_factory=dict, description="What the verifier checks: app, screen, state."
    )
    source: str = Field("template", description="intent | template | llm | human")
    difficulty: str = Field("medium", pattern="^(easy|medium|hard)$")


class Observation(BaseModel):
    """What an environment shows after reset or a step."""

    model_config = ConfigDict(frozen=True)

    screenshot: Sha256
    width: int = Field(gt=0)
    height: int = Field(gt=0)
    elements: list[dict[str, Any]] | None = Field(None, description="a11y / element tree, if any.")
    meta: dict[str, Any] = Field(default_factory=dict)


class Step(BaseModel):
    """One policy decision: what it saw, what it said, what was done."""

    index: int = Field(ge=0)
    before: Observation
    after: Observation | None = None
    action: Action | None = Field(None, description="None when the output could not be parsed.")
    raw_output: str = ""
    parse_error: str | None = Field(None, description="Reason code when raw_output did not parse.")
    latency_ms: int = Field(0, ge=0)


class Episode(BaseModel):
    """One rollout of a policy on a query."""

    uid: str
    query_uid: str
    policy: str
    attempt: int = Field(0, ge=0)
    steps: list[Step] = Field(default_factory=list)
    outcome: Outcome = Outcome.UNKNOWN
    verifier_success: bool | None = None
    reason: str | None = Field(None, description="Why the episode ended early or was dropped.")


class Judgment(BaseModel):
    """A critic's verdict on a step or an episode; raw output kept beside the parse."""

    critic: str
    critic_version: str
    target: str = Field(pattern="^(step|episode)$")
    target_uid: str
    label: str
    score: float | None = None
    analysis: str = ""
    summary: str = Field("", description="At most 30 words (GUI-Owl §6.3).")
    raw_output: str = ""
    parse_error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
