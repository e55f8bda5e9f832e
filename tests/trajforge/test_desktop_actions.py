"""Desktop actions and their formats: Qwen2.5-VL computer_use, UI-TARS-1.5 computer, OSWorld pyautogui."""

from __future__ import annotations

import pytest

from trajforge.actions import Action, ActionKind, Screen, get_codec
from trajforge.errors import ParseError, UnsupportedAction

K = ActionKind
SCREEN = Screen(1001, 1001)  # pixels equal per-mille points, so the examples read plainly


def test_a_hotkey_is_key_names_joined_by_plus() -> None:
    assert Action(kind=K.HOTKEY, text="ctrl+shift+t").text == "ctrl+shift+t"
    with pytest.raises(ValueError, match="joined by '\\+', lower case"):
        Action(kind=K.HOTKEY, text="Ctrl S")
    with pytest.raises(ValueError, match="kind 'press' with key 'enter'"):
        Action(kind=K.HOTKEY, text="enter")
    assert Action(kind=K.DRAG, to=(5, 5)).point is None  # from where the pointer is


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [10, 20]}}\n'
         "</tool_call>", Action(kind=K.CLICK, point=(10, 20))),
        ('{"name": "computer_use", "arguments": {"action": "double_click", "coordinate": [10, 20]}}',
         Action(kind=K.DOUBLE_CLICK, point=(10, 20))),
        ('{"name": "computer_use", "arguments": {"action": "key", "keys": ["ctrl", "s"]}}',
         Action(kind=K.HOTKEY, text="ctrl+s")),
        ('{"name": "computer_use", "arguments": {"action": "key", "keys": ["Return"]}}',
         Action(kind=K.PRESS, key="enter")),
        ('{"name": "computer_use", "arguments": {"action": "scroll", "pixels": -3}}',
         Action(kind=K.SCROLL, direction="down", amount=3)),
        ('{"name": "computer_use", "arguments": {"action": "left_click_drag", "coordinate": [7, 8]}}',
         Action(kind=K.DRAG, to=(7, 8))),
        ('<think>save it</think>\n<tool_call>\n{"name": "computer_use", "arguments": {"action": "terminate", '
         '"status": "success"}}\n</tool_call>', Action(kind=K.TERMINATE, status="success", thought="save it")),
    ],
)  # fmt: skip
def test_computer_use_reads_the_cookbook_tool(text: str, expected: Action) -> None:
    codec = get_codec("computer_use")
    assert codec.parse(text, SCREEN) == expected
    if codec.represents(expected):
        assert codec.parse(codec.format(expected, SCREEN), SCREEN) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Thought: copy it\nAction: hotkey(key='ctrl c')", Action(kind=K.HOTKEY, text="ctrl+c", thought="copy it")),
        ("Action: left_double(point='<point>100 200</point>')", Action(kind=K.DOUBLE_CLICK, point=(100, 200))),
        ("Action: right_single(start_box='(3,4)')", Action(kind=K.RIGHT_CLICK, point=(3, 4))),
        ("Action: scroll(point='<point>5 6</point>', direction='down')",
         Action(kind=K.SCROLL, point=(5, 6), direction="down")),
        ("Action: drag(start_point='<point>1 2</point>', end_point='<point>30 40</point>')",
         Action(kind=K.DRAG, point=(1, 2), to=(30, 40))),
        ("Action: hotkey(key='enter')", Action(kind=K.PRESS, key="enter")),
        ("Action: click(point='<point>9 9</point>')", Action(kind=K.CLICK, point=(9, 9))),
    ],
)  # fmt: skip
def test_uitars_computer_reads_computer_use_doubao(text: str, expected: Action) -> None:
    codec = get_codec("uitars15-computer")
    assert codec.parse(text, SCREEN) == expected
    assert codec.represents(expected)
    assert codec.parse(codec.format(expected, SCREEN), SCREEN) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("```python\nimport pyautogui\npyautogui.click(100, 200)\n```", Action(kind=K.CLICK, point=(100, 200))),
        ("pyautogui.click(x=10, y=20, button='right')", Action(kind=K.RIGHT_CLICK, point=(10, 20))),
        ("pyautogui.doubleClick(10, 20)", Action(kind=K.DOUBLE_CLICK, point=(10, 20))),
        ("pyautogui.moveTo(1, 2)\npyautogui.dragTo(3, 4, duration=1.0)", Action(kind=K.DRAG, point=(1, 2), to=(3, 4))),
        ("pyautogui.scroll(-3, x=10, y=20)", Action(kind=K.SCROLL, direction="down", amount=3, point=(10, 20))),
        ("pyautogui.hscroll(2)", Action(kind=K.SCROLL, direction="right", amount=2)),
        ("pyautogui.hotkey('ctrl', 's')\ntime.sleep(0.5)", Action(kind=K.HOTKEY, text="ctrl+s")),
        ("pyautogui.press('enter')", Action(kind=K.PRESS, key="enter")),
        ("pyautogui.write('hello')", Action(kind=K.TYPE, text="hello")),
        ("DONE", Action(kind=K.TERMINATE, status="success")),
        ("FAIL", Action(kind=K.TERMINATE, status="failure")),
        ("WAIT", Action(kind=K.WAIT)),
    ],
)  # fmt: skip
def test_pyautogui_reads_osworld_code_without_running_it(text: str, expected: Action) -> None:
    codec = get_codec("pyautogui")
    assert codec.parse(text, SCREEN) == expected
    if codec.represents(expected):
        assert codec.parse(codec.format(expected, SCREEN), SCREEN) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("pyautogui.click(1, 2)\npyautogui.click(3, 4)", "multiple_actions"),
        ("import os\nos.system('rm -rf /')", "unknown_action"),
        ("__import__('os').system('id')", "unknown_action"),
        ("x = 5\npyautogui.click(x, x)", "invalid_call"),
        ("pyautogui.click(x, 5)", "invalid_call"),
        ("pyautogui.click()", "missing_field"),
        ("pyautogui.screenshot()", "unknown_action"),
        ("pyautogui.click(5000, 5)", "coordinate_out_of_screen"),
        ("pyautogui.click(1,", "invalid_call"),
    ],
)
def test_pyautogui_code_that_is_not_one_action_is_a_reason(text: str, reason: str) -> None:
    with pytest.raises(ParseError) as caught:
        get_codec("pyautogui").parse(text, SCREEN)
    assert caught.value.reason == reason and caught.value.raw == text


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("computer_use", '{"name": "computer_use", "arguments": {"action": "swipe", "coordinate": [1, 2]}}'),
        ("uitars15-computer", "Action: press_back()"),
        ("uitars15-computer", "Action: long_press(point='<point>1 2</point>')"),
    ],
)
def test_a_phones_action_in_a_desktop_format_is_a_parse_error(fmt: str, text: str) -> None:
    with pytest.raises(ParseError) as caught:
        get_codec(fmt).parse(text, SCREEN)
    assert caught.value.reason == "mobile_action"


@pytest.mark.parametrize("fmt", ["computer_use", "uitars15-computer", "pyautogui"])
def test_a_desktop_format_refuses_a_phones_action(fmt: str) -> None:
    for action in (Action(kind=K.PRESS, key="back"), Action(kind=K.SWIPE, point=(1, 1), direction="up")):
        with pytest.raises(UnsupportedAction) as caught:
            get_codec(fmt).format(action, SCREEN)
        assert caught.value.reason == "mobile_action"


@pytest.mark.parametrize(
    "fmt", ["qwen", "guiowl", "mobiler1", "uitars", "uitars15", "agentcpm", "androidworld"]
)
def test_a_phone_format_refuses_a_desktops_action(fmt: str) -> None:
    codec = get_codec(fmt)
    for action in (Action(kind=K.HOTKEY, text="ctrl+s"), Action(kind=K.DOUBLE_CLICK, point=(1, 1))):
        assert not codec.represents(action)
        with pytest.raises(UnsupportedAction) as caught:
            codec.format(action, SCREEN)
        assert caught.value.reason == "desktop_action"
