"""Programmatic verifiers: did the final state meet the task's constraints?

Like android_world's `is_successful`, they read the device state, never screenshots,
and name the first constraint that failed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trajforge.world.device import SimDevice
from trajforge.world.model import LAUNCHER


class Goal(BaseModel):
    """What a task requires of the final state."""

    model_config = ConfigDict(frozen=True)

    app: str
    screen: str
    state: dict[str, str] = Field(default_factory=dict, description="Slot values the task set.")

    def constraints(self) -> int:
        return 1 + len(self.state)

    @classmethod
    def of(cls, goal: dict[str, Any]) -> Goal | None:
        """A query's stored goal; None where it names no app and screen (a suite task's query)."""
        if not goal.get("app") or not goal.get("screen"):
            return None
        return cls(app=goal["app"], screen=goal["screen"], state=dict(goal.get("state") or {}))

    @property
    def key(self) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        """The goal as a hashable value (its state sorted)."""
        return self.app, self.screen, tuple(sorted(self.state.items()))

    def satisfied(self, values: dict[str, str]) -> frozenset[str]:
        """The goal's slots these values already have right."""
        return frozenset(k for k, v in self.state.items() if values.get(k) == v)


@dataclass(frozen=True)
class VerifierResult:
    success: bool
    failed: str | None = None  # which constraint: "app", "screen" or "slot:<name>"
    detail: str = ""
    reward: float | None = None  # an environment's own reward, where it computes one (MiniWoB++'s raw reward)
    # The verdict is the outcome however the episode ended, as OSWorld's checker at the end decides a
    # task: `max_steps` too, unless the policy gave up (desktop suites). Elsewhere the policy must
    # also claim success: a verified state reached by chance is not one.
    at_end: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"success": self.success, "failed": self.failed, "detail": self.detail}
        return out if self.reward is None else {**out, "reward": self.reward}


def verify(goal: Goal, device: SimDevice) -> VerifierResult:
    """Check the device's current state against the goal, constraint by constraint."""
    return check_state(goal, device.state.app, device.state.screen, device.slot_values())


def check_state(goal: Goal, app: str | None, screen: str, values: dict[str, str]) -> VerifierResult:
    """The verifier on a plain state (the web backend reads it from the page)."""
    if app != goal.app:
        return VerifierResult(False, "app", f"expected app {goal.app!r}, device shows {app or LAUNCHER!r}")
    if screen != goal.screen:
        return VerifierResult(False, "screen", f"expected screen {goal.screen!r}, got {screen!r}")
    for slot, want in sorted(goal.state.items()):
        got = values.get(slot)
        if got != want:
            return VerifierResult(False, f"slot:{slot}", f"expected {slot}={want!r}, got {got!r}")
    return VerifierResult(True)


UNVERIFIABLE = "unverifiable"  # the app exports no readable state: no verifier verdict, no anchor


def check_exported_state(goal: dict[str, Any], exported: str) -> VerifierResult:
    """The verifier on the JSON state an app exports ({app, screen, slots}): web page, device file.

    An app that exports nothing (or no JSON) has no verifier: the result names UNVERIFIABLE,
    and the runner stores no anchor, leaving the outcome to the calibrated critics and humans.
    """
    if not exported.strip():
        return VerifierResult(False, UNVERIFIABLE, "the app exported no state")
    try:
        state = json.loads(exported)
    except json.JSONDecodeError:
        return VerifierResult(False, UNVERIFIABLE, "the app's exported state is not JSON")
    return check_state(
        Goal.model_validate(goal), state.get("app"), state.get("screen", ""), state.get("slots", {})
    )
