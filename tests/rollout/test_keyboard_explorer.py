"""The random explorer's keyboard on a desktop (rollout/policies/keyboard.py)."""

from __future__ import annotations

import asyncio

import pytest

from rollout.policies.keyboard import moves, values
from rollout.policies.oracle import RandomExplorer
from trajforge.actions import ActionKind, get_codec
from trajforge.actions.model import Screen
from trajforge.domain import Observation, Query


@pytest.mark.parametrize(
    ("instruction", "expected"),
    [
        ('Type "apple" into the document and save it.', ["apple"]),
        ('Write "red" on the first line and "circle" on the second.', ["red", "circle"]),
        ("Save the document as report.txt.", ["report.txt"]),
        ("Put 42 in cell C2 of the spreadsheet and save it.", ["42", "C2"]),
        ("Clear the calculator's display.", []),
    ],
)
def test_a_desktop_task_wants_typed_its_quoted_values_numbers_and_file_names(
    instruction: str, expected: list[str]
) -> None:
    assert values(instruction) == expected


def test_the_moves_hold_save_and_save_as_only_where_the_task_asks_to_save_as() -> None:
    def keys(instruction: str) -> set[str]:
        return {a.text or "" for m in moves(instruction) for a in m if a.kind == ActionKind.HOTKEY}

    assert keys('Type "apple" and save it.') == {"ctrl+s", "ctrl+a"}
    assert "ctrl+shift+s" in keys("Save the document as report.txt.")
    save_as = next(m for m in moves("Save the document as report.txt.") if m[0].text == "ctrl+shift+s")
    assert [a.kind for a in save_as] == [
        ActionKind.HOTKEY,
        ActionKind.HOTKEY,
        ActionKind.TYPE,
        ActionKind.PRESS,
    ]
    assert save_as[2].text == "report.txt"
    two = moves('Write "red" on the first line and "circle" on the second.')
    assert any(m[0].text == "red\ncircle" for m in two)


def _played(meta: dict[str, str], seeds: int = 6, steps: int = 8) -> list[ActionKind]:
    codec = get_codec("pyautogui")
    field = {"id": "doc", "kind": "input", "text": "", "bounds": [0, 0, 1024, 700]}
    obs = Observation(screenshot="a", width=1024, height=768, elements=[field], meta=meta)
    kinds = []
    for seed in range(seeds):
        explorer = RandomExplorer(fmt="canonical", max_actions=steps)
        explorer.start(Query(uid="q", app="a", instruction='Type "apple" and save it.'), seed=str(seed))
        for _ in range(steps):
            out = asyncio.run(explorer.act(obs))
            if meta:
                kinds.append(codec.parse(out.text, Screen(1024, 768)).kind)
            else:
                kinds.append(get_codec(out.format).parse(out.text, Screen(1024, 768)).kind)
    return kinds


def test_on_a_desktop_the_explorer_types_and_saves_by_its_keys() -> None:
    played = _played({"backend": "desktop"})
    assert ActionKind.HOTKEY in played and ActionKind.TYPE in played


def test_elsewhere_the_explorer_plays_no_keyboard_move() -> None:
    assert ActionKind.HOTKEY not in _played({})
