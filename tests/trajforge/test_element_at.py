"""One rule for "which element did this tap hit" (`trajforge.actions.compare.element_at`): the
innermost element under the point. The step's description, the critics, the annotator's view
and the recovery probe all name the same target for one tap on nested elements."""

from __future__ import annotations

from typing import Any

from annotation.tasks import show_step
from critics.view import critic_view
from curation.recovery import _same_move
from trajforge.actions import Action, ActionKind, Screen
from trajforge.actions.compare import element_at
from trajforge.domain import describe
from trajforge.episode import Step

# a paragraph holding a link, inside a card: the tap lands on the link
CARD: dict[str, Any] = {"id": "card", "kind": "text", "text": "Welcome card", "bounds": [0, 0, 1000, 1000]}
PARAGRAPH = {
    "id": "para",
    "kind": "text",
    "text": "Already registered? Sign in",
    "bounds": [100, 400, 900, 500],
}
LINK: dict[str, Any] = {"id": "signin", "kind": "button", "text": "Sign in", "bounds": [600, 420, 800, 480]}
TREE = [CARD, PARAGRAPH, LINK]  # tree order: the outermost first
SCREEN = Screen(1000, 1000)


def _step(point: tuple[int, int]) -> Step:
    return Step(
        index=0,
        screenshot="a" * 64,
        screenshot_after="b" * 64,
        width=1000,
        height=1000,
        elements=TREE,
        action=Action(kind=ActionKind.CLICK, point=point),
    )


def test_the_rule_is_the_innermost_element_then_tree_order_then_the_slop() -> None:
    assert element_at(TREE, (700, 450), SCREEN) is LINK
    assert element_at(TREE, (200, 450), SCREEN) is PARAGRAPH
    assert element_at(TREE, (50, 50), SCREEN) is CARD
    twins = [dict(LINK, id="first"), dict(LINK, id="second")]
    assert element_at(twins, (700, 450), SCREEN) == twins[0]
    assert element_at([LINK], (700, 500), SCREEN) is None
    assert element_at([LINK], (700, 500), SCREEN, slop=25) is LINK


def test_every_reader_of_a_step_names_the_same_target_for_a_tap_on_nested_elements() -> None:
    step = _step((700, 450))
    assert "Sign in" in describe(step.action, step.view()), describe(step.action, step.view())  # type: ignore[arg-type]
    touched = critic_view("Sign in", [step]).steps[0].touched()
    assert touched is not None and touched.text == "Sign in"
    _, text, box = show_step(step, 0, 1)
    assert box == LINK["bounds"] and "'Sign in'" in text
    # the recovery probe: another tap on the link is the same move; one on its paragraph is not
    assert _same_move(step.view(), _step((650, 430)).view())
    assert not _same_move(step.view(), _step((200, 450)).view())
