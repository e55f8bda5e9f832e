"""A `gym` suite: any gymnasium environment whose observation holds an RGB frame, driven with pointer
and keyboard actions; its reward and termination decide the outcome.

`apps: [gym:ENV_ID]` runs a registered env with its default kwargs (`ENV_ID` in gymnasium's own
form, `my_pkg.envs:Shapes-v0` importing the module that registers it). A suite file gives the
kwargs, and names each configured env as a task (docs/environments.md):

    name: shapes
    gym:
      click-red: {id: "my_pkg.envs:Shapes-v0", kwargs: {target: red}}

The actions are MiniWoB++'s gymnasium convention (Farama's `miniwob` package), the one gymnasium
interface for GUI agents: a `Dict` action with `action_type` indexing the env's
`unwrapped.action_space_config.action_types` (`CLICK_COORDS`, `TYPE_TEXT`, `PRESS_KEY`,
`SCROLL_UP_COORDS`, ...), `coords` in the frame's pixels (or bins, with `coord_bins`), `text`,
and `key` indexing `allowed_keys`. The observation is the frame itself, or a dict holding it under
`screenshot`, with the instruction under `utterance` (else `info["instruction"]`) and, where the env
has one, its element tree under `dom_elements` (MiniWoB's form). Farama's own MiniWoB envs
(`gym:miniwob/click-test-2-v1`) speak this; so can anyone's.

A task's instruction is the env's own for a seed: `reset(seed=seed)`. The episode ends when the env
terminates or truncates it; the outcome is a success when the reward summed over the episode is
positive. Every env call runs on the environment's own thread (an env may hold thread-bound state).
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollout.suites.base import reward_verdict, seed_of
from storage.keys import sha256_hex
from storage.objectstore import ObjectStore, put_blob
from trajforge.actions import Action, ActionKind, Screen
from trajforge.domain import Observation, Query
from trajforge.errors import ConfigError
from trajforge.world.verify import VerifierResult

T = TypeVar("T")
_FIX = (
    "a gym suite needs a gymnasium env whose observation is an RGB frame (or a dict with it under "
    "`screenshot`) and whose `unwrapped.action_space_config` lists its `action_types` (MiniWoB++'s "
    "gymnasium convention, docs/environments.md)"
)
# The kinds of an element in MiniWoB's `dom_elements` (`tag`: the upper-cased tag, `INPUT_type`).
_INPUT_TAGS = ("INPUT_text", "INPUT_password", "INPUT_email", "INPUT_number", "INPUT_search", "TEXTAREA")
_TOGGLE_TAGS = ("INPUT_checkbox", "INPUT_radio")
_BUTTON_TAGS = ("BUTTON", "A", "SELECT", "OPTION", "INPUT_button", "INPUT_submit", "INPUT_reset")


class GymTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="The gymnasium env id; `module:Id-v0` imports the module first.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments to gym.make.")


class GymSuite(BaseModel):
    """Gymnasium envs as tasks: `gym` (any registered id, default kwargs) or a suite file's envs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("gym", pattern=r"^[a-z][a-z0-9_-]*$")
    gym: dict[str, GymTask] | None = Field(None, description="Task name -> env id and kwargs; none: any id.")

    @classmethod
    def from_data(cls, path: Path, data: Any) -> GymSuite:
        """The suite a suite file declares (`gym:` at its top)."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ConfigError(
                f"gym suite {path}: {where}: {err['msg']}; fix it (docs/environments.md)"
            ) from exc

    def task(self, name: str) -> GymTask:
        if self.gym is None:
            return GymTask(id=name)
        if name not in self.gym:
            raise ConfigError(
                f"apps: suite {self.name!r} has no task {name!r}; its tasks: {', '.join(self.gym)}"
            )
        return self.gym[name]

    def check_task(self, task: str) -> None:
        env_id = self.task(task).id
        module, _, registered = env_id.rpartition(":")
        try:
            import gymnasium

            if module:
                importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise ConfigError(
                f"apps: gym env {env_id!r}: no module {exc.name!r}; install its package"
            ) from exc
        try:
            gymnasium.spec(registered)
        except gymnasium.error.Error as exc:
            raise ConfigError(
                f"apps: no gymnasium env {env_id!r} ({exc}); install the package that registers it, or "
                "write it as MODULE:ID so the module that registers it is imported"
            ) from exc

    def environment(self, store: ObjectStore | None) -> GymEnv:
        return GymEnv(self, store)


class GymEnv:
    """One device slot's gymnasium env: made per task, reset per episode, on a thread of its own."""

    def __init__(self, suite: GymSuite, store: ObjectStore | None) -> None:
        self.suite, self.store = suite, store
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gym")
        self._env: Any = None
        self._task: str | None = None
        self._frame: tuple[int, int] = (1, 1)
        self._done, self._reward = False, 0.0
        self._last: Observation | None = None

    def _call(self, fn: Callable[[], T]) -> T:
        return self._thread.submit(fn).result()

    def describe(self, task: str, seed: int) -> tuple[str, dict[str, str]]:
        return self._call(lambda: self._instruction(*self._reset(task, seed)))

    def reset(self, task: Query) -> Observation:
        name, seed = seed_of(task)
        return self._call(lambda: self._observe(*self._reset(name, seed)))

    def step(self, action: Action) -> Observation:
        return self._call(lambda: self._step(action))

    def verify(self) -> VerifierResult:
        return reward_verdict(self._done, self._reward)

    def close(self) -> None:
        try:
            if self._env is not None:
                self._call(self._env.close)
        finally:
            self._thread.shutdown(wait=True)

    # --- on the env's thread -------------------------------------------------------------------
    def _reset(self, task: str, seed: int) -> tuple[Any, dict[str, Any]]:
        if task != self._task:
            import gymnasium

            if self._env is not None:
                self._env.close()
            spec = self.suite.task(task)
            self._env, self._task = gymnasium.make(spec.id, **spec.kwargs), task
        self._done, self._reward = False, 0.0
        obs, info = self._env.reset(seed=seed)
        return obs, info

    def _instruction(self, obs: Any, info: dict[str, Any]) -> tuple[str, dict[str, str]]:
        said = obs.get("utterance") if isinstance(obs, dict) else None
        said = said or info.get("instruction") or info.get("utterance")
        if not isinstance(said, str) or not said:
            raise ConfigError(
                f"gym task {self._task!r}: its reset gave no instruction; put it under the observation's "
                "`utterance` or `info['instruction']`"
            )
        return said, {}

    def _step(self, action: Action) -> Observation:
        if self._done and self._last is not None:  # the env ended the episode; later actions do nothing
            return self._last
        obs, info = None, {}
        for gym_action in to_gym_actions(action, self._env, Screen(*self._frame)):
            obs, reward, terminated, truncated, info = self._env.step(gym_action)
            self._reward += float(reward)
            if terminated or truncated:
                self._done = True
                break
        if obs is None:  # an action this env has none of (back, home): nothing happened
            assert self._last is not None, "reset() the environment before stepping it"
            return self._last
        return self._observe(obs, info)

    def _observe(self, obs: Any, info: dict[str, Any]) -> Observation:
        frame = obs.get("screenshot") if isinstance(obs, dict) else obs
        shape: tuple[int, ...] = tuple(getattr(frame, "shape", ()))
        if len(shape) != 3 or shape[2] not in (3, 4):
            raise ConfigError(f"gym task {self._task!r}: the observation holds no RGB frame; {_FIX}")
        png = _png(frame)
        height, width = int(shape[0]), int(shape[1])
        self._frame = (width, height)
        digest = put_blob(self.store, png)[0] if self.store is not None else sha256_hex(png)
        meta: dict[str, Any] = {"backend": "gym", "suite": self.suite.name}
        last = self._last = Observation(
            screenshot=digest,
            width=width,
            height=height,
            elements=_elements(obs.get("dom_elements") if isinstance(obs, dict) else None),
            meta=meta | ({"reward": self._reward} if self._done else {}),
            done=self._done,
        )
        return last


def _png(frame: Any) -> bytes:
    import numpy as np
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.asarray(frame, dtype=np.uint8)).save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _elements(dom: Any) -> list[dict[str, Any]]:
    """MiniWoB's `dom_elements` as trajforge elements: its leaves and controls, in frame pixels."""
    out: list[dict[str, Any]] = []
    for el in dom or ():
        tag, text = str(el.get("tag", "")), str(el.get("text") or "").strip()
        value = str(el.get("value") or "")
        flags = [int(f) for f in el.get("flags", (0, 0, 0, 1))]
        if tag in _INPUT_TAGS:
            kind, text = "input", value or text
        elif tag in _TOGGLE_TAGS:
            kind = "toggle"
        elif tag in _BUTTON_TAGS and text:
            kind = "button"
        elif text and flags[3]:
            kind = "text"
        else:
            continue
        left, top = float(_scalar(el.get("left"))), float(_scalar(el.get("top")))
        right, bottom = left + float(_scalar(el.get("width"))), top + float(_scalar(el.get("height")))
        if right <= left or bottom <= top:
            continue
        out.append(
            {
                "id": str(el.get("id") or el.get("ref") or ""),
                "kind": kind,
                "tag": tag.lower(),
                "text": text,
                "checked": value.lower() == "true" if kind == "toggle" else None,
                "focused": bool(flags[0]),
                "bounds": [max(0, round(v)) for v in (left, top, right, bottom)],
            }
        )
    return out


def _scalar(value: Any) -> float:
    return float(getattr(value, "flat", [value])[0]) if value is not None else 0.0


def to_gym_actions(action: Action, env: Any, screen: Screen) -> list[dict[str, Any]]:
    """The env's actions for a canonical one, in MiniWoB++'s gymnasium convention; [] where the env has
    no such action (back, home and app launches on a single-window env)."""
    config = getattr(env.unwrapped, "action_space_config", None)
    if config is None:
        raise ConfigError(f"gym env {env.spec.id if env.spec else env!r} has no action_space_config; {_FIX}")
    types = [str(getattr(t, "value", t)) for t in config.action_types]
    keys = [str(k) for k in getattr(config, "allowed_keys", ())]
    base = _defaults(env.action_space)

    def act(kind: str, point: tuple[int, int] | None = None, **extra: Any) -> list[dict[str, Any]]:
        if kind not in types:
            return []
        out = {**base, "action_type": types.index(kind), **extra}
        if point is not None:
            out["coords"] = _coords(screen.to_px(point), screen, getattr(config, "coord_bins", None))
        return [out]

    kind = action.kind
    if kind == ActionKind.CLICK:
        return act("CLICK_COORDS", action.point)
    if kind == ActionKind.LONG_PRESS:
        return act("MOUSEDOWN_COORDS", action.point) + act("MOUSEUP_COORDS", action.point)
    if kind == ActionKind.TYPE:
        focus = act("CLICK_COORDS", action.point) if action.point is not None else []
        return focus + act("TYPE_TEXT", text=action.text or "")
    if kind == ActionKind.SWIPE and action.point is not None:  # a finger up shows what is further down
        wheel = "SCROLL_DOWN_COORDS" if action.swipe_direction() == "up" else "SCROLL_UP_COORDS"
        return act(wheel, action.point)
    if kind == ActionKind.PRESS and action.key == "enter" and "<Enter>" in keys:
        return act("PRESS_KEY", key=keys.index("<Enter>"))
    if kind == ActionKind.WAIT:
        return act("NONE")
    return []


def _coords(px: tuple[int, int], screen: Screen, bins: tuple[int, int] | None) -> Any:
    import numpy as np

    if bins:
        sizes = (screen.width, screen.height)
        return np.array([min(b - 1, int(p * b / s)) for p, b, s in zip(px, bins, sizes, strict=True)])
    return np.array(px, dtype=np.float32)


def _defaults(space: Any) -> dict[str, Any]:
    """A value for every key of a Dict action space (a MiniWoB env reads only the keys its type uses)."""
    import numpy as np
    from gymnasium import spaces

    out: dict[str, Any] = {}
    for key, sub in getattr(space, "spaces", {}).items():
        if isinstance(sub, spaces.Text):
            out[key] = ""
        elif isinstance(sub, spaces.Discrete):
            out[key] = int(sub.start)
        else:
            out[key] = np.zeros(sub.shape, dtype=sub.dtype)
    return out
