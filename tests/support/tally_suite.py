"""A suite that is not a web page, registered by a test through the `trajforge.suites` entry point:
a counter drawn with Pillow, its own tasks ("Tap Add until the counter shows N, then tap Done")
and its own reward. It stands in for a user's package (an android_world-style task suite)."""

from __future__ import annotations

import io
import random

from PIL import Image, ImageDraw

from storage.keys import sha256_hex
from storage.objectstore import ObjectStore, put_blob
from trajforge.actions import Action, ActionKind, Screen
from trajforge.domain import Observation, Query
from trajforge.errors import ConfigError
from trajforge.world.verify import VerifierResult

W, H = 200, 120
BUTTONS = {"Add": (10, 70, 90, 110), "Done": (110, 70, 190, 110)}


class TallySuite:
    name = "tally"

    def check_task(self, task: str) -> None:
        if task != "reach":
            raise ConfigError(f"apps: suite 'tally' has no task {task!r}; its task: reach")

    def environment(self, store: ObjectStore | None) -> TallyEnv:
        return TallyEnv(store)


class TallyEnv:
    def __init__(self, store: ObjectStore | None) -> None:
        self.store, self.count, self.target, self.done = store, 0, 0, False

    def describe(self, task: str, seed: int) -> tuple[str, dict[str, str]]:
        target = random.Random(seed).randint(1, 2)
        return f"Tap Add until the counter shows {target}, then tap Done.", {"target": str(target)}

    def reset(self, task: Query) -> Observation:
        self.count, self.done, self.target = 0, False, int(task.slots["target"])
        return self._observe()

    def step(self, action: Action) -> Observation:
        if action.kind == ActionKind.CLICK and action.point is not None and not self.done:
            x, y = Screen(W, H).to_px(action.point)
            for label, (x1, y1, x2, y2) in BUTTONS.items():
                if x1 <= x <= x2 and y1 <= y <= y2:
                    self.count += label == "Add"
                    self.done = label == "Done"
        return self._observe()

    def verify(self) -> VerifierResult:
        if not self.done:
            return VerifierResult(False, "not_done")
        reward = 1.0 if self.count == self.target else 0.0
        return VerifierResult(reward > 0, None if reward else "environment_reward", "", reward)

    def close(self) -> None:
        pass

    def _observe(self) -> Observation:
        image = Image.new("RGB", (W, H), "white")
        draw = ImageDraw.Draw(image)
        draw.text((10, 20), f"Count: {self.count}", fill="black")
        for label, box in BUTTONS.items():
            draw.rectangle(box, outline="black")
            draw.text((box[0] + 10, box[1] + 12), label, fill="black")
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        png = buf.getvalue()
        digest = put_blob(self.store, png)[0] if self.store is not None else sha256_hex(png)
        elements = [
            {"id": "count", "kind": "text", "text": f"Count: {self.count}", "bounds": [10, 20, 100, 40]}
        ]
        elements += [{"id": k, "kind": "button", "text": k, "bounds": list(b)} for k, b in BUTTONS.items()]
        return Observation(screenshot=digest, width=W, height=H, elements=elements, done=self.done)
