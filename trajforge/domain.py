"""Domain types shared by every stage: Query and Observation.

These are the in-memory shapes stages pass to each other; `storage.models` holds
their rows. Screenshots travel as sha256 hashes into the object store, never as bytes
inside these types.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Sha256 = str


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
