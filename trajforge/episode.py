"""The spine's two records: a `Step` and an `Episode`, as the runner emits them and every stage
reads them back.

The runner builds them while it plays; `storage.episodes` maps them to rows and back, in one
place. What a stage shows of a step is its one view (`Step.view`, `trajforge.domain.StepView`; a
critic's is the same view with only what the device reports, `critics.view.critic_view`) or a
function of it (`annotation.tasks.show_step`), never a copy with its own fields.
Screenshots are sha256 hashes into the object store.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from trajforge.actions.model import Action
from trajforge.domain import Sha256, StepView
from trajforge.world.verify import UNVERIFIABLE, VerifierResult

Outcome = Literal["success", "failure", "unknown"]


class Step(BaseModel):
    """One step: the screen the policy saw, what it answered, and the screen its action left."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    id: int = Field(0, description="The stored row's id; 0 until stored (row ids start at 1).")
    index: int = Field(ge=0)
    screenshot: Sha256 = Field(description="The screen before the action.")
    screenshot_after: Sha256 | None = Field(None, description="The screen after it (None: not recorded).")
    width: int
    height: int
    raw_output: str = Field("", description="The policy's answer, verbatim.")
    parse_error: str | None = Field(None, description="Why the answer did not parse (a reason code).")
    latency_ms: int = 0
    elements: list[dict[str, Any]] | None = Field(
        None, description="The element tree the device reported before the action (None: none)."
    )
    action: Action | None = Field(
        None, description="The parsed action (read back from its stored JSON); None when it did not parse."
    )

    @property
    def after(self) -> Sha256:
        return self.screenshot_after or self.screenshot

    @field_serializer("action")
    def _stored_action(self, action: Action | None) -> dict[str, Any] | None:
        return None if action is None else action.stored()

    def view(self) -> StepView:
        """The step as critics, curation and annotation see it."""
        return StepView.of(
            self.action,
            self.parse_error,
            self.screenshot,
            self.after,
            self.elements or [],
            self.width,
            self.height,
            self.raw_output,
        )

    def row(self) -> dict[str, Any]:
        """The step's columns (`storage.models.Step`), less the ids storage assigns."""
        return self.model_dump(exclude={"id"})


class Attempt(BaseModel):
    """A try of an episode that a device fault ended; the episode was played again elsewhere."""

    model_config = ConfigDict(frozen=True)

    attempt: int
    device: str
    reason: str = Field(description="device_crashed | device_hung | step_timeout | episode_timeout")


class Episode(BaseModel):
    """A finished episode: its steps, how it ended, and what the environment's verifier said."""

    model_config = ConfigDict(frozen=True)

    uid: str = Field(description="sha256 of round, query uid and rollout number: stable across reruns.")
    rollout: int = Field(0, ge=0, description="Which of the query's K rollouts.")
    device: str | None = Field(None, description="The device slot that played it (None: none did).")
    steps: tuple[Step, ...] = ()
    outcome: Outcome
    reason: str | None = Field(None, description="Why it is not a success (a reason code); None on success.")
    verdict: VerifierResult | None = Field(None, description="The environment's verifier or reward.")
    policy_failure: dict[str, Any] | None = Field(
        None, description="The model endpoint's error (HTTP status, message) or timeout that ended it."
    )
    sampling: dict[str, Any] | None = Field(None, description="The policy's sampling parameters, if any.")
    observed: tuple[dict[str, Any], ...] = Field(
        (),
        description="Per step, what an environment that has its own observation and action language "
        "recorded (BrowserGym: `text`, the sha256 of its text observation's blob; `sent`, the action "
        "string it executed); empty elsewhere.",
    )
    failures: tuple[Attempt, ...] = Field((), description="Earlier tries that a device fault ended.")

    @property
    def anchor_verdict(self) -> VerifierResult | None:
        """The verifier's verdict, where the environment has a verifier (an anchor for the critics)."""
        return None if self.verdict is None or self.verdict.failed == UNVERIFIABLE else self.verdict

    @classmethod
    def exhausted(cls, uid: str, rollout: int, failures: list[Attempt]) -> Episode:
        """An episode every try of which a device fault ended: a failure with no steps."""
        return cls(
            uid=uid,
            rollout=rollout,
            outcome="failure",
            reason="device_retries_exhausted",
            failures=tuple(failures),
        )
