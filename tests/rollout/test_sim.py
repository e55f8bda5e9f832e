"""The simulated device: actions, element tree, verifier, rendering, fault switches."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from rollout.sim.env import SimEnv
from rollout.sim.render import FrameRenderer
from storage.keys import blob_key
from storage.objectstore import LocalObjectStore
from trajforge.actions import Action, ActionKind
from trajforge.appspec import builtin_app_names, load_app
from trajforge.domain import Query
from trajforge.errors import DeviceCrashed, DeviceHung
from trajforge.world import FaultConfig, Goal, Move, SimDevice, verify
from trajforge.world.oracle import OracleError, replay

APPS = [load_app(n) for n in builtin_app_names()]
K = ActionKind


def tap(device: SimDevice, element_id: str) -> str:
    element = next(e for e in device.elements() if e.id == element_id)
    return device.act(Action(kind=K.CLICK, point=device.size.from_px(*element.center)))


@pytest.fixture
def device() -> SimDevice:
    return SimDevice(APPS)


def test_launcher_lists_every_app(device: SimDevice) -> None:
    assert [e.text for e in device.elements()] == ["滴滴出行", "Settings", "ShopMall", "Takeout"]
    assert device.state.app is None


def test_tap_open_navigate_back_home(device: SimDevice) -> None:
    assert tap(device, "app:takeout") == "opened_app"
    assert device.state.screen == "home"
    assert tap(device, "stores:1") == "navigated"
    assert (device.state.screen, device.slot_values()["store"]) == ("store", "Noodle House")
    assert device.act(Action(kind=K.PRESS, key="back")) == "back"
    assert device.state.screen == "home"
    assert device.act(Action(kind=K.PRESS, key="home")) == "home"
    assert device.state.app is None
    assert device.act(Action(kind=K.OPEN_APP, text="takeout")) == "opened_app"
    assert device.act(Action(kind=K.OPEN_APP, text="Nope")) == "unknown_app"


def test_taps_outside_widgets_change_nothing(device: SimDevice) -> None:
    tap(device, "app:takeout")
    assert device.act(Action(kind=K.CLICK, point=(5, 2))) == "tap_missed"  # the status bar
    assert device.act(Action(kind=K.LONG_PRESS, point=(500, 500))) == "no_change"


def test_scroll_reveals_list_items(device: SimDevice) -> None:
    tap(device, "app:takeout")
    visible = {e.value for e in device.elements() if e.kind == "list_item"}
    assert "老北京炸酱面" not in visible and device.max_scroll() > 0
    assert device.act(Action(kind=K.SWIPE, point=(500, 700), direction="up")) == "scrolled"
    device.act(Action(kind=K.SWIPE, point=(500, 700), to=(500, 100)))
    assert "老北京炸酱面" in {e.value for e in device.elements()}
    for _ in range(5):
        device.act(Action(kind=K.SWIPE, point=(500, 300), direction="down"))
    assert device.state.scroll == 0
    assert device.act(Action(kind=K.SWIPE, point=(500, 300), direction="left")) == "no_change"


def test_typing_fills_the_focused_input_and_enter_submits(device: SimDevice) -> None:
    tap(device, "app:takeout")
    assert device.act(Action(kind=K.TYPE, text="sushi")) == "typed_nowhere"
    assert tap(device, "search_box") == "focused"
    assert device.act(Action(kind=K.TYPE, text="sushi")) == "typed"
    assert next(e for e in device.elements() if e.id == "search_box").text == "sushi"
    assert device.act(Action(kind=K.PRESS, key="enter")) == "navigated"
    assert device.state.screen == "results" and device.slot_values()["search"] == "sushi"


def test_toggles_and_radio_lists(device: SimDevice) -> None:
    tap(device, "app:settings")
    tap(device, "network")
    wifi = next(e for e in device.elements() if e.id == "wifi")
    assert wifi.checked is False  # "on" is the first value, so checked means the second ("off")
    assert tap(device, "wifi") == "toggled" and device.slot_values()["wifi"] == "off"
    device.act(Action(kind=K.PRESS, key="back"))
    tap(device, "display")
    tap(device, "brightness")
    assert tap(device, "levels:2") == "selected"
    assert device.slot_values()["brightness"] == "High"
    assert [e.checked for e in device.elements()] == [False, False, True, False]


def test_terminate_and_answer_are_recorded(device: SimDevice) -> None:
    device.act(Action(kind=K.ANSWER, text="42"))
    device.act(Action(kind=K.TERMINATE, status="failure"))
    assert (device.state.answer, device.state.finished) == ("42", "failure")


def test_verifier_names_the_failed_constraint(device: SimDevice) -> None:
    goal = Goal(app="takeout", screen="placed", state={"dish": "Fries", "quantity": "2"})
    assert verify(goal, device).failed == "app"
    replay(
        device,
        "takeout",
        [Move("home", "stores", "Sushi Go"), Move("store", "dishes", "Fries"), Move("dish", "qty", "3")],
    )
    result = verify(goal, device)
    assert (result.success, result.failed) == (False, "screen")
    replay(
        device,
        "takeout",
        [
            Move("home", "stores", "Sushi Go"),
            Move("store", "dishes", "Fries"),
            Move("dish", "qty", "3"),
            Move("options", "spice", "hot"),
            Move("address", "addresses", "Home"),
            Move("checkout", "place"),
        ],
    )
    result = verify(goal, device)
    assert (result.success, result.failed, result.detail) == (
        False,
        "slot:quantity",
        "expected quantity='2', got '3'",
    )


def test_oracle_refuses_impossible_paths(device: SimDevice) -> None:
    with pytest.raises(OracleError) as info:
        replay(device, "takeout", [Move("store", "dishes", "Fries")])
    assert info.value.reason == "off_path"
    with pytest.raises(OracleError) as info:
        replay(device, "takeout", [Move("home", "stores", "Unknown Diner")])
    assert info.value.reason == "element_missing"


def test_rendering_is_deterministic_and_cached(device: SimDevice, tmp_path: Path) -> None:
    renderer = FrameRenderer()
    first, sha = renderer.frame(device)
    again = FrameRenderer(cache_size=0).frame(device)
    assert again == (first, sha) and renderer.misses == 1
    assert renderer.frame(device) == (first, sha) and renderer.hits == 1
    tap(device, "app:ridehail")
    png, other = renderer.frame(device)
    assert other != sha
    (tmp_path / "f.png").write_bytes(png)
    with Image.open(tmp_path / "f.png") as img:
        assert img.size == (1080, 2400)


def test_popups_must_be_dismissed() -> None:
    device = SimDevice(APPS, faults=FaultConfig(seed=1, popup_rate=1.0))
    tap(device, "app:takeout")
    assert device.state.popup and [e.id for e in device.elements()] == ["popup_close"]
    assert device.act(Action(kind=K.CLICK, point=(500, 300))) == "ignored_under_popup"
    assert tap(device, "popup_close") == "dismissed_popup"
    assert not device.state.popup and device.state.screen == "home"


def test_slow_screens_swallow_one_action() -> None:
    device = SimDevice(APPS, faults=FaultConfig(seed=1, slow_rate=1.0))
    tap(device, "app:takeout")
    assert device.state.loading and device.elements() == []
    assert device.act(Action(kind=K.WAIT)) == "waited"
    assert not device.state.loading and device.elements()


def test_crash_and_hang_are_errors_until_reset() -> None:
    device = SimDevice(APPS, faults=FaultConfig(seed=3, crash_rate=1.0))
    with pytest.raises(DeviceCrashed):
        device.act(Action(kind=K.WAIT))
    with pytest.raises(DeviceCrashed, match="reset it"):
        device.act(Action(kind=K.WAIT))
    hung = SimDevice(APPS, faults=FaultConfig(seed=3, hang_rate=1.0))
    with pytest.raises(DeviceHung):
        hung.act(Action(kind=K.WAIT))


def test_faults_are_seeded() -> None:
    def run(seed: int) -> list[bool]:
        device = SimDevice(APPS, faults=FaultConfig(seed=seed, popup_rate=0.5))
        seen = []
        for episode in range(10):
            device.reset(episode_seed=episode)
            tap(device, "app:takeout")
            seen.append(device.state.popup)
        return seen

    assert run(7) == run(7)
    assert run(7) != run(8)
    assert 0 < sum(run(7)) < 10  # episodes differ from one another


def test_env_protocol_stores_frames_once(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    env = SimEnv(APPS, store=store)
    task = Query(
        uid="q",
        app="settings",
        instruction="Turn Wi-Fi off",
        goal={"app": "settings", "screen": "network", "state": {"wifi": "off"}},
    )
    first = env.reset(task)
    assert first.elements and first.width == 1080 and "screen" not in first.meta
    assert store.exists(blob_key(first.screenshot))
    for move in (["app:settings"], ["network"], ["wifi"]):
        element = next(e for e in env.device.elements() if e.id == move[0])
        obs = env.step(Action(kind=K.CLICK, point=env.device.size.from_px(*element.center)))
    assert env.verify().success
    assert obs.screenshot != first.screenshot
    env.reset(task)  # the launcher again: same frame, stored once
    assert len(list(store.list("blobs/"))) == 4
    env.close()


def test_the_layout_cache_never_changes_what_the_device_shows() -> None:
    """A random walk of taps, scrolls, typing and back on every app: with the layout cache and
    without it, every element tree is the same."""
    import random

    cached, fresh = SimDevice(APPS), SimDevice(APPS)
    fresh.layout_cache = 0
    rng = random.Random(3)
    for _ in range(400):
        assert cached.elements() == fresh.elements() and cached.max_scroll() == fresh.max_scroll()
        roll = rng.random()
        if roll < 0.6 and cached.elements():
            x, y = rng.choice(cached.elements()).center
            action = Action(kind=K.CLICK, point=cached.size.from_px(x, y))
        elif roll < 0.75:
            action = Action(kind=K.SWIPE, point=(500, 600), direction=rng.choice(["up", "down"]))
        elif roll < 0.85:
            action = Action(kind=K.TYPE, text=rng.choice(["milk", "五道口", "x"]))
        else:
            action = Action(kind=K.PRESS, key=rng.choice(["back", "home", "enter"]))
        assert cached.act(action) == fresh.act(action)
    assert cached._layouts  # the walk did use the cache
