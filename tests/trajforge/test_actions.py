"""Action codecs: exact parses and reasons per format, and round-trips (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajforge.actions import CODECS, Action, ActionKind, Screen, get_codec
from trajforge.errors import ConfigError, ParseError, UnsupportedAction

SCREEN = Screen(1080, 2400)
A = Action
K = ActionKind

PARSES = [
    # AgentCPM-GUI compact JSON (seed 000 Table 1)
    ("agentcpm", '{"POINT":[480,320]}', A(kind=K.CLICK, point=(480, 320))),
    (
        "agentcpm",
        ' { "POINT" : [480, 320], "duration": 1000 } ',
        A(kind=K.LONG_PRESS, point=(480, 320), duration_ms=1000),
    ),
    (
        "agentcpm",
        '{"POINT":[500,200],"to":"down"}',
        A(kind=K.SWIPE, point=(500, 200), direction="down"),
    ),
    (
        "agentcpm",
        '{"POINT":[500,200],"to":[500,800]}',
        A(kind=K.SWIPE, point=(500, 200), to=(500, 800)),
    ),
    ("agentcpm", '{"PRESS":"HOME"}', A(kind=K.PRESS, key="home")),
    ("agentcpm", '{"TYPE":"Hello,world!"}', A(kind=K.TYPE, text="Hello,world!")),
    ("agentcpm", '{"duration":500}', A(kind=K.WAIT, duration_ms=500)),
    ("agentcpm", '{"STATUS":"finish"}', A(kind=K.TERMINATE, status="success")),
    ("agentcpm", '{"STATUS":"impossible"}', A(kind=K.TERMINATE, status="failure")),
    (
        "agentcpm",
        '{"thought":"点击搜索","POINT":[10,20],"STATUS":"continue"}',
        A(kind=K.CLICK, point=(10, 20), thought="点击搜索"),
    ),
    # GUI-Owl / Qwen mobile_use, pixels and seconds
    (
        "qwen",
        '<tool_call>\n{"name": "mobile_use", "arguments": {"action": "click", "coordinate": [1079, 0]}}\n</tool_call>',
        A(kind=K.CLICK, point=(1000, 0)),
    ),
    (
        "qwen",
        '{"name":"mobile_use","arguments":{"action":"long_press","coordinate":[540,1200],"time":2}}',
        A(kind=K.LONG_PRESS, point=(500, 500), duration_ms=2000),
    ),
    (
        "qwen",
        '<tool_call>{"name":"mobile_use","arguments":{"action":"swipe","coordinate":[540,1800],"coordinate2":[540,600]}}</tool_call>',
        A(kind=K.SWIPE, point=(500, 750), to=(500, 250)),
    ),
    (
        "qwen",
        '<tool_call>{"name":"mobile_use","arguments":{"action":"system_button","button":"Menu"}}</tool_call>',
        A(kind=K.PRESS, key="menu"),
    ),
    (
        "qwen",
        '<tool_call>{"name":"mobile_use","arguments":{"action":"key","text":"KEYCODE_ENTER"}}</tool_call>',
        A(kind=K.PRESS, key="enter"),
    ),
    (
        "qwen",
        '<tool_call>{"name":"mobile_use","arguments":{"action":"open","text":"美团"}}</tool_call>',
        A(kind=K.OPEN_APP, text="美团"),
    ),
    (
        "qwen",
        '<tool_call>{"name":"mobile_use","arguments":{"action":"wait","time":1.5}}</tool_call>',
        A(kind=K.WAIT, duration_ms=1500),
    ),
    (
        "qwen",
        '<tool_call>{"name":"mobile_use","arguments":{"action":"answer","text":"42"}}</tool_call>',
        A(kind=K.ANSWER, text="42"),
    ),
    (
        "qwen",
        '<thinking>done</thinking><tool_call>{"name":"mobile_use","arguments":{"action":"terminate","status":"failure"}}</tool_call>',
        A(kind=K.TERMINATE, status="failure", thought="done"),
    ),
    # UI-TARS, 0-1000, scroll direction reversed
    (
        "uitars",
        "Thought: tap search\nAction: click(start_box='<|box_start|>(100,200)<|box_end|>')",
        A(kind=K.CLICK, point=(100, 200), thought="tap search"),
    ),
    ("uitars", "click(start_box='(100,200,300,400)')", A(kind=K.CLICK, point=(200, 300))),
    (
        "uitars",
        "long_press(start_box='(5,6)', time='1500')",
        A(kind=K.LONG_PRESS, point=(5, 6), duration_ms=1500),
    ),
    (
        "uitars",
        "scroll(start_box='(500,500)', direction='down')",
        A(kind=K.SWIPE, point=(500, 500), direction="up"),
    ),
    ("uitars", "scroll(direction='left')", A(kind=K.SWIPE, point=(500, 500), direction="right")),
    (
        "uitars",
        "drag(start_box='(1,2)', end_box='(3,4)')",
        A(kind=K.SWIPE, point=(1, 2), to=(3, 4)),
    ),
    ("uitars", "type(content='it\\'s 5 o\\'clock')", A(kind=K.TYPE, text="it's 5 o'clock")),
    ("uitars", "press_back()", A(kind=K.PRESS, key="back")),
    ("uitars", "hotkey(key='enter')", A(kind=K.PRESS, key="enter")),
    ("uitars", "open_app(app_name='Settings')", A(kind=K.OPEN_APP, text="Settings")),
    ("uitars", "wait()", A(kind=K.WAIT)),
    ("uitars", "finished()", A(kind=K.TERMINATE, status="success")),
    ("uitars", "finished(content='3 items')", A(kind=K.ANSWER, text="3 items")),
    ("uitars", "call_user()", A(kind=K.TERMINATE, status="failure")),
    # UI-TARS-1.5's published action space (codes/ui_tars/prompt.py): <point>x y</point>, start/end_point
    ("uitars", "click(point='<point>540 200</point>')", A(kind=K.CLICK, point=(540, 200))),
    (
        "uitars",
        "Thought: hold it\nAction: long_press(point='<point>5 6</point>')",
        A(kind=K.LONG_PRESS, point=(5, 6), thought="hold it"),
    ),
    (
        "uitars",
        "drag(start_point='<point>1 2</point>', end_point='<point>3 4</point>')",
        A(kind=K.SWIPE, point=(1, 2), to=(3, 4)),
    ),
    (
        "uitars",
        "scroll(point='<point>500 500</point>', direction='up')",
        A(kind=K.SWIPE, point=(500, 500), direction="down"),
    ),
    (
        "uitars15",
        "Thought: tap it\nAction: click(point='<point>540 1200</point>')",
        A(kind=K.CLICK, point=(500, 500), thought="tap it"),
    ),
    ("uitars15", "finished(content='3 items')", A(kind=K.ANSWER, text="3 items")),
    # Mobile-R1 (the paper's own sample closes <think> with <think>)
    (
        "mobiler1",
        '<think>On home screen.<think><action>Open Taobao</action><tool_call>{"name":"mobile_use","arguments":{"action":"open","text":"Taobao"}}</tool_call>',
        A(kind=K.OPEN_APP, text="Taobao", thought="On home screen.", intent="Open Taobao"),
    ),
    # AndroidWorld JSONAction, pixels; scroll names content direction
    ("androidworld", '{"action_type":"click","x":540,"y":1200}', A(kind=K.CLICK, point=(500, 500))),
    (
        "androidworld",
        '{"action_type":"scroll","direction":"down"}',
        A(kind=K.SWIPE, point=(500, 500), direction="up"),
    ),
    (
        "androidworld",
        '{"action_type":"input_text","text":"hi","x":0,"y":0}',
        A(kind=K.TYPE, text="hi", point=(0, 0)),
    ),
    ("androidworld", '{"action_type":"navigate_back"}', A(kind=K.PRESS, key="back")),
    ("androidworld", '{"action_type":"keyboard_enter"}', A(kind=K.PRESS, key="enter")),
    (
        "androidworld",
        '{"action_type":"open_app","app_name":"Clock"}',
        A(kind=K.OPEN_APP, text="Clock"),
    ),
    (
        "androidworld",
        '{"action_type":"status","goal_status":"infeasible"}',
        A(kind=K.TERMINATE, status="failure"),
    ),
    ("androidworld", '{"action_type":"answer","text":"yes"}', A(kind=K.ANSWER, text="yes")),
    (
        "canonical",
        '{"kind":"swipe","point":[1,2],"direction":"left","duration_ms":300}',
        A(kind=K.SWIPE, point=(1, 2), direction="left", duration_ms=300),
    ),
]


@pytest.mark.parametrize(("fmt", "text", "expected"), PARSES)
def test_parse(fmt: str, text: str, expected: Action) -> None:
    assert get_codec(fmt).parse(text, SCREEN) == expected


MALFORMED = [
    ("agentcpm", "", "empty_output"),
    ("agentcpm", '{"POINT":[480,', "invalid_json"),
    ("agentcpm", "[1,2]", "invalid_json"),
    ("agentcpm", '{"POINT":[480,1001]}', "coordinate_out_of_range"),
    ("agentcpm", '{"POINT":"480,320"}', "bad_coordinate"),
    ("agentcpm", '{"CLICK":[1,2]}', "unknown_field"),
    ("agentcpm", '{"PRESS":"VOLUME_UP"}', "unsupported_key"),
    ("agentcpm", '{"POINT":[1,2],"TYPE":"x"}', "conflicting_fields"),
    ("agentcpm", '{"STATUS":"finish","POINT":[1,2]}', "conflicting_fields"),
    ("agentcpm", '{"STATUS":"need_feedback"}', "unsupported_status"),
    ("agentcpm", '{"to":"up"}', "missing_field"),
    ("agentcpm", "{}", "no_action"),
    (
        "qwen",
        '<tool_call>{"name":"computer_use","arguments":{"action":"click"}}</tool_call>',
        "unknown_tool",
    ),
    (
        "qwen",
        '<tool_call>{"name":"mobile_use","arguments":{"action":"fly"}}</tool_call>',
        "unknown_action",
    ),
    (
        "qwen",
        '<tool_call>{"name":"mobile_use","arguments":{"action":"click"}}</tool_call>',
        "missing_field",
    ),
    (
        "qwen",
        '<tool_call>{"name":"mobile_use","arguments":{"action":"click","coordinate":[2000,10]}}</tool_call>',
        "coordinate_out_of_screen",
    ),
    (
        "qwen",
        '<tool_call>{"name":"mobile_use","arguments":{"action":"type"}}</tool_call>',
        "missing_field",
    ),
    (
        "qwen",
        '<tool_call>{"name":"mobile_use","arguments":{"action":"wait","time":"soon"}}</tool_call>',
        "bad_value",
    ),
    (
        "qwen",
        '<tool_call>{"name":"mobile_use","arguments":{"action":"terminate","status":"maybe"}}</tool_call>',
        "bad_value",
    ),
    ("uitars", "click(start_box='(1,2)'", "invalid_call"),
    ("uitars", "Action: click()", "missing_field"),
    ("uitars", "click(start_box='(1)')", "bad_coordinate"),
    ("uitars", "click(start_box='(1,2000)')", "coordinate_out_of_range"),
    ("uitars", "scroll(direction='sideways')", "bad_value"),
    ("uitars", "jump(height='2')", "unknown_action"),
    ("uitars", "os.system('rm')", "invalid_call"),
    ("mobiler1", "<think>x</think><action>y</action>", "missing_tag"),
    ("mobiler1", "<think>x</think><tool_call>not json</tool_call>", "invalid_json"),
    ("androidworld", '{"action_type":"click","index":3}', "element_index_unsupported"),
    ("androidworld", '{"action_type":"double_tap","x":1,"y":2}', "unknown_action"),
    ("androidworld", '{"x":1}', "missing_field"),
    ("androidworld", '{"action_type":"status","goal_status":"done"}', "bad_value"),
    ("canonical", '{"kind":"click"}', "invalid_action"),
    ("canonical", '{"kind":"swipe","point":[1,2],"to":[3,4],"direction":"up"}', "invalid_action"),
]


@pytest.mark.parametrize(("fmt", "text", "reason"), MALFORMED)
def test_malformed_is_parse_error_with_reason_and_raw(fmt: str, text: str, reason: str) -> None:
    with pytest.raises(ParseError) as info:
        get_codec(fmt).parse(text, SCREEN)
    assert info.value.reason == reason
    assert info.value.raw == text


@pytest.mark.parametrize(
    ("fmt", "action"),
    [
        ("agentcpm", A(kind=K.OPEN_APP, text="x")),
        ("agentcpm", A(kind=K.ANSWER, text="x")),
        ("agentcpm", A(kind=K.PRESS, key="menu")),
        ("androidworld", A(kind=K.PRESS, key="menu")),
    ],
)
def test_unsupported_in_target_format(fmt: str, action: Action) -> None:
    with pytest.raises(UnsupportedAction) as info:
        get_codec(fmt).format(action, SCREEN)
    assert info.value.reason == "unsupported_action"


def test_lossy_conversions_keep_meaning() -> None:
    swipe = A(kind=K.SWIPE, point=(500, 500), direction="up")
    qwen = get_codec("qwen")
    back = qwen.parse(qwen.format(swipe, SCREEN), SCREEN)
    assert back.swipe_direction() == "up" and back.to == (500, 200)
    two_points = A(kind=K.SWIPE, point=(100, 900), to=(120, 100))
    aw = get_codec("androidworld")
    assert aw.format(two_points, SCREEN) == '{"action_type":"scroll","direction":"down","x":108,"y":2159}'


def test_unknown_format_and_bad_screen() -> None:
    with pytest.raises(ConfigError, match="unknown action format 'foo'; known: agentcpm"):
        get_codec("foo")
    with pytest.raises(ConfigError, match="WxH"):
        Screen.parse("1080*x")


# --- round-trips -------------------------------------------------------------------

coords = st.tuples(st.integers(0, 1000), st.integers(0, 1000))
texts = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=30)
durations = st.one_of(st.none(), st.integers(0, 600_000))
notes = st.one_of(st.none(), texts)


@st.composite
def actions(draw: st.DrawFn) -> Action:
    kind = draw(st.sampled_from(list(ActionKind)))
    f: dict = {"kind": kind, "thought": draw(notes), "intent": draw(notes)}
    if kind in (K.CLICK, K.LONG_PRESS, K.SWIPE, K.DOUBLE_CLICK, K.RIGHT_CLICK, K.HOVER):
        f["point"] = draw(coords)
    if kind in (K.DRAG, K.SCROLL) and draw(st.booleans()):
        f["point"] = draw(coords)
    if kind == K.DRAG:
        f["to"] = draw(coords)
    if kind == K.SCROLL:
        f["direction"] = draw(st.sampled_from(["up", "down", "left", "right"]))
        f["amount"] = draw(st.one_of(st.none(), st.integers(1, 100)))
    if kind == K.HOTKEY:
        f["text"] = draw(st.sampled_from(["ctrl+s", "ctrl+shift+t", "f5", "alt+tab", "a", "ctrl+a"]))
    if kind in (K.LONG_PRESS, K.WAIT, K.SWIPE):
        f["duration_ms"] = draw(durations)
    if kind == K.SWIPE:
        if draw(st.booleans()):
            f["to"] = draw(coords)
        else:
            f["direction"] = draw(st.sampled_from(["up", "down", "left", "right"]))
    if kind in (K.TYPE, K.OPEN_APP, K.ANSWER):
        f["text"] = draw(texts)
    if kind == K.TYPE and draw(st.booleans()):
        f["point"] = draw(coords)
    if kind == K.PRESS:
        f["key"] = draw(st.sampled_from(["back", "home", "enter", "menu"]))
    if kind == K.TERMINATE:
        f["status"] = draw(st.sampled_from(["success", "failure"]))
    return Action(**{k: v for k, v in f.items() if v is not None})


screens = st.builds(Screen, st.integers(1001, 4000), st.integers(1001, 4000))


@pytest.mark.parametrize("fmt", sorted(CODECS))
@settings(max_examples=300, deadline=None)
@given(action=actions(), screen=screens)
def test_round_trip_exact_where_represented(fmt: str, action: Action, screen: Screen) -> None:
    codec = get_codec(fmt)
    if not codec.represents(action):
        return
    assert codec.parse(codec.format(action, screen), screen) == action


@pytest.mark.parametrize("fmt", sorted(CODECS))
@settings(max_examples=300, deadline=None)
@given(action=actions(), screen=screens)
def test_format_then_parse_never_crashes_and_keeps_kind(fmt: str, action: Action, screen: Screen) -> None:
    codec = get_codec(fmt)
    try:
        text = codec.format(action, screen)
    except UnsupportedAction:
        return
    parsed = codec.parse(text, screen)
    assert parsed.kind == action.kind or {parsed.kind, action.kind} <= {K.ANSWER, K.TERMINATE}


@pytest.mark.parametrize("fmt", sorted(CODECS))
def test_typed_text_holding_a_closing_tag_parses(fmt: str) -> None:
    """Found by the property above: a typed `</tool_call>` cut the JSON of a tool call short."""
    codec, action = get_codec(fmt), Action(kind=K.TYPE, text="</tool_call>")
    try:
        text = codec.format(action, SCREEN)
    except UnsupportedAction:
        return
    assert codec.parse(text, SCREEN).kind == K.TYPE


@settings(max_examples=300, deadline=None)
@given(point=coords, w=st.integers(2, 1000), h=st.integers(2, 1000))
def test_pixel_conversion_error_bounded_on_small_screens(point: tuple[int, int], w: int, h: int) -> None:
    screen = Screen(w, h)
    back = screen.from_px(*screen.to_px(point))
    assert abs(back[0] - point[0]) <= 1000 / (w - 1) / 2 + 0.5
    assert abs(back[1] - point[1]) <= 1000 / (h - 1) / 2 + 0.5


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
@pytest.mark.parametrize("fmt", sorted(CODECS))
def test_arbitrary_text_never_crashes(fmt: str, text: str) -> None:
    try:
        get_codec(fmt).parse(text, SCREEN)
    except ParseError as exc:
        assert exc.raw == text and exc.reason


def test_uitars_text_containing_action_marker() -> None:
    codec = get_codec("uitars")
    typed = A(kind=K.TYPE, text="see Action: below")
    assert codec.parse(codec.format(typed, SCREEN), SCREEN) == typed
    with_thought = typed.model_copy(update={"thought": "type it"})
    assert codec.parse(codec.format(with_thought, SCREEN), SCREEN) == with_thought


def test_uitars_thought_or_text_that_says_action_still_parses() -> None:
    # found by hypothesis: a thought reading "Action:" hid the real call
    codec, screen = get_codec("uitars"), Screen(1080, 2400)
    for action in (
        Action(kind=ActionKind.CLICK, point=(0, 0), thought="Action:"),
        Action(kind=ActionKind.TYPE, text="Action: x", thought="Action: type it"),
    ):
        assert codec.parse(codec.format(action, screen), screen) == action
