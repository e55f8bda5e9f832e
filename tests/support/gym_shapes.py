"""A gymnasium env of our own, for the `gym` suite: an RGB frame, pointer and keyboard actions in
MiniWoB++'s gymnasium convention (Farama's `miniwob.action.ActionSpaceConfig`), its own instruction
per seed and its own reward. `mode: click` asks for one of three coloured squares; `mode: type`
asks for a word typed into a box, then Enter. With `tree: false` the env shows only its frame.

Importing this module registers `Shapes-v0`, so `gym:tests.support.gym_shapes:Shapes-v0` names it."""

from __future__ import annotations

import random
import string
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from miniwob.action import ActionSpaceConfig, ActionTypes
from PIL import Image, ImageDraw

COLORS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220)}
WORDS = ("apple", "river", "stone", "cloud")
SQUARE = 36
BOX = (20, 60, 140, 84)  # the text box of `type`


class ShapesEnv(gymnasium.Env[dict[str, Any], dict[str, Any]]):
    def __init__(self, mode: str = "click", size: int = 160, tree: bool = True, max_steps: int = 8) -> None:
        if mode not in ("click", "type"):
            raise ValueError(f"mode {mode!r}: click or type")
        self.mode, self.size, self.tree, self.max_steps = mode, size, tree, max_steps
        self.action_space_config = ActionSpaceConfig(
            action_types=[
                ActionTypes.NONE,
                ActionTypes.CLICK_COORDS,
                ActionTypes.TYPE_TEXT,
                ActionTypes.PRESS_KEY,
            ],
            screen_width=size,
            screen_height=size,
        )
        self.action_space = self.action_space_config.get_action_space()
        observed: dict[str, spaces.Space[Any]] = {
            "screenshot": spaces.Box(0, 255, (size, size, 3), np.uint8),
            "utterance": spaces.Text(200, charset=string.printable),
        }
        if tree:  # MiniWoB's element form, loosely: its keys, each a text or a box
            boxes = {k: spaces.Box(0, size, (1,)) for k in ("left", "top", "width", "height")}
            texts = {
                k: spaces.Text(200, min_length=0, charset=string.printable)
                for k in ("tag", "text", "value", "id")
            }
            element = {"ref": spaces.Discrete(100), "flags": spaces.MultiBinary(4), **boxes, **texts}
            observed["dom_elements"] = spaces.Sequence(spaces.Dict(element))
        self.observation_space = spaces.Dict(observed)
        self._squares: dict[str, tuple[int, int]] = {}
        self._target, self._typed, self._focused, self._steps = "", "", False, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        rng = random.Random(seed)
        self._steps, self._typed, self._focused = 0, "", False
        if self.mode == "click":
            cells = rng.sample([(x, y) for x in (10, 62, 114) for y in (40, 110)], 3)
            self._squares = dict(zip(COLORS, cells, strict=True))
            self._target = rng.choice(list(COLORS))
            said = f"Click the {self._target} square."
        else:
            self._target = rng.choice(WORDS)
            said = f"Type {self._target} into the box and press Enter."
        self._said = said
        return self._obs(), {}

    def step(self, action: dict[str, Any]) -> tuple[Any, float, bool, bool, dict]:
        kind = self.action_space_config.action_types[int(action["action_type"])]
        self._steps += 1
        reward, done = 0.0, False
        if kind == ActionTypes.CLICK_COORDS:
            x, y = (float(v) for v in action["coords"])
            if self.mode == "click":
                hit = [
                    c
                    for c, (cx, cy) in self._squares.items()
                    if cx <= x < cx + SQUARE and cy <= y < cy + SQUARE
                ]
                if hit:
                    reward, done = (1.0 if hit[0] == self._target else -1.0), True
            else:
                self._focused = BOX[0] <= x < BOX[2] and BOX[1] <= y < BOX[3]
        elif kind == ActionTypes.TYPE_TEXT and self._focused:
            self._typed += str(action["text"])
        elif kind == ActionTypes.PRESS_KEY and self.mode == "type":
            reward, done = (1.0 if self._typed.strip().lower() == self._target else -1.0), True
        return self._obs(), reward, done, self._steps >= self.max_steps and not done, {}

    def _obs(self) -> dict[str, Any]:
        image = Image.new("RGB", (self.size, self.size), (250, 250, 250))
        draw = ImageDraw.Draw(image)
        draw.text((6, 6), self._said, fill=(0, 0, 0))
        elements: list[dict[str, Any]] = []
        if self.mode == "click":
            for ref, (color, (x, y)) in enumerate(self._squares.items(), start=1):
                draw.rectangle((x, y, x + SQUARE, y + SQUARE), fill=COLORS[color])
                elements.append(_element(ref, "BUTTON", color, (x, y, SQUARE, SQUARE)))
        else:
            draw.rectangle(BOX, outline=(0, 0, 0), fill=(255, 255, 255))
            draw.text((BOX[0] + 4, BOX[1] + 6), self._typed, fill=(0, 0, 0))
            box = (BOX[0], BOX[1], BOX[2] - BOX[0], BOX[3] - BOX[1])
            elements.append(_element(1, "INPUT_text", "", box, self._typed, self._focused))
        obs: dict[str, Any] = {"screenshot": np.asarray(image, dtype=np.uint8), "utterance": self._said}
        if self.tree:
            obs["dom_elements"] = tuple(elements)
        return obs


def _element(
    ref: int, tag: str, text: str, box: tuple[int, int, int, int], value: str = "", focused: bool = False
) -> dict[str, Any]:
    """One element in MiniWoB's `dom_elements` form."""
    left, top, width, height = box
    return {
        "ref": ref,
        "tag": tag,
        "text": text,
        "value": value,
        "id": f"{tag.lower()}-{ref}",
        "left": np.array([left], dtype=np.float32),
        "top": np.array([top], dtype=np.float32),
        "width": np.array([width], dtype=np.float32),
        "height": np.array([height], dtype=np.float32),
        "flags": np.array([focused, 0, 0, 1], dtype=np.int8),
    }


gymnasium.register("Shapes-v0", entry_point=f"{__name__}:ShapesEnv")
