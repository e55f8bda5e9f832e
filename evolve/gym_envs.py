"""trajforge's apps and suite tasks as gymnasium environments, for other trainers.

    import gymnasium, evolve.gym_envs  # registers trajforge/APP-v0 for every built-in app
    env = gymnasium.make("trajforge/settings-v0")          # or "trajforge/Task-v0", task="desktop:calc-add"
    obs, info = env.reset(seed=3)                          # info["instruction"]: the task in words

`gymnasium.make("evolve.gym_envs:trajforge/settings-v0")` imports this module itself. A task is a
built-in app, an app spec file or a suite task (`desktop:calc-add`, `miniwob:click-button`,
`office.yaml:greet`); a seed picks its query (an app's sampled from its navigation graph, a suite's
worded by its environment).

The spaces are MiniWoB++'s gymnasium convention (Farama's `miniwob`), the one the `gym` suite
reads, so a trajforge env also runs as `apps: [gym:evolve.gym_envs:trajforge/settings-v0]`:
- observation: the screen as an RGB array (H, W, 3); the instruction is `info["instruction"]`;
- action: a `Dict` with `action_type` indexing `unwrapped.action_space_config.action_types`
  (`CLICK_COORDS`, `LONG_PRESS_COORDS`, `SCROLL_UP_COORDS`, `SCROLL_DOWN_COORDS`, `TYPE_TEXT`,
  `PRESS_KEY`, `BACK`, `HOME`, `TERMINATE`, `NONE`), `coords` in the frame's pixels, `text`, and
  `key` indexing `allowed_keys`;
- reward: the task's verifier, 1.0 on the step that reaches a verified state (the episode then
  terminates), else 0.0; `TERMINATE` ends it, judged the same way; `max_steps` truncates it.
"""

from __future__ import annotations

import io
import string
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces

from rollout.env import Environment
from rollout.suites import is_suite_ref, split_ref, task_query
from storage.keys import blob_key
from storage.objectstore import LocalObjectStore
from trajforge.actions import Action, ActionKind, Screen
from trajforge.appspec import builtin_app_names
from trajforge.domain import Observation, Query

ACTION_TYPES = (
    "NONE",
    "CLICK_COORDS",
    "LONG_PRESS_COORDS",
    "SCROLL_UP_COORDS",
    "SCROLL_DOWN_COORDS",
    "TYPE_TEXT",
    "PRESS_KEY",
    "BACK",
    "HOME",
    "TERMINATE",
)
ALLOWED_KEYS = ("<Enter>",)
TEXT_CHARSET = string.ascii_letters + string.digits + string.punctuation + " "


@dataclass(frozen=True)
class ActionSpaceConfig:
    """What `action_type` and `key` index (MiniWoB++'s `ActionSpaceConfig`, its fields read by name)."""

    action_types: tuple[str, ...] = ACTION_TYPES
    allowed_keys: tuple[str, ...] = ALLOWED_KEYS
    coord_bins: tuple[int, int] | None = None
    text_max_len: int = 256


class TrajforgeEnv(gymnasium.Env[np.ndarray, dict[str, Any]]):
    """One task (an app, a spec file or a suite task) as a gymnasium env; see the module docstring."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 2}

    def __init__(self, task: str = "settings", max_steps: int = 30, render_mode: str | None = None) -> None:
        self.task, self.max_steps, self.render_mode = task, max_steps, render_mode
        self._folder = tempfile.TemporaryDirectory(prefix="trajforge-gym-")
        self._store = LocalObjectStore(Path(self._folder.name))  # frames, read back as arrays
        self._env, self._describe, screen = _environment(task, self._store)
        self.action_space_config = ActionSpaceConfig()
        w, h = screen.width, screen.height
        self.observation_space = spaces.Box(0, 255, (h, w, 3), np.uint8)
        self.action_space = spaces.Dict(
            {
                "action_type": spaces.Discrete(len(ACTION_TYPES)),
                "coords": spaces.Box(np.zeros(2, np.float32), np.array([w - 1, h - 1], np.float32)),
                "text": spaces.Text(self.action_space_config.text_max_len, charset=TEXT_CHARSET),
                "key": spaces.Discrete(len(ALLOWED_KEYS)),
            }
        )
        self._screen = screen
        self._frame: np.ndarray | None = None
        self.query: Query | None = None  # the episode's task
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        query = self._describe(int(self.np_random.integers(0, 2**31 - 1)) if seed is None else seed)
        self.query, self._steps = query, 0
        return self._observe(self._env.reset(query)), {"instruction": query.instruction, "uid": query.uid}

    def step(self, action: dict[str, Any]) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._steps += 1
        act = to_action(action, self._screen)
        obs = self._env.step(act) if act is not None and act.kind != ActionKind.TERMINATE else None
        frame = self._observe(obs) if obs is not None else self._frame
        assert frame is not None
        frame = frame if obs is not None else frame.copy()  # a new array on every call
        verdict = self._env.verify()
        ended = act is not None and act.kind == ActionKind.TERMINATE
        terminated = verdict.success or ended or bool(obs is not None and obs.done)
        truncated = not terminated and self._steps >= self.max_steps
        info = {"verifier": verdict.to_json()}
        return frame, float(verdict.success), terminated, truncated, info

    def render(self) -> np.ndarray | None:
        return self._frame if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        self._env.close()
        self._folder.cleanup()

    def _observe(self, obs: Observation) -> np.ndarray:
        from PIL import Image

        png = self._store.get(blob_key(obs.screenshot))
        self._frame = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.uint8)
        return self._frame


def to_action(action: dict[str, Any], screen: Screen) -> Action | None:
    """A gymnasium action as trajforge's (None: `NONE`); coords are the frame's pixels."""
    kind = ACTION_TYPES[int(action["action_type"])]
    x, y = (float(v) for v in np.asarray(action.get("coords", (0, 0)), dtype=np.float64)[:2])
    point = screen.from_px(min(max(x, 0), screen.width - 1), min(max(y, 0), screen.height - 1))
    if kind == "CLICK_COORDS":
        return Action(kind=ActionKind.CLICK, point=point)
    if kind == "LONG_PRESS_COORDS":
        return Action(kind=ActionKind.LONG_PRESS, point=point)
    if kind in ("SCROLL_UP_COORDS", "SCROLL_DOWN_COORDS"):  # the wheel's sense: a finger moves the other way
        return Action(kind=ActionKind.SWIPE, point=point, direction="up" if "DOWN" in kind else "down")
    if kind == "TYPE_TEXT":
        return Action(kind=ActionKind.TYPE, text=str(action.get("text", "")))
    if kind == "PRESS_KEY":
        return Action(kind=ActionKind.PRESS, key="enter")
    if kind in ("BACK", "HOME"):
        return Action(kind=ActionKind.PRESS, key=kind.lower())
    if kind == "TERMINATE":
        return Action(kind=ActionKind.TERMINATE, status="success")
    return None


def _environment(task: str, store: LocalObjectStore) -> tuple[Environment, Any, Screen]:
    """The environment of `task`, the query of a seed, and the screen size."""
    if is_suite_ref(task):
        from evolve.spine import run_suites

        suite = run_suites([task])[task]
        env: Any = suite.environment(store)
        name = split_ref(task)[1]

        def suite_query(seed: int) -> Query:
            return task_query(task, seed, *env.describe(name, seed))

        screen = getattr(env, "screen", None) or Screen(*getattr(suite, "viewport", (1024, 768)))
        return env, suite_query, screen
    from querygen.pipeline import generate_queries
    from rollout.sim.env import SimEnv
    from trajforge.appspec import load_app

    spec = load_app(task)
    sim = SimEnv([spec], store=store)

    def app_query(seed: int) -> Query:
        return generate_queries(spec, 1, seed=seed).kept[0]

    return sim, app_query, sim.device.size


def register_envs() -> None:
    """`trajforge/APP-v0` for every built-in app, and `trajforge/Task-v0` for any task (`task=`)."""
    entry = "evolve.gym_envs:TrajforgeEnv"
    for name in builtin_app_names():
        if f"trajforge/{name}-v0" not in gymnasium.registry:
            gymnasium.register(f"trajforge/{name}-v0", entry_point=entry, kwargs={"task": name})
    if "trajforge/Task-v0" not in gymnasium.registry:
        gymnasium.register("trajforge/Task-v0", entry_point=entry)


register_envs()
