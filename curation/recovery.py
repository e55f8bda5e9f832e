"""Error-recovery samples (InfiGUI-R1 §3.2.3) from the round's own rollouts.

A step is identified by its query and the screen it acts on (the screenshot hash before
the action). Across the query's rollouts, every action taken on that screen is correct
(the step critic's GOOD) or wrong (HARMFUL); a step whose success rate is strictly
between 0 and 1 is prone to error. From each such step:

- "error escape": the screen the wrong action really led to (its recorded post-action
  screenshot), the history with the wrong action appended; the target is `press back`;
- "back on track": the original screen (as recorded where the correct action was
  taken), the history with the wrong action and the escape appended; the target is the
  correct action.

Only real observations are used. A wrong action that left the screen unchanged or ended
the episode has no error state to escape from, and is skipped with a reason.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from curation.rollouts import Rollout
from storage.samples import SampleDraft
from trajforge.actions import Action, ActionKind, Screen
from trajforge.actions.compare import target_bbox
from trajforge.domain import StepView, describe
from trajforge.logs import counts

ESCAPE = Action(kind=ActionKind.PRESS, key="back")
CATEGORIES = ("error_escape", "back_on_track")


@dataclass
class RecoveryReport:
    prone_steps: int = 0
    samples: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)

    def render(self) -> str:
        made = counts(self.samples)
        skipped = counts(self.skipped)
        return f"recovery: {self.prone_steps} prone-to-error steps; samples {made}; skipped {skipped}"


@dataclass(frozen=True)
class _Seen:
    rollout: Rollout
    index: int

    @property
    def view(self) -> StepView:
        return self.rollout.steps[self.index]

    @property
    def action(self) -> Action:
        assert self.view.action is not None
        return Action.model_validate(self.view.action)


def _payload(images: list[str], prompt: str, action: Action, view: StepView) -> dict[str, object]:
    target = action.model_dump(mode="json", exclude_none=True, exclude={"thought", "intent"})
    screen = Screen(view.width, view.height)
    return {
        "images": images,
        "prompt": prompt,
        "action": target,
        "intent": describe(action, view),  # Mobile-R1's clear low-level action
        "bbox": target_bbox(action, view.elements, screen),
        "screen": [view.width, view.height],
        "response": Action.model_validate(target).to_json(),
    }


def recovery_samples(groups: dict[str, list[Rollout]]) -> tuple[list[SampleDraft], RecoveryReport]:
    report = RecoveryReport()
    drafts: list[SampleDraft] = []
    for group in groups.values():
        by_screen: dict[str, tuple[list[_Seen], list[_Seen]]] = {}
        for r in group:
            for i, view in enumerate(r.steps):
                if view.action is None or r.labels[i] == "NEUTRAL":
                    continue
                right, wrong = by_screen.setdefault(view.before, ([], []))
                (right if r.labels[i] == "GOOD" else wrong).append(_Seen(r, i))
        for screen, (right, wrong) in by_screen.items():
            if not right or not wrong:
                continue  # always mastered or always failed: not prone to error
            report.prone_steps += 1
            good = min(right, key=lambda s: (s.rollout.uid, s.index))
            errors: set[str] = set()  # one pair per distinct error state
            for bad in sorted(wrong, key=lambda s: (s.rollout.uid, s.index)):
                if bad.action.kind == ActionKind.TERMINATE:
                    report.skipped["error_ends_episode"] += 1
                    continue
                if bad.view.after == screen:
                    report.skipped["error_without_new_screen"] += 1
                    continue
                if bad.view.after in errors:
                    report.skipped["same_error_state"] += 1
                    continue
                errors.add(bad.view.after)
                drafts += _pair(good, bad)
                report.samples.update(CATEGORIES)
    return drafts, report


def _pair(good: _Seen, bad: _Seen) -> list[SampleDraft]:
    query = bad.rollout.query
    history = bad.rollout.words(bad.index)
    wrong = describe(bad.action, bad.view)
    escape = describe(ESCAPE, bad.view)
    prov = {
        "episode": bad.rollout.uid,
        "steps": [bad.index],
        "query": query.uid,
        "wrong_action": bad.view.action,
        "correct_from": {"episode": good.rollout.uid, "step": good.index},
        "method": "infigui-r1 3.2.3",
    }
    task = f"Task: {query.instruction}\nHistory: "
    return [
        SampleDraft(
            "error_escape",
            bad.index,
            _payload([bad.view.after], task + "; ".join([*history, wrong]), ESCAPE, bad.view),
            prov,
        ),
        SampleDraft(
            "back_on_track",
            bad.index,
            _payload([good.view.before], task + "; ".join([*history, wrong, escape]), good.action, good.view),
            prov,
        ),
    ]
