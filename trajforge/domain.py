"""The records every stage reads: Query, Observation, and a step as the critics, curation
and annotation see it (`StepView`, its verdict, and the action in words).

These are the in-memory shapes stages pass to each other; `storage.models` holds their
rows and `storage.episodes` loads a round's steps into them. Screenshots travel as sha256
hashes into the object store, never as bytes inside these types.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from trajforge.actions.compare import element_at
from trajforge.actions.model import Action, ActionKind, Screen

Sha256 = str


TIERS = ("localization", "functional", "intent")  # query complexity tiers (Step-GUI §2.1.3)


def mix_problem(mix: Mapping[str, float]) -> str | None:
    """What is wrong with a tier mix (shares per tier), or None."""
    unknown = sorted(set(mix) - set(TIERS))
    if unknown:
        return f"unknown query tier(s) {', '.join(unknown)} in a tier mix; known: {', '.join(TIERS)}"
    if any(v < 0 for v in mix.values()) or sum(mix.values()) <= 0:
        return f"a tier mix needs shares >= 0 with a positive sum, got {dict(mix)}"
    return None


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
    tier: str = Field("", description="Complexity tier (`TIERS`; '' unknown), see querygen.complexity.")


class Observation(BaseModel):
    """What an environment shows after reset or a step."""

    model_config = ConfigDict(frozen=True)

    screenshot: Sha256
    width: int = Field(gt=0)
    height: int = Field(gt=0)
    elements: list[dict[str, Any]] | None = Field(None, description="a11y / element tree, if any.")
    meta: dict[str, Any] = Field(default_factory=dict)
    done: bool = Field(False, description="The environment ended the episode itself (its own done signal).")


Label = Literal["GOOD", "NEUTRAL", "HARMFUL"]
STEP_LABELS: tuple[Label, ...] = get_args(Label)


SLOP_SHARE = 0.03  # touch slop as a share of the screen's shorter side
SLOP_MIN_PX = 8


@dataclass(frozen=True)
class SeenElement:
    """One node of the element tree as the device reports it: no spec id, slot or value."""

    text: str
    role: str
    bounds: tuple[int, int, int, int]
    checked: bool | None = None
    selected: bool | None = None
    focused: bool = False

    @classmethod
    def reported(cls, node: Mapping[str, Any]) -> SeenElement:
        """From a stored tree node; the fields a device does not report are never read."""
        x1, y1, x2, y2 = (int(v) for v in node.get("bounds") or (0, 0, 0, 0))
        return cls(
            text=str(node.get("text") or node.get("desc") or ""),
            role=str(node.get("kind") or node.get("role") or "view"),
            bounds=(x1, y1, x2, y2),
            checked=node.get("checked"),
            selected=node.get("selected"),
            focused=bool(node.get("focused")),
        )

    def node(self) -> dict[str, Any]:
        """As a stored tree node (what `reported` reads back)."""
        return {
            "text": self.text,
            "role": self.role,
            "bounds": list(self.bounds),
            "checked": self.checked,
            "selected": self.selected,
            "focused": self.focused,
        }


def _bounds(e: SeenElement) -> tuple[int, int, int, int]:
    return e.bounds


@dataclass(frozen=True)
class StepView:
    """One recorded step as critics, curation and annotation see it: the one view of a `Step`
    (`trajforge.episode.Step.view`), built from it and never stored.

    A critic's view (`critics.view.critic_view`) carries only what the device reported of each
    element (`SeenElement`, read typed through `seen`), so no critic can read a spec's ids or slots.
    """

    action: dict[str, Any] | None  # the parsed action, stored form; None when the output did not parse
    parse_error: str | None
    before: str  # screenshot hashes
    after: str
    elements: list[dict[str, Any]]  # the tree shown before the action
    width: int
    height: int
    raw_output: str = ""  # the policy's answer, verbatim

    @cached_property
    def act(self) -> Action | None:
        """The action, typed: parsed from `action` once (None when the output did not parse)."""
        return Action.model_validate(self.action) if self.action is not None else None

    @cached_property
    def seen(self) -> tuple[SeenElement, ...]:
        """The tree, typed, as the device reports it."""
        return tuple(SeenElement.reported(e) for e in self.elements)

    def as_reported(self) -> StepView:
        """The same view with only what the device reports of each element (a critic's view)."""
        return self._with([e.node() for e in self.seen], self.seen)

    def keeping(self, keep: Callable[[SeenElement], bool]) -> StepView:
        """The same view with only the elements `keep` accepts."""
        kept = [(node, e) for node, e in zip(self.elements, self.seen, strict=True) if keep(e)]
        return self._with([node for node, _ in kept], tuple(e for _, e in kept))

    def _with(self, elements: list[dict[str, Any]], seen: tuple[SeenElement, ...]) -> StepView:
        view = replace(self, elements=elements)
        view.__dict__.update(act=self.act, seen=seen)  # the cached properties, filled
        return view

    def touched(self) -> SeenElement | None:
        """The element the action's point targets, as a real device hit-tests a touch (`element_at`:
        the innermost under the finger, a link inside its paragraph), or the nearest within the touch
        slop (Android's touch slop, Chromium's touch adjustment)."""
        point = (self.action or {}).get("point")
        if point is None or not self.width or not self.height:
            return None
        slop = max(SLOP_MIN_PX, SLOP_SHARE * min(self.width, self.height))
        at = (int(point[0]), int(point[1]))
        return element_at(self.seen, at, Screen(self.width, self.height), bounds=_bounds, slop=slop)

    @classmethod
    def of(
        cls,
        action: Action | None,
        parse_error: str | None,
        before: str,
        after: str,
        elements: list[dict[str, Any]],
        width: int,
        height: int,
        raw_output: str = "",
    ) -> StepView:
        """The view of a step whose action is typed already: `act` is that action, not parsed again."""
        stored = None if action is None else action.stored()
        view = cls(stored, parse_error, before, after, elements, width, height, raw_output)
        view.__dict__["act"] = action  # the cached property, filled
        return view

    @classmethod
    def observed(cls, action: Action, before: Observation, after: Observation) -> StepView:
        """The step an action made between two observations of a live environment."""
        return cls.of(
            action,
            None,
            before.screenshot,
            after.screenshot,
            before.elements or [],
            before.width,
            before.height,
        )


@dataclass(frozen=True)
class StepVerdict:
    label: Label
    reason: str  # snake_case, counted
    summary: str  # at most 30 words (GUI-Owl §6.3)


def hit_element(view: StepView, point: tuple[int, int]) -> dict[str, Any] | None:
    """The element a tap at a per-mille point hits, in the tree shown before it (`element_at`'s rule)."""
    return element_at(view.elements, point, Screen(view.width, view.height))


def describe(action: Action, view: StepView) -> str:
    """The action in words, as an intent a person would give."""
    if action.kind == ActionKind.CLICK and action.point is not None:
        target = hit_element(view, action.point)
        return f"Tap '{target.get('text') or target.get('id')}'" if target else "Tap an empty spot"
    if action.kind == ActionKind.SWIPE:
        return f"Swipe {action.swipe_direction()}"
    if action.kind == ActionKind.TYPE:
        return f"Type '{action.text}'"
    if action.kind == ActionKind.PRESS:
        return f"Press {action.key}"
    if action.kind == ActionKind.TERMINATE:
        return f"Finish the task ({action.status})"
    return action.kind.value.replace("_", " ").capitalize()


def goal_key(goal: dict[str, Any], backend: str = "") -> str:
    """The visual channel's reference key: the goal (app, screen, slot values) on one kind of
    device, since frames of two renderers never match."""
    return json.dumps([backend, goal], sort_keys=True, ensure_ascii=False)


def backend_of(device: str | None) -> str:
    """The kind of device an episode ran on ("sim-0#1" -> "sim"): frames compare only within one."""
    return str(device or "").split("-")[0]


NOTHING_READABLE = "(nothing readable)"  # a screen with no text: said in a prompt, never an answer
EPISODE_ENDS = "(the episode ends)"  # no next screen was recorded: said in a prompt, never an answer
PLACEHOLDERS = frozenset({NOTHING_READABLE, EPISODE_ENDS})
EMPTY_ANSWER = "empty_answer"  # the drop reason of a sample whose answer is blank or a placeholder


def screen_text(view_elements: list[dict[str, Any]]) -> str:
    texts = [str(e.get("text") or "").strip() for e in view_elements]
    return "; ".join(t for t in texts if t)[:600] or NOTHING_READABLE


def blank_answer(text: str | None) -> bool:
    """Whether an answer teaches nothing: empty, whitespace, or a placeholder standing for no text."""
    return not text or not text.strip() or text.strip() in PLACEHOLDERS
