"""Interface validation (GUI-Owl §6.2 step 5): replay the path, keep it only if the verifier agrees.

GUI-Owl checks queries against the live app; we replay the ground-truth path in the
simulated device, so a spec or sampler bug shows up as a dropped query with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from querygen.sampling import MAX_ACTIONS
from querygen.synthesis import Draft
from trajforge.actions import Action
from trajforge.appspec import AppSpec
from trajforge.world.device import SimDevice
from trajforge.world.oracle import OracleError, replay
from trajforge.world.verify import verify


@dataclass
class Validation:
    ok: bool
    reason: str | None = None
    detail: str = ""
    actions: list[Action] = field(default_factory=list)


class InterfaceValidator:
    """One simulated device per app, reused across queries (no pixels are drawn)."""

    def __init__(self, spec: AppSpec) -> None:
        self.spec = spec
        self.device = SimDevice([spec])

    def check(self, draft: Draft) -> Validation:
        try:
            actions = replay(self.device, self.spec.name, list(draft.path.moves))
        except OracleError as exc:
            return Validation(False, f"validation_{exc.reason}", str(exc))
        if not self.spec.min_actions <= len(actions) <= MAX_ACTIONS:
            return Validation(
                False,
                "path_length_out_of_range",
                f"{len(actions)} actions; keep paths {self.spec.min_actions}-{MAX_ACTIONS}",
                actions,
            )
        result = verify(draft.goal, self.device)
        if not result.success:
            return Validation(False, "verifier_rejected", f"{result.failed}: {result.detail}", actions)
        return Validation(True, actions=actions)
