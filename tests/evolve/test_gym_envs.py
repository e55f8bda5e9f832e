"""trajforge's apps as gymnasium environments (`evolve.gym_envs`): gymnasium's own checker, a random
agent, and the oracle's path driven through the MiniWoB++ convention the `gym` suite speaks."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import evolve.gym_envs  # noqa: F401 (registers trajforge/APP-v0)
from rollout.suites.gym import to_gym_actions
from trajforge.appspec import builtin_app_names
from trajforge.world.model import Move
from trajforge.world.oracle import actions_for


def test_every_built_in_app_is_registered() -> None:
    assert {f"trajforge/{name}-v0" for name in builtin_app_names()} <= set(gymnasium.registry)


def test_a_random_agent_runs_100_steps_and_gymnasium_checks_the_env() -> None:
    env = gymnasium.make("trajforge/settings-v0", max_steps=20)
    check_env(env.unwrapped, skip_render_check=False)
    obs, info = env.reset(seed=3)
    assert obs.shape == (2400, 1080, 3) and obs.dtype == np.uint8 and info["instruction"]
    assert env.reset(seed=3)[1]["instruction"] == info["instruction"]  # a seed is one query
    episodes = 0
    for _ in range(100):
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs) and reward in (0.0, 1.0)
        if terminated or truncated:
            episodes += 1
            env.reset()
    assert episodes >= 4  # truncated at max_steps, or ended
    env.close()


@pytest.mark.parametrize("app", ["settings", "takeout"])
def test_the_oracles_path_in_the_gym_convention_earns_the_reward(app: str) -> None:
    env = gymnasium.make(f"trajforge/{app}-v0")
    inner = env.unwrapped
    env.reset(seed=5)
    query, device = inner.query, inner._env.device
    rewards: list[float] = []
    for action in actions_for(device, query.app, [Move.from_json(m) for m in query.path]):
        for gym_action in to_gym_actions(action, env, inner._screen):
            _, reward, terminated, _, info = env.step(gym_action)
            rewards.append(reward)
    assert rewards[-1] == 1.0 and terminated and info["verifier"]["success"]
    assert sum(rewards) == 1.0  # the verified state is reached once, on the last step
    env.close()
