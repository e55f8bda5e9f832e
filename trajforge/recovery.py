"""Error-recovery probes (InfiGUI-R1 §3.2.3): what curation asks a device to try, and what it saw.

Curation finds the prone-to-error steps of a round (`curation.recovery`): a step `s` of a
successful reference trajectory where another rollout, after the same actions, sampled a different
action and failed (or the step critic called it HARMFUL). A device then restores the state
before `s`, plays the wrong action, and tries escapes (`rollout.recovery`). Only an escape that
is observed to bring back the screen of `s`, after which the reference's remaining actions still
succeed, makes error-escape and back-on-track samples.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trajforge.actions import Action
from trajforge.domain import Query, StepView

# Why a probe made no samples; each is counted in the round's recovery report.
PROBE_REASONS = (
    "restore_mismatch",  # replaying the prefix did not bring back the recorded screen of s
    "restore_ended",  # the environment ended the episode while the prefix was replayed
    "error_ends_episode",  # the wrong action ended the episode: no error state to escape from
    "error_without_new_screen",  # the wrong action left the screen as it was
    "not_an_error",  # the wrong action led where the reference's leads, and the task still succeeds
    "escape_not_observed",  # no escape tried brought back the screen of s
    "off_track_after_escape",  # the screen came back, but the reference's rest no longer succeeds
    "device_error",  # the device crashed or hung during the probe
    "no_device",  # no healthy device was free for the probes
)


@dataclass(frozen=True)
class RecoverySite:
    """A prone-to-error step: step `index` of the successful `reference` episode of `query` (its
    steps that acted), and a wrong action another rollout (`episode`) sampled there after the same
    actions."""

    query: Query
    reference: str
    steps: tuple[StepView, ...]  # the reference's steps; the state before `index` is restored
    index: int
    wrong: Action
    episode: str
    source: str  # "diverged": the rollout failed after it; "harmful": the step critic's label
    step: int  # the recorded index of that step in the reference (its unparsed outputs are not in `steps`)

    @property
    def prefix(self) -> list[Action]:
        return [step_action(v) for v in self.steps[: self.index]]

    @property
    def correct(self) -> Action:
        return step_action(self.steps[self.index])


@dataclass(frozen=True)
class ProbeResult:
    """What a device showed: the wrong action on the restored screen (`error`) and the escape that
    brought it back (`escape`); `reason` says why there is none."""

    site: RecoverySite
    reason: str | None
    error: StepView | None = None
    escape: StepView | None = None
    tries: int = 0  # escapes tried


Prober = Callable[[list[RecoverySite]], list[ProbeResult]]


def step_action(view: StepView) -> Action:
    """The action of a reference's step (a reference's steps are the ones that acted)."""
    if view.act is None:
        raise ValueError("a recovery reference has an unparsed step; references are successful rollouts")
    return view.act


def same_screen(
    shot: str, elements: list[dict[str, Any]] | None, other: str, other_elements: list[dict[str, Any]] | None
) -> bool:
    """Whether two observations show the same screen: the same pixels, or (a cursor blinks, a
    clock ticks) the same element tree as the device reports it."""
    if shot == other:
        return True
    return bool(elements) and bool(other_elements) and _tree(elements) == _tree(other_elements)


def _tree(elements: list[dict[str, Any]] | None) -> str:
    return json.dumps(
        [{k: v for k, v in e.items() if k != "focused"} for e in elements or []], sort_keys=True
    )
