"""The built-in trainable policy on its own: text helpers, training rows, acting on screens."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import pytest
from PIL import Image

from rollout.policies.knn import KnnPolicy
from rollout.policies.knn_memory import Memory, demonstrated, train
from rollout.policies.knn_text import Coverage, copy_span, instruction_of, named, said, shared
from trajforge.actions import Action, ActionKind
from trajforge.domain import Observation, Query
from trajforge.errors import ConfigError
from trajforge.text import words


def test_words_and_spans() -> None:
    assert words("Order 2 Fries, hot!") == ["order", "2", "fries", "hot"]
    assert words("叫车去五道口") == ["叫", "车", "去", "五", "道", "口"]
    assert instruction_of("Task: buy milk\nHistory: none") == "buy milk"
    assert copy_span("burger", "Search for burger and order", "Search for sushi please") == "sushi"
    assert copy_span("running shoes", "Search for running shoes and buy", "Search for rice cooker now") == (
        "rice cooker"
    )
    assert copy_span("x", "no anchor", "nothing here") == "x"  # nothing to align: typed as shown
    assert copy_span(  # up to the word that followed the typed text in the demonstration
        "running shoes",
        "Search for running shoes, then buy",
        "Search for noise cancelling headphones, then buy",
    ) == ("noise cancelling headphones")


def _png(shade: int) -> bytes:
    img = Image.new("L", (90, 200), shade)
    img.paste(255 - shade, (10, 10 + shade // 8, 80, 40 + shade // 8))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _row(png: bytes, instruction: str, action: dict, bbox: list[int] | None, step: int, episode: str) -> dict:
    truth = {"action": action, "bbox": bbox, "screen": [90, 200]}
    return {
        "prompt": [{"role": "user", "content": f"<image>Task: {instruction}\nHistory: none"}],
        "images": [{"bytes": png}],
        "reward_model": {"ground_truth": json.dumps(truth)},
        "extra_info": {"step": step, "episode": episode, "weight": 1.0},
    }


ROWS = [
    _row(_png(40), "open Sushi Go", {"kind": "click", "point": [500, 300]}, [0, 250, 1000, 350], 0, "e1"),
    _row(_png(200), "open Sushi Go", {"kind": "terminate", "status": "success"}, None, 1, "e1"),
    _row(_png(40), "x", {"kind": "click", "point": [500, 300]}, None, 0, "e2"),
]


def test_training_skips_low_level_prompts_and_links_steps(tmp_path: Path) -> None:
    low = dict(ROWS[0], prompt=[{"role": "user", "content": "<image>Instruction: tap 'X'"}])
    memory = train([*ROWS, low])
    assert len(memory) == 3
    assert memory.previous[1] == {"kind": "click", "point": [500, 300]} and memory.previous[0] is None
    memory.save(tmp_path / "ckpt", {"rows": 3})
    again = Memory.load(tmp_path / "ckpt")
    assert again.actions == memory.actions and again.steps == [0, 1, 0]
    with pytest.raises(ConfigError, match=r"not a knn checkpoint .*python -m rollout.policies.knn"):
        Memory.load(tmp_path)


def test_acting_picks_the_row_the_task_names_and_scrolls_when_none_is_shown() -> None:
    frames = {"a": _png(40), "b": _png(200)}
    policy = KnnPolicy(train(ROWS), frames.__getitem__, version=1)
    query = Query(uid="q", app="takeout", instruction="open Taco Town")
    rows = [
        {
            "id": f"r{i}",
            "kind": "list_item",
            "widget": "stores",
            "text": name,
            "bounds": [0, 40 * i, 90, 40 * i + 38],
        }
        for i, name in enumerate(["Burger Barn", "Sushi Go", "Taco Town"])
    ]
    policy.start(query, seed="s", rollout=0)
    act = policy.decide(Observation(screenshot="a", width=90, height=200, elements=rows))
    assert act.kind == ActionKind.CLICK and act.point is not None
    assert 80 <= act.point[1] * 200 / 1000 <= 118  # the third row: the one the task names
    policy.start(query.model_copy(update={"instruction": "open Green Bowl"}), seed="s")
    scroll = policy.decide(Observation(screenshot="a", width=90, height=200, elements=rows))
    assert scroll.kind == ActionKind.SWIPE  # the demo tapped this list; the named row is not on screen
    done = policy.decide(Observation(screenshot="b", width=90, height=200, elements=[]))
    assert done == Action(kind=ActionKind.TERMINATE, status="success")


def _controls() -> list[dict]:
    return [
        {"id": "dark", "kind": "toggle", "text": "Dark theme", "bounds": [0, 20, 90, 50]},
        {"id": "timeout", "kind": "button", "text": "Screen timeout", "bounds": [0, 60, 90, 90]},
    ]


def test_a_control_the_task_names_beats_the_one_the_demo_tapped() -> None:
    demo = _row(
        _png(40), "open Screen timeout", {"kind": "click", "point": [500, 375]}, [0, 300, 1000, 450], 0, "e"
    )
    policy = KnnPolicy(train([demo]), {"a": _png(40)}.__getitem__, version=1)
    policy.start(Query(uid="q", app="settings", instruction="turn dark theme on"), seed="s")
    act = policy.decide(Observation(screenshot="a", width=90, height=200, elements=_controls()))
    assert act.kind == ActionKind.CLICK and act.point is not None
    assert 20 <= act.point[1] * 200 / 1000 <= 50  # the toggle the task names, not the demo's button


def test_an_action_that_changed_nothing_is_not_repeated_and_back_ends_the_loop() -> None:
    demo = _row(
        _png(40), "pick a row", {"kind": "swipe", "point": [500, 600], "direction": "up"}, None, 0, "e"
    )
    policy = KnnPolicy(train([demo]), {"a": _png(40)}.__getitem__, version=1)
    policy.start(Query(uid="q", app="settings", instruction="pick a row"), seed="s")
    stuck = Observation(screenshot="a", width=90, height=200, elements=[])
    assert policy.decide(stuck).kind == ActionKind.SWIPE
    assert policy.decide(stuck) == Action(kind=ActionKind.PRESS, key="back")  # the swipe did nothing


def test_demonstrations_join_the_memory_and_lead_an_unseen_task() -> None:
    frames = {"a": _png(40), "b": _png(200)}
    policy = KnnPolicy(demonstrated(train(ROWS[:2]), [], frames.__getitem__), frames.__getitem__)
    assert len(policy.memory) == 2  # no demonstrations: the memory as trained
    demo = {
        "instruction": "reach the bottom",
        "screenshot": "a",
        "action": {"kind": "press", "key": "enter"},
        "bbox": None,
        "step": 0,
        "previous": None,
    }
    taught = demonstrated(train(ROWS[:2]), [demo], frames.__getitem__)
    assert len(taught) == 3 and taught.instructions[-1] == "reach the bottom"
    policy = KnnPolicy(taught, frames.__getitem__)
    policy.start(Query(uid="q", app="takeout", instruction="reach the bottom"), seed="s")
    assert (
        policy.decide(Observation(screenshot="a", width=90, height=200, elements=[])).kind == ActionKind.PRESS
    )


def test_a_control_the_task_names_outvotes_a_demo_that_did_something_else() -> None:
    demo = _row(_png(40), "open Screen timeout", {"kind": "press", "key": "back"}, None, 0, "e")
    policy = KnnPolicy(train([demo]), {"a": _png(40)}.__getitem__, version=1)
    policy.start(Query(uid="q", app="settings", instruction="open Screen timeout"), seed="s")
    act = policy.decide(Observation(screenshot="a", width=90, height=200, elements=_controls()))
    assert act.kind == ActionKind.CLICK and act.point is not None
    assert 60 <= act.point[1] * 200 / 1000 <= 90  # 'Screen timeout', named by the task


def _buttons() -> list[dict]:
    return [
        {"id": "cart", "kind": "button", "text": "Add to cart", "bounds": [0, 20, 90, 50]},
        {"id": "buy", "kind": "button", "text": "Buy now", "bounds": [0, 60, 90, 90]},
        {"id": "kitchen", "kind": "list_item", "text": "Kitchen", "bounds": [0, 100, 90, 130]},
    ]


def test_among_named_controls_the_demonstrated_one_wins_and_half_naming_counts() -> None:
    demo = _row(
        _png(40), "look in Books", {"kind": "click", "point": [500, 575]}, [0, 500, 1000, 650], 0, "e"
    )
    policy = KnnPolicy(train([demo]), {"a": _png(40)}.__getitem__, version=1)
    screen = Observation(screenshot="a", width=90, height=200, elements=_buttons())
    policy.start(
        Query(uid="q", app="shopping", instruction="look in Kitchen and add a pan to my cart"), seed="s"
    )
    act = policy.decide(screen)  # 'Add to cart' and 'Kitchen' are both named; the demo tapped the list
    assert act.point is not None and 100 <= act.point[1] * 200 / 1000 <= 130
    tied = [  # the same screen, the same instruction, two actions: the demonstrations tie
        _row(_png(40), "get a red pan", {"kind": "click", "point": [500, 175]}, [0, 100, 1000, 250], 0, "e1"),
        _row(_png(40), "get a red pan", {"kind": "click", "point": [500, 375]}, [0, 300, 1000, 450], 0, "e2"),
    ]
    policy = KnnPolicy(train(tied), {"a": _png(40)}.__getitem__, version=1)
    policy.start(Query(uid="q", app="shopping", instruction="buy a blue pan"), seed="s")
    act = policy.decide(screen)  # 'Buy now': half its words are said, none of 'Add to cart'
    assert act.point is not None and 60 <= act.point[1] * 200 / 1000 <= 90


def test_a_named_control_is_tapped_once_per_episode() -> None:
    demo = _row(_png(40), "done", {"kind": "terminate", "status": "success"}, None, 0, "e")
    frames = {"a": _png(40), "b": _png(41)}
    policy = KnnPolicy(train([demo]), frames.__getitem__, version=1)
    policy.start(Query(uid="q", app="settings", instruction="turn dark theme on"), seed="s")
    first = policy.decide(Observation(screenshot="a", width=90, height=200, elements=_controls()))
    assert first.kind == ActionKind.CLICK  # the toggle the task names
    after = policy.decide(Observation(screenshot="b", width=90, height=200, elements=_controls()))
    assert after == Action(kind=ActionKind.TERMINATE, status="success")  # not toggled back off


def test_cjk_text_is_named_whole_not_by_half_its_characters() -> None:
    cars = [
        {"id": "premier", "kind": "button", "text": "专车", "bounds": [0, 20, 90, 50]},
        {"id": "express", "kind": "button", "text": "快车", "bounds": [0, 60, 90, 90]},
    ]
    demo = _row(_png(40), "叫一辆车", {"kind": "click", "point": [500, 175]}, [0, 100, 1000, 250], 0, "e")
    policy = KnnPolicy(train([demo]), {"a": _png(40)}.__getitem__, version=1)
    task = Query(uid="q", app="ridehail", instruction="打一辆快车到中关村")
    picked = set()
    for seed in range(60):  # sampled rollouts: 专车 must get no vote at all to be never picked
        policy.start(task, seed=str(seed), rollout=1)
        act = policy.decide(Observation(screenshot="a", width=90, height=200, elements=cars))
        assert act.point is not None
        picked.add(act.point[1] * 200 // 1000)
    assert all(60 <= y <= 90 for y in picked), picked  # 快车, the car the task names


def test_coverage_reads_the_task_as_done_after_its_last_named_move() -> None:
    task = Coverage("Open Settings, then open Display, then open Brightness level")
    task.see([{"kind": "button", "text": "Display"}, {"kind": "button", "text": "Sound"}])
    task.act("Settings")
    assert not task.done()  # "display" is still to do, and was seen
    task.act("Display")
    assert not task.done()  # "brightness level" trails
    task.act("")  # a swipe covers nothing
    task.act("Brightness level")
    assert task.done()
    task.act("")
    assert not task.done()  # only right after the move that did it
    toggle = Coverage("turn Wi-Fi off")
    toggle.act("Wi-Fi")
    assert toggle.done()  # one word ("off") may trail
    row = Coverage("open Sound, then choose Ripple")
    row.act("Sound")
    assert not row.done()  # two do
    seen = Coverage("open Display and turn dark theme on")
    seen.see([{"kind": "toggle", "text": "Dark theme"}])
    seen.act("Display")
    assert not seen.done()  # dark theme was on a screen and not yet acted on
    assert seen.position({"text": "Dark theme"}) == 4 and seen.position({"text": "Sound"}) == 7


def test_once_its_named_moves_are_done_the_task_ends_where_a_neighbour_went_on_for_its_own() -> None:
    demo = _row(
        _png(200), "open Screen timeout", {"kind": "click", "point": [500, 375]}, [0, 300, 1000, 450], 1, "e"
    )
    frames = {"a": _png(40), "b": _png(200)}
    policy = KnnPolicy(train([demo]), frames.__getitem__, version=1)
    policy.start(Query(uid="q", app="settings", instruction="open Display"), seed="s")
    display = [{"id": "display", "kind": "button", "text": "Display", "bounds": [0, 60, 90, 90]}]
    assert policy.decide(Observation(screenshot="a", width=90, height=200, elements=display)).kind == (
        ActionKind.CLICK
    )
    end = policy.decide(Observation(screenshot="b", width=90, height=200, elements=_controls()))
    assert end == Action(kind=ActionKind.TERMINATE, status="success")  # not 'Screen timeout'
    policy.start(Query(uid="q", app="settings", instruction="open Screen timeout"), seed="s")
    act = policy.decide(Observation(screenshot="b", width=90, height=200, elements=_controls()))
    assert act.kind == ActionKind.CLICK  # the same neighbour, a task that asks for its move


def test_among_controls_named_whole_the_one_the_task_says_first_is_tapped_first() -> None:
    demo = _row(_png(40), "elsewhere", {"kind": "terminate", "status": "success"}, None, 0, "e")
    policy = KnnPolicy(train([demo]), {"a": _png(40)}.__getitem__, version=1)
    toggles = [
        {"id": "bt", "kind": "toggle", "text": "Bluetooth", "bounds": [0, 20, 90, 50]},
        {"id": "wifi", "kind": "toggle", "text": "Wi-Fi", "bounds": [0, 60, 90, 90]},
    ]
    policy.start(
        Query(uid="q", app="settings", instruction="turn Wi-Fi off, then turn Bluetooth on"), seed="s"
    )
    act = policy.decide(Observation(screenshot="a", width=90, height=200, elements=toggles))
    assert act.point is not None and 60 <= act.point[1] * 200 / 1000 <= 90  # Wi-Fi, said first


def test_a_control_is_named_by_the_words_that_set_it_apart_on_its_screen() -> None:
    colours = [
        {"id": "c0", "kind": "button", "text": "Color: Blue", "bounds": [0, 20, 90, 50]},
        {"id": "c1", "kind": "button", "text": "Color: White", "bounds": [0, 60, 90, 90]},
    ]
    common = shared(colours)
    assert common == {"color"}
    assert named(colours[1], set(words("buy the Pixel 9 in White")), common) == 1.0
    assert named(colours[1], set(words("buy the Pixel 9 in White"))) == 0.5  # alone, half of it
    zones = [{"kind": "list_item", "text": t} for t in ("Beijing (GMT+8)", "Singapore (GMT+8)")]
    assert said(zones[0], set(words("Change the time zone to Singapore (GMT+8)")), shared(zones)) == 0.0


def test_a_tapped_text_field_waits_for_its_text() -> None:
    field = {"id": "q", "kind": "input", "text": "Search products", "bounds": [0, 20, 90, 50]}
    row = {"id": "k", "kind": "list_item", "widget": "cats", "text": "Kitchen", "bounds": [0, 60, 90, 90]}
    demos = [
        _row(
            _png(40), "search for a pan", {"kind": "click", "point": [500, 175]}, [0, 100, 1000, 250], 0, "e"
        ),
        _row(_png(200), "search for a pan", {"kind": "type", "text": "a pan"}, None, 1, "e"),
    ]
    frames = {"a": _png(40), "b": _png(200)}
    policy = KnnPolicy(train(demos), frames.__getitem__, version=1)
    policy.start(Query(uid="q", app="shopping", instruction="search for a Kitchen knife"), seed="s")
    tap = policy.decide(Observation(screenshot="a", width=90, height=200, elements=[field]))
    assert tap.kind == ActionKind.CLICK
    typed = policy.decide(Observation(screenshot="b", width=90, height=200, elements=[field, row]))
    assert typed.kind == ActionKind.TYPE and typed.text == "a Kitchen"  # not a tap on the row


def test_a_list_row_is_named_only_whole() -> None:
    row = {"kind": "list_item", "widget": "stores", "text": "Taco Town"}
    assert said(row, set(words("Order 3 Fish Taco from Falafel Stop"))) == 0.0
    assert said(dict(row, kind="button"), set(words("Order 3 Fish Taco from Falafel Stop"))) == 0.5


def test_a_named_button_waits_for_the_value_the_task_quotes_before_it() -> None:
    """MiniWoB's enter-text: 'Enter "Myron" ... and press Submit' types first, then submits."""
    field = {"id": "", "kind": "input", "text": "", "bounds": [17, 64, 145, 85]}
    submit = {"id": "", "kind": "button", "text": "Submit", "bounds": [17, 104, 112, 135]}
    said = 'Enter "Tamra" into the text field and press Submit.'
    demos = [
        _row(_png(40), said, {"kind": "click", "point": [500, 355]}, [106, 305, 906, 405], 0, "e"),
        _row(_png(40), said, {"kind": "type", "text": "Tamra"}, None, 1, "e"),
        _row(_png(40), said, {"kind": "click", "point": [400, 567]}, [106, 495, 700, 643], 2, "e"),
    ]
    policy = KnnPolicy(train(demos), {"a": _png(40)}.__getitem__, version=1)
    policy.start(
        Query(uid="q", app="miniwob:enter-text", instruction=said.replace("Tamra", "Myron")), seed="s"
    )
    tap = policy.decide(Observation(screenshot="a", width=160, height=210, elements=[field, submit]))
    assert tap.kind == ActionKind.CLICK and tap.point is not None and tap.point[1] < 450  # the field
    typed = policy.decide(Observation(screenshot="a", width=160, height=210, elements=[field, submit]))
    assert typed.kind == ActionKind.TYPE and typed.text == "Myron"
    filled = {**field, "text": "Myron"}
    press = policy.decide(Observation(screenshot="a", width=160, height=210, elements=[filled, submit]))
    assert press.kind == ActionKind.CLICK and press.point is not None and press.point[1] > 450  # Submit


def test_the_explorer_types_a_quoted_value_into_the_field_it_tapped() -> None:
    import asyncio

    from rollout.policies.oracle import RandomExplorer, phrases

    assert phrases('Enter "Myron" into the text field.') == ["Myron"]
    assert phrases("Search burgers") == ["Search", "burgers"]
    field = {"id": "", "kind": "input", "text": "", "bounds": [0, 0, 160, 210]}
    obs = Observation(screenshot="a", width=160, height=210, elements=[field])
    kinds = []
    for seed in range(6):
        explorer = RandomExplorer(fmt="canonical")
        explorer.start(
            Query(uid="q", app="a", instruction='Enter "Myron" into the text field.'), seed=str(seed)
        )
        outs = [asyncio.run(explorer.act(obs)).text for _ in range(4)]
        kinds += [json.loads(o)["kind"] for o in outs]
        assert all(
            json.loads(b).get("text") == "Myron" for a, b in itertools.pairwise(outs) if '"click"' in a
        )
    assert "type" in kinds


@pytest.mark.parametrize(("shown", "types"), [("New task", True), ("Search", True), ("Myron", False)])
def test_the_explorer_types_into_a_field_showing_its_placeholder_not_one_holding_the_value(
    shown: str, types: bool
) -> None:
    """A web form's empty field shows its placeholder, and the simulator's its label."""
    import asyncio

    from rollout.policies.oracle import RandomExplorer

    field = {"id": "", "kind": "input", "text": shown, "bounds": [0, 0, 160, 210]}
    obs = Observation(screenshot="a", width=160, height=210, elements=[field])
    after_tap = []
    for seed in range(8):
        explorer = RandomExplorer(fmt="canonical")
        explorer.start(Query(uid="q", app="a", instruction='Add "Myron" to the list.'), seed=str(seed))
        outs = [json.loads(asyncio.run(explorer.act(obs)).text) for _ in range(4)]
        after_tap += [b["kind"] for a, b in itertools.pairwise(outs) if a["kind"] == "click"]
    assert after_tap and all((kind == "type") == types for kind in after_tap), after_tap


def test_a_demonstrated_tap_that_hits_nothing_here_goes_to_the_nearest_control() -> None:
    """MiniWoB's focus-text puts its field elsewhere for each seed: the tap follows the field."""
    demo = _row(
        _png(40),
        "Focus into the textbox.",
        {"kind": "click", "point": [500, 400]},
        [100, 380, 900, 420],
        0,
        "e",
    )
    policy = KnnPolicy(train([demo]), {"a": _png(40)}.__getitem__, version=1)
    policy.start(Query(uid="q", app="miniwob:focus-text", instruction="Focus into the textbox."), seed="s")
    field = {"id": "tt", "kind": "input", "text": "", "bounds": [17, 137, 145, 158]}
    label = {"id": "query", "kind": "text", "text": "Focus into the textbox.", "bounds": [0, 0, 160, 50]}
    tap = policy.decide(Observation(screenshot="a", width=160, height=210, elements=[label, field]))
    assert tap.kind == ActionKind.CLICK and tap.point is not None
    assert 137 <= tap.point[1] * 210 / 1000 <= 158  # on the field, not where the demo's field was
