"""The adb backend's commands, errors and UI parsing, against the fake adb."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.android.env import AdbEnv, parse_ui_dump
from tests.support.fake_adb import SERIAL, FakeAdb, package_of
from trajforge.actions import Action, ActionKind
from trajforge.appspec import builtin_app_names, load_app
from trajforge.domain import Query
from trajforge.errors import ConfigError, DeviceCrashed, DeviceHung

APPS = [load_app(n) for n in builtin_app_names()]
K = ActionKind
TASK = Query(
    uid="q",
    app="takeout",
    instruction="search",
    goal={"app": "takeout", "screen": "results", "state": {"search": "炸酱面 house"}},
)


@pytest.fixture
def fake(tmp_path: Path):
    adb = FakeAdb(APPS, tmp_path)
    yield adb
    adb.close()


def test_commands_sent_for_each_action(fake: FakeAdb) -> None:
    env = AdbEnv(SERIAL, {a.name: package_of(a.name) for a in APPS}, adb=str(fake.path))
    env.reset(TASK)
    assert fake.commands[:3] == [
        ["-s", SERIAL, "shell", "am", "force-stop", "com.trajforge.takeout"],
        ["-s", SERIAL, "shell", "input", "keyevent", "KEYCODE_HOME"],
        ["-s", SERIAL, "exec-out", "screencap", "-p"],
    ]
    env.step(Action(kind=K.OPEN_APP, text="takeout"))
    assert [
        "-s",
        SERIAL,
        "shell",
        "am",
        "start",
        "-n",
        "com.trajforge.takeout/.MainActivity",
    ] in fake.commands
    bare = AdbEnv(SERIAL, {"takeout": "com.trajforge.takeout"}, adb=str(fake.path))
    bare.step(Action(kind=K.OPEN_APP, text="takeout"))
    assert fake.commands[-4][3:6] == ["monkey", "-p", "com.trajforge.takeout"]
    obs = env.step(Action(kind=K.CLICK, point=(500, 140)))  # the search box
    assert ["-s", SERIAL, "shell", "input", "tap", "540", "336"] in fake.commands
    assert next(e for e in obs.elements or [] if e["id"] == "search_box")["kind"] == "input"
    env.step(Action(kind=K.TYPE, text="炸酱面 house"))  # non-ASCII goes through the ADB keyboard
    assert [
        "-s",
        SERIAL,
        "shell",
        "am",
        "broadcast",
        "-a",
        "ADB_INPUT_TEXT",
        "--es",
        "msg",
        "炸酱面 house",
    ] in fake.commands
    env.step(Action(kind=K.PRESS, key="enter"))
    assert env.verify().success
    env.step(Action(kind=K.TYPE, text="it's a b"))
    assert ["-s", SERIAL, "shell", "input", "text", "it\\'s%sa%sb"] in fake.commands
    env.step(Action(kind=K.SWIPE, point=(500, 700), direction="up"))
    assert fake.commands[-4][3:5] == ["input", "swipe"]
    env.step(Action(kind=K.LONG_PRESS, point=(500, 500), duration_ms=800))
    assert ["-s", SERIAL, "shell", "input", "swipe", "540", "1200", "540", "1200", "800"] in fake.commands


def test_offline_device_is_a_crash(fake: FakeAdb) -> None:
    env = AdbEnv(SERIAL, adb=str(fake.path))
    env.reset(TASK)
    fake.offline = True
    with pytest.raises(DeviceCrashed, match="device offline"):
        env.step(Action(kind=K.PRESS, key="back"))
    fake.offline = False
    with pytest.raises(DeviceCrashed, match="not found"):
        AdbEnv("emulator-9999", adb=str(fake.path)).reset(TASK)


def test_missing_and_hanging_adb(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="adb executable '/nonexistent/adb' not found"):
        AdbEnv(SERIAL, adb="/nonexistent/adb").reset(TASK)
    slow = tmp_path / "adb"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    with pytest.raises(DeviceHung, match="timed out"):
        AdbEnv(SERIAL, adb=str(slow), timeout_s=0.3).reset(TASK)


def test_parse_a_real_style_ui_dump() -> None:
    xml = (
        "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">"
        '<node index="0" text="" resource-id="" class="android.widget.FrameLayout" package="com.android.settings"'
        ' checkable="false" checked="false" clickable="false" bounds="[0,0][1080,2400]">'
        '<node index="1" text="Wi‑Fi" resource-id="android:id/switch_widget" class="android.widget.Switch"'
        ' package="com.android.settings" checkable="true" checked="true" clickable="true" bounds="[900,400][1040,480]" />'
        "</node></hierarchy>"
    )
    nodes = parse_ui_dump(xml)
    assert nodes[1] == {
        "id": "android:id/switch_widget",
        "kind": "toggle",
        "text": "Wi‑Fi",
        "bounds": [900, 400, 1040, 480],
        "widget": "",
        "value": None,
        "checked": True,
        "clickable": True,
    }
    assert parse_ui_dump("not xml") == []


def test_an_app_that_exports_no_state_has_no_verifier() -> None:
    from trajforge.world.verify import UNVERIFIABLE, check_exported_state

    goal = {"app": "takeout", "screen": "placed", "state": {}}
    for exported in ("", "  \n", "not json"):
        assert check_exported_state(goal, exported).failed == UNVERIFIABLE
    assert check_exported_state(goal, '{"app": "takeout", "screen": "placed"}').success


@pytest.mark.parametrize("text", ["炸酱面 house", "pizza"])
def test_the_offline_critics_judge_an_android_episode_like_the_verifier(fake: FakeAdb, text: str) -> None:
    from trajforge.domain import StepView
    from trajforge.world.route_check import RouteGoalCheck, RouteStepCheck

    env = AdbEnv(SERIAL, {a.name: package_of(a.name) for a in APPS}, adb=str(fake.path))
    obs = env.reset(TASK)
    steps = []
    for action in (
        Action(kind=K.OPEN_APP, text="takeout"),
        Action(kind=K.CLICK, point=(500, 140)),  # the search box
        Action(kind=K.TYPE, text=text),
        Action(kind=K.PRESS, key="enter"),
        Action(kind=K.TERMINATE, status="success"),
    ):
        after = env.step(action)
        steps.append(StepView.observed(action, obs, after))
        obs = after
    trace = RouteStepCheck(APPS).follow(TASK, steps)
    verdict = RouteGoalCheck().judge(trace, steps)
    assert verdict.success is env.verify().success is (text == "炸酱面 house"), verdict
    assert trace.verdicts[0].label == "GOOD"  # opening the app is progress, on any backend
