"""The `gym` suite on a gymnasium env of our own (tests/support/gym_shapes.py): its instruction per
seed, its frame and element tree as the observation, canonical actions in MiniWoB++'s gymnasium
convention, and its reward and termination as the outcome."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.suites import get_suite, resolve, split_ref, task_query
from rollout.suites.gym import GymEnv
from trajforge.actions import Action, ActionKind, Screen
from trajforge.domain import Observation
from trajforge.errors import ConfigError

SHAPES = "tests.support.gym_shapes:Shapes-v0"


def _tap(obs: Observation, text: str) -> Action:
    element = next(e for e in obs.elements or [] if e["text"] == text or e["kind"] == text)
    x1, y1, x2, y2 = element["bounds"]
    return Action(
        kind=ActionKind.CLICK, point=Screen(obs.width, obs.height).from_px((x1 + x2) // 2, (y1 + y2) // 2)
    )


def _play(app: str, seed: int) -> tuple[GymEnv, str, Observation]:
    name, suite, task = resolve(app)
    env = suite.environment(None)
    assert isinstance(env, GymEnv)
    instruction, params = env.describe(task, seed)
    return env, instruction, env.reset(task_query(name, seed, instruction, params))


def test_a_registered_env_runs_by_its_id_with_colons_in_it() -> None:
    assert split_ref(f"gym:{SHAPES}") == ("gym", SHAPES)
    assert split_ref("a/b.yaml:task") == ("a/b.yaml", "task")
    env, instruction, obs = _play(f"gym:{SHAPES}", 3)
    try:
        color = instruction.removeprefix("Click the ").removesuffix(" square.")
        assert (obs.width, obs.height) == (160, 160) and obs.meta["backend"] == "gym" and not obs.done
        assert sorted(e["text"] for e in obs.elements or []) == ["blue", "green", "red"]
        assert not env.verify().success  # not ended yet
        done = env.step(_tap(obs, color))
        assert done.done and done.meta["reward"] == 1.0
        assert env.verify().success
        assert env.step(_tap(obs, color)) == done  # the env ended the episode: nothing changes
    finally:
        env.close()


def test_a_suite_file_gives_kwargs_and_keyboard_actions_reach_the_env(tmp_path: Path) -> None:
    suite = tmp_path / "shapes.yaml"
    suite.write_text(f"name: shapes\ngym:\n  type: {{id: '{SHAPES}', kwargs: {{mode: type}}}}\n")
    env, instruction, obs = _play(f"{suite}:type", 5)
    try:
        word = instruction.split()[1]
        assert instruction == f"Type {word} into the box and press Enter."
        typed = env.step(_tap(obs, "input").model_copy(update={"kind": ActionKind.TYPE, "text": word}))
        assert [e["text"] for e in typed.elements or []] == [word] and not typed.done
        assert env.step(Action(kind=ActionKind.PRESS, key="back")) == typed  # the env has no back key
        end = env.step(Action(kind=ActionKind.PRESS, key="enter"))
        assert end.done and env.verify().success
        env.reset(task_query("shapes:type", 6, *env.describe("type", 6)))
        env.step(Action(kind=ActionKind.PRESS, key="enter"))  # nothing typed
        result = env.verify()
        assert not result.success and result.failed == "environment_reward" and result.reward == -1
    finally:
        env.close()


def test_wrong_gym_references_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no gymnasium env 'Nowhere-v0'.*MODULE:ID"):
        resolve("gym:Nowhere-v0")
    with pytest.raises(ConfigError, match=r"no module 'no_such_pkg'; install its package"):
        resolve("gym:no_such_pkg.envs:Shapes-v0")
    suite = tmp_path / "shapes.yaml"
    suite.write_text(f"name: shapes\ngym:\n  click: {{id: '{SHAPES}', kwarg: {{}}}}\n")
    with pytest.raises(ConfigError, match=r"gym suite .*shapes.yaml: gym.click.kwarg: Extra inputs"):
        get_suite(str(suite))
    suite.write_text(f"name: shapes\ngym:\n  click: {{id: '{SHAPES}'}}\n")
    with pytest.raises(ConfigError, match=r"suite 'shapes' has no task 'drag'; its tasks: click"):
        resolve(f"{suite}:drag")


def test_an_env_that_is_not_a_gui_is_one_clear_error() -> None:
    """CartPole has neither an instruction nor a frame: the first thing missing is named, with its fix."""
    import gymnasium

    gymnasium.register("Pole-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    with pytest.raises(
        ConfigError, match=r"'Pole-v0': its reset gave no instruction; put it under .*utterance"
    ):
        _play("gym:Pole-v0", 1)
