"""The action comparison every check uses: same kind, point in the target element or within tolerance."""

from __future__ import annotations

import pytest

from trajforge.actions import Action, ActionKind, Screen
from trajforge.actions.compare import mismatch, target_bbox

SCREEN = Screen(1000, 2000)
# pixel bounds; the small button sits inside the big card
ELEMENTS = [
    {"id": "card", "bounds": [0, 0, 1000, 1000]},
    {"id": "button", "bounds": [100, 100, 300, 200]},
]


def click(x: int, y: int) -> Action:
    return Action(kind=ActionKind.CLICK, point=(x, y))


def test_point_must_fall_in_the_smallest_element_holding_the_reference() -> None:
    ref = click(200, 75)  # (200, 150) px: inside the button
    assert mismatch(click(120, 60), ref, ELEMENTS, SCREEN) is None
    assert mismatch(click(500, 300), ref, ELEMENTS, SCREEN) == "point_outside_target"  # in the card only
    assert target_bbox(ref, ELEMENTS, SCREEN) == [100, 50, 300, 100]


def test_the_bbox_of_an_element_running_past_the_screen_is_its_part_on_the_screen() -> None:
    row = [{"id": "row", "bounds": [-20, 1900, 1000, 2150]}]  # a list's last row, cut by the edge
    assert target_bbox(click(500, 975), row, SCREEN) == [0, 950, 1000, 1000]


def test_outside_every_element_the_tolerance_applies() -> None:
    ref = click(500, 900)  # (500, 1800) px: no element
    assert mismatch(click(520, 920), ref, ELEMENTS, SCREEN, tolerance=40) is None
    assert mismatch(click(560, 900), ref, ELEMENTS, SCREEN, tolerance=40) == "point_beyond_tolerance"
    assert target_bbox(ref, ELEMENTS, SCREEN) is None


@pytest.mark.parametrize(
    ("predicted", "reference", "code"),
    [
        (Action(kind="press", key="back"), click(1, 1), "kind_mismatch"),
        (
            Action(kind="swipe", point=(500, 800), to=(500, 200)),
            Action(kind="swipe", point=(1, 1), direction="up"),
            None,
        ),
        (
            Action(kind="swipe", point=(500, 800), direction="down"),
            Action(kind="swipe", point=(1, 1), direction="up"),
            "direction_mismatch",
        ),
        (Action(kind="type", text=" Pizza "), Action(kind="type", text="pizza"), None),
        (Action(kind="type", text="pasta"), Action(kind="type", text="pizza"), "text_mismatch"),
        (Action(kind="press", key="home"), Action(kind="press", key="back"), "key_mismatch"),
        (
            Action(kind="terminate", status="failure"),
            Action(kind="terminate", status="success"),
            "status_mismatch",
        ),
        (Action(kind="wait"), Action(kind="wait", duration_ms=500), None),
    ],
)
def test_non_pointing_actions_compare_by_meaning(
    predicted: Action, reference: Action, code: str | None
) -> None:
    assert mismatch(predicted, reference, ELEMENTS, SCREEN) == code
