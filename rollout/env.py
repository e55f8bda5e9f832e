"""The one protocol every environment backend implements (sim today; web and android next)."""

from __future__ import annotations

from typing import Protocol

from trajforge.actions import Action
from trajforge.domain import Observation, Query
from trajforge.world.verify import VerifierResult


class Environment(Protocol):
    """A device an episode runs on."""

    def reset(self, task: Query) -> Observation:
        """Bring the device to the task's starting state (the launcher) and observe it."""
        ...

    def step(self, action: Action) -> Observation:
        """Apply one action and observe the result.

        Raises:
            trajforge.errors.DeviceError: the device crashed or hung.
        """
        ...

    def verify(self) -> VerifierResult:
        """The task's programmatic verifier on the current state (the episode's anchor)."""
        ...

    def close(self) -> None: ...
