"""One contract for every environment backend: the same tests run on `sim` and on `web` (Chromium)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from querygen.pipeline import generate_queries
from rollout.env import Environment
from rollout.policies import NoisyOracle
from rollout.sim.env import SimEnv
from storage.keys import blob_key
from storage.objectstore import LocalObjectStore
from tests.conftest import service_missing
from trajforge.actions import Action, ActionKind, Screen, get_codec
from trajforge.appspec import builtin_app_names, load_app
from trajforge.domain import Observation, Query

APPS = [load_app(n) for n in builtin_app_names()]
K = ActionKind


BACKENDS = ["sim", "android", pytest.param("web", marks=[pytest.mark.browser, pytest.mark.slow])]


@pytest.fixture(scope="module", params=BACKENDS)
def env_factory(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    if request.param == "android":  # against the fake adb: no emulator runs on these machines
        from rollout.android.env import AdbEnv
        from tests.support.fake_adb import SERIAL, FakeAdb, package_of

        def android(store):
            fake = FakeAdb(APPS, tmp_path_factory.mktemp("adb"))
            return AdbEnv(SERIAL, {a.name: package_of(a.name) for a in APPS}, adb=str(fake.path), store=store)

        return android
    if request.param == "web":
        from rollout.web.env import WebEnv, chromium_available

        if not chromium_available():
            service_missing(
                "Chromium or Playwright missing (apt-get install chromium; pip install playwright)"
            )
        return lambda store: WebEnv(APPS, store=store)
    return lambda store: SimEnv(APPS, store=store)


@pytest.fixture
def env(env_factory, tmp_path: Path) -> Iterator[Environment]:
    environment = env_factory(LocalObjectStore(tmp_path / "objects"))
    yield environment
    environment.close()


def _task(app: str, seed: int = 7) -> Query:
    return generate_queries(load_app(app), 1, seed=seed).kept[0]


def _tap(env: Environment, obs: Observation, element_id: str) -> Observation:
    element = next(e for e in obs.elements or [] if e["id"] == element_id)
    x1, y1, x2, y2 = element["bounds"]
    point = Screen(obs.width, obs.height).from_px((x1 + x2) / 2, (y1 + y2) / 2)
    return env.step(Action(kind=K.CLICK, point=point))


def _run_oracle(env: Environment, task: Query, max_steps: int = 40) -> Observation:
    policy = NoisyOracle()
    policy.start(task, seed="contract")
    obs = env.reset(task)
    for _ in range(max_steps):
        out = asyncio.run(policy.act(obs))
        action = get_codec(out.format).parse(out.text, Screen(obs.width, obs.height))
        obs = env.step(action)
        if action.kind == K.TERMINATE:
            break
    return obs


def test_open_app_action(env: Environment) -> None:
    env.reset(_task("settings"))
    obs = env.step(Action(kind=K.OPEN_APP, text="settings"))
    assert any(e["id"] == "network" for e in obs.elements or [])


def test_reset_shows_the_launcher(env: Environment) -> None:
    obs = env.reset(_task("settings"))
    ids = {e["id"] for e in obs.elements or []}
    assert {"app:takeout", "app:settings", "app:shopping", "app:ridehail"} <= ids
    assert obs.width > 1000 and obs.height > 2000 and len(obs.screenshot) == 64


@pytest.mark.parametrize("app", ["takeout", "settings", "shopping", "ridehail"])
def test_ground_truth_path_passes_the_verifier(env: Environment, app: str) -> None:
    task = _task(app)
    _run_oracle(env, task)
    result = env.verify()
    assert result.success, result


def test_wrong_end_state_fails_with_the_constraint(env: Environment) -> None:
    task = _task("takeout")
    obs = env.reset(task)
    obs = _tap(env, obs, "app:takeout")
    env.step(Action(kind=K.PRESS, key="home"))
    result = env.verify()
    assert not result.success and result.failed == "app"


def test_typing_back_home_and_scrolling(env: Environment, tmp_path: Path) -> None:
    obs = env.reset(_task("takeout"))
    obs = _tap(env, obs, "app:takeout")
    obs = _tap(env, obs, "search_box")
    obs = env.step(Action(kind=K.TYPE, text="sushi"))
    obs = env.step(Action(kind=K.PRESS, key="enter"))
    assert any(e.get("kind") == "list_item" for e in obs.elements or [])
    assert not any(e["id"] == "search_box" for e in obs.elements or [])  # now on the results screen
    obs = env.step(Action(kind=K.PRESS, key="back"))
    assert any(e["id"] == "search_box" for e in obs.elements or [])
    values = {e.get("value") for e in obs.elements or []}
    assert "老北京炸酱面" not in values
    for _ in range(4):
        obs = env.step(Action(kind=K.SWIPE, point=(500, 700), direction="up"))
    assert "老北京炸酱面" in {e.get("value") for e in obs.elements or []}
    obs = env.step(Action(kind=K.PRESS, key="home"))
    assert any(e["id"] == "app:takeout" for e in obs.elements or [])
    store = LocalObjectStore(tmp_path / "objects")
    assert store.exists(blob_key(obs.screenshot))


def test_toggles_are_reported_in_the_element_tree(env: Environment) -> None:
    obs = env.reset(_task("settings"))
    obs = _tap(env, obs, "app:settings")
    obs = _tap(env, obs, "network")
    wifi = next(e for e in obs.elements or [] if e["id"] == "wifi")
    assert wifi["checked"] is False
    obs = _tap(env, obs, "wifi")
    assert next(e for e in obs.elements or [] if e["id"] == "wifi")["checked"] is True


@pytest.mark.browser
@pytest.mark.slow
def test_a_browser_failure_is_a_device_crash_the_runner_retries(tmp_path: Path) -> None:
    from rollout.web.env import WebEnv, chromium_available

    if not chromium_available():
        service_missing("Chromium or Playwright missing (apt-get install chromium; pip install playwright)")
    from playwright.sync_api import Error as BrowserError

    from trajforge.errors import DeviceCrashed

    env = WebEnv(APPS, store=LocalObjectStore(tmp_path / "objects"))

    def fail() -> None:
        raise BrowserError("Page.screenshot: Protocol error (Page.captureScreenshot): Unable to capture")

    with pytest.raises(DeviceCrashed, match=r"Chromium: Page.screenshot"):
        env._call(fail)
    env.close()
