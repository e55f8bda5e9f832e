"""An episode while the runner plays it, and how it ends: the policy's claim against the
environment's verifier or reward."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trajforge.actions import Action
from trajforge.domain import Observation
from trajforge.episode import Episode, Step
from trajforge.world.verify import UNVERIFIABLE, VerifierResult


@dataclass
class Play:
    """An episode while it is played."""

    steps: list[Step] = field(default_factory=list)
    status: str | None = None  # the policy's claim, when it terminated
    reason: str | None = None
    ended_by_env: bool = False
    over: bool = False
    policy_failure: dict[str, Any] | None = None
    sampling: dict[str, Any] | None = None
    observed: list[dict[str, Any]] = field(default_factory=list)  # `Episode.observed`, per step

    def record(
        self,
        index: int,
        obs: Observation,
        after: Observation,
        text: str,
        action: Action | None,
        error: str | None,
        latency_ms: int,
    ) -> None:
        """One step as played: the screen the policy saw and the one its action left, its answer, and
        what the environment recorded in its own language (`Episode.observed`: BrowserGym's text
        observation and the action string it executed)."""
        sent = after.meta.get("action") if action is not None and after is not obs else None
        self.observed.append({k: v for k, v in (("text", obs.meta.get("text")), ("sent", sent)) if v})
        self.steps.append(
            Step(
                index=index,
                screenshot=obs.screenshot,
                screenshot_after=after.screenshot,
                width=obs.width,
                height=obs.height,
                raw_output=text,
                parse_error=error,
                latency_ms=latency_ms,
                elements=obs.elements,
                action=action,
            )
        )

    def fault(self, reason: str, detail: dict[str, Any]) -> None:
        """The policy's endpoint failed: the episode ends, to be played again by a rerun."""
        self.reason, self.policy_failure, self.over = reason, detail, True

    def episode(self, uid: str, rollout: int, verdict: VerifierResult) -> Episode:
        # An environment that ends its own episodes decides it with its reward, one that judges at the
        # end (`VerifierResult.at_end`) with its checks unless the policy gave up or failed; elsewhere
        # the policy must also claim success (a verified state reached by chance is not a success).
        judged = verdict.at_end and self.status is None and self.policy_failure is None
        success = verdict.success and (self.status == "success" or self.ended_by_env or judged)
        reason = self.reason
        if not success and reason is None:
            reason = "gave_up" if self.status == "failure" else (verdict.failed or "terminated_early")
            if verdict.success and self.status is None:
                reason = "no_terminate"
        return Episode(
            uid=uid,
            rollout=rollout,
            steps=tuple(self.steps),
            outcome="unknown" if verdict.failed == UNVERIFIABLE else ("success" if success else "failure"),
            reason=None if success else reason,
            verdict=verdict,
            policy_failure=self.policy_failure,
            sampling=self.sampling,
            observed=tuple(self.observed) if any(self.observed) else (),
        )
