"""The `browsergym` suite on BrowserGym itself (its own venv, `make browsergym-venv`) and MiniWoB++'s
pages: tasks by their BrowserGym id, solved by actions aimed at the accessibility tree's elements
(clicks on a bid, a fill, a select), rewarded by BrowserGym's own `validate`; a server that dies is a
crashed device, and the next episode starts a fresh one."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout.suites import get_suite, task_query
from rollout.suites.browsergym import VENV, BrowserGymSuite
from rollout.suites.browsergym.env import BrowserGymEnv
from tests.conftest import service_missing
from trajforge.actions import Action, ActionKind
from trajforge.domain import Observation
from trajforge.errors import ConfigError, DeviceCrashed

K = ActionKind
pytestmark = [pytest.mark.slow, pytest.mark.browser]


def browsergym_python() -> Path:
    """BrowserGym's venv as CI installs it (TRAJFORGE_TEST_BROWSERGYM_PYTHON), else make's."""
    from rollout.web.browser import chromium_available

    python = Path(os.environ.get("TRAJFORGE_TEST_BROWSERGYM_PYTHON") or VENV / "bin" / "python")
    if not python.is_file() or not chromium_available():
        service_missing(f"BrowserGym's venv {python} or Chromium is missing (make browsergym-venv)")
    return python


@pytest.fixture
def suite(monkeypatch: pytest.MonkeyPatch) -> BrowserGymSuite:
    monkeypatch.setenv("TRAJFORGE_BROWSERGYM_PYTHON", str(browsergym_python()))
    found = get_suite("browsergym")
    assert isinstance(found, BrowserGymSuite)
    return found


@pytest.fixture
def env(suite: BrowserGymSuite) -> Iterator[BrowserGymEnv]:
    device = suite.environment(None)
    yield device
    device.close()


def start(env: BrowserGymEnv, task: str, seed: int) -> tuple[str, Observation]:
    instruction, params = env.describe(task, seed)
    return instruction, env.reset(task_query(f"browsergym:{task}", seed, instruction, params))


def on(env: BrowserGymEnv, obs: Observation, kind: str, text: str | None = None) -> tuple[int, int]:
    """The per-mille centre of the first element of `kind` (showing `text`)."""
    for e in obs.elements or []:
        if e["kind"] == kind and text in (None, e["text"]):
            x1, y1, x2, y2 = e["bounds"]
            return env._screen.from_px((x1 + x2) / 2, (y1 + y2) / 2)
    raise AssertionError(f"no {kind} {text!r}: {obs.elements}")


def test_tasks_are_browsergym_ids_and_a_typo_is_named(suite: BrowserGymSuite) -> None:
    suite.check_task("miniwob.click-test")
    assert sum(t.startswith("miniwob.") for t in suite.tasks) > 100
    with pytest.raises(ConfigError, match=r"no task 'miniwob\.click-tset'.*did you mean miniwob\.click-test"):
        suite.check_task("miniwob.click-tset")


def test_clicks_fills_and_selects_on_bids_are_rewarded_by_browsergym(env: BrowserGymEnv) -> None:
    said, obs = start(env, "miniwob.click-test", 1)
    assert said == "Click the button." and obs.meta["backend"] == "browsergym"
    obs = env.step(Action(kind=K.CLICK, point=on(env, obs, "button", "Click Me!")))
    assert obs.done and obs.meta["action"].startswith('click("') and env.verify().success

    said, obs = start(env, "miniwob.enter-text", 3)
    word = said.split('"')[1]
    obs = env.step(Action(kind=K.TYPE, point=on(env, obs, "input"), text=word))
    assert obs.meta["action"].startswith("fill(") and not obs.done
    assert [e["text"] for e in obs.elements or [] if e["kind"] == "input"] == [word]
    obs = env.step(Action(kind=K.CLICK, point=on(env, obs, "button", "Submit")))
    assert obs.done and env.verify().success

    said, obs = start(env, "miniwob.choose-list", 5)
    name = said.removeprefix("Select ").split(" from the list")[0]
    obs = env.step(Action(kind=K.TYPE, point=on(env, obs, "button"), text=name))
    assert obs.meta["action"].startswith("select_option(")
    obs = env.step(Action(kind=K.CLICK, point=on(env, obs, "button", "Submit")))
    assert obs.done and env.verify().success


def test_a_wrong_answer_is_browsergyms_failure(env: BrowserGymEnv) -> None:
    _, obs = start(env, "miniwob.enter-text", 2)
    assert env.verify().failed == "not_done"
    obs = env.step(Action(kind=K.TYPE, point=on(env, obs, "input"), text="not the word"))
    obs = env.step(Action(kind=K.CLICK, point=on(env, obs, "button", "Submit")))
    verdict = env.verify()
    assert obs.done and not verdict.success and verdict.failed == "environment_reward"


def test_a_server_that_dies_is_a_crashed_device_and_the_next_episode_starts_afresh(
    env: BrowserGymEnv,
) -> None:
    _, obs = start(env, "miniwob.click-test", 4)
    assert env._pipe is not None
    os.killpg(env._pipe._proc.pid, signal.SIGKILL)
    with pytest.raises(DeviceCrashed, match="BrowserGym's server exited"):
        env.step(Action(kind=K.CLICK, point=on(env, obs, "button")))
    _, obs = start(env, "miniwob.click-test", 4)
    obs = env.step(Action(kind=K.CLICK, point=on(env, obs, "button")))
    assert obs.done and env.verify().success
