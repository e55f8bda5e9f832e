"""The `browsergym` suite's translations, without BrowserGym: its accessibility nodes as trajforge
elements, and canonical actions as BrowserGym's high-level action strings."""

from __future__ import annotations

import pytest

from rollout.suites.browsergym.env import elements
from trajforge.actions import Action, ActionKind
from trajforge.actions.browsergym import to_code

K = ActionKind


def node(
    bid: str, role: str, name: str = "", bbox: tuple[float, ...] = (0, 0, 10, 10), **extra: object
) -> dict:
    return {"bid": bid, "role": role, "name": name, "value": "", "text": "", "states": {}, "bbox": list(bbox),
            "visibility": 1.0, "clickable": True, **extra}  # fmt: skip


def test_nodes_become_elements_with_their_bid_kind_and_pixel_bounds() -> None:
    shown = elements(
        [
            node("9", "generic", bbox=(0, 0, 300, 200)),  # a box with no words: not an element
            node("13", "button", "Click Me!", bbox=(117, 168, 52.5, 52.5)),
            node("14", "textbox", "Name", value="Cheree"),
            node("18", "checkbox", "Gh", states={"checked": "true", "focused": True}),
            node("21", "combobox", "Size", value="Medium"),
            node("22", "option", "Large", states={"selected": True}),
            node("30", "paragraph", text="Pick  one"),
            node("31", "button", "hidden", visibility=0.0),
            node("32", "link", "empty", bbox=(5, 5, 0, 4)),
        ]
    )
    assert [(e["id"], e["kind"], e["text"]) for e in shown] == [
        ("13", "button", "Click Me!"),
        ("14", "input", "Cheree"),
        ("18", "toggle", "Gh"),
        ("21", "button", "Size: Medium"),
        ("22", "button", "Large"),
        ("30", "text", "Pick one"),
    ]
    assert shown[0]["bounds"] == [117, 168, 170, 220]
    assert shown[2]["checked"] is True and shown[2]["focused"] is True and shown[3]["checked"] is None
    assert shown[4]["checked"] is True


BUTTON = {"id": "13", "kind": "button", "tag": "button"}
FIELD = {"id": "14", "kind": "input", "tag": "textbox"}
SELECT = {"id": "21", "kind": "button", "tag": "combobox"}
AT = (12.5, 40.0)


@pytest.mark.parametrize(
    ("action", "target", "code"),
    [
        (Action(kind=K.CLICK, point=(1, 1)), BUTTON, 'click("13")'),
        (Action(kind=K.CLICK, point=(1, 1)), None, "mouse_click(12.5, 40.0)"),
        (Action(kind=K.DOUBLE_CLICK, point=(1, 1)), BUTTON, 'dblclick("13")'),
        (Action(kind=K.DOUBLE_CLICK, point=(1, 1)), None, "mouse_dblclick(12.5, 40.0)"),
        (Action(kind=K.RIGHT_CLICK, point=(1, 1)), BUTTON, 'click("13", button="right")'),
        (Action(kind=K.HOVER, point=(1, 1)), None, "mouse_move(12.5, 40.0)"),
        (Action(kind=K.TYPE, point=(1, 1), text='say "hi"'), FIELD, 'fill("14", "say \\"hi\\"")'),
        (Action(kind=K.TYPE, point=(1, 1), text="Medium"), SELECT, 'select_option("21", "Medium")'),
        (
            Action(kind=K.TYPE, point=(1, 1), text="héllo"),
            None,
            'mouse_click(12.5, 40.0)\nkeyboard_type("héllo")',
        ),
        (Action(kind=K.TYPE, text="abc"), None, 'keyboard_type("abc")'),
        (Action(kind=K.PRESS, key="enter"), None, 'keyboard_press("Enter")'),
        (Action(kind=K.PRESS, key="back"), None, "go_back()"),
        (Action(kind=K.PRESS, key="home"), None, "noop(0)"),
        (Action(kind=K.HOTKEY, text="ctrl+a"), None, 'keyboard_press("Control+a")'),
        (Action(kind=K.SWIPE, point=(1, 1), direction="up"), None, "scroll_at(12.5, 40.0, 0, 300)"),
        (Action(kind=K.SCROLL, direction="up", amount=2), None, "scroll(0, -200)"),
        (Action(kind=K.SCROLL, point=(1, 1), direction="down"), None, "scroll_at(12.5, 40.0, 0, 500)"),
        (Action(kind=K.ANSWER, text="42"), None, 'send_msg_to_user("42")'),
        (Action(kind=K.WAIT, duration_ms=20000), None, "noop(5000)"),
        (Action(kind=K.TERMINATE, status="success"), None, "noop(0)"),
    ],
)
def test_canonical_actions_as_browsergym_code(action: Action, target: dict | None, code: str) -> None:
    assert to_code(action, target, AT, None) == code


def test_a_drag_goes_from_the_point_to_its_end() -> None:
    drag = Action(kind=K.DRAG, point=(1, 1), to=(2, 2))
    assert to_code(drag, None, AT, (100.0, 50.25)) == "mouse_drag_and_drop(12.5, 40.0, 100.0, 50.2)"


def test_check_and_apps_name_the_missing_browsergym_venv(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import typer

    from flows.cli_ops import _check_suites
    from rollout.suites import get_suite
    from trajforge.errors import ConfigError

    monkeypatch.setenv("TRAJFORGE_BROWSERGYM_PYTHON", str(tmp_path / "none" / "python"))
    with pytest.raises(typer.Exit):
        _check_suites(["browsergym:miniwob.click-test"])
    assert "make browsergym" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"needs .*none/python, which is missing; run make browsergym"):
        get_suite("browsergym").check_task("miniwob.click-test")
