"""One device slot's BrowserGym environment, through `serve.py` in BrowserGym's venv.

Observations: BrowserGym's screenshot, and its accessibility tree as trajforge elements, each
`id` its BrowserGym id (`bid`), bounds in screenshot pixels. Actions: a canonical action becomes
one of BrowserGym's high-level action strings. A pointed action is aimed at the element under its
point: the smallest one in the tree shown before it, as `trajforge.actions.compare.element_at`
finds it at export, so the step's recorded elements and point name the same `bid` again.
`click("12")`, `fill("12", "text")`, `select_option("12", "text")` for a select; where no element
is under the point, the coordinates (`mouse_click(x, y)`, in the page's CSS pixels). The string
sent is kept in the observation's `meta["action"]`.

The episode ends when BrowserGym terminates or truncates it; it succeeds when the reward of its
`validate` summed over the episode is positive.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from pathlib import Path
from typing import Any

from PIL import Image

from rollout.suites.base import reward_verdict, seed_of
from rollout.suites.browsergym.pipe import Pipe
from storage.keys import sha256_hex
from storage.objectstore import ObjectStore, put_blob
from trajforge.actions import Action, Screen
from trajforge.actions.browsergym import to_code
from trajforge.actions.compare import element_at
from trajforge.domain import Observation, Query
from trajforge.world.verify import VerifierResult

INPUT_ROLES = {"textbox", "searchbox", "spinbutton", "textarea"}
TOGGLE_ROLES = {"checkbox", "radio", "switch", "menuitemcheckbox", "menuitemradio"}
BUTTON_ROLES = {"button", "link", "menuitem", "tab", "option", "combobox", "listbox", "treeitem", "slider"}


def elements(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The server's accessibility nodes as trajforge elements: controls with their accessible
    names, and named or worded nodes as text; nodes not shown are left out."""
    out: list[dict[str, Any]] = []
    for node in nodes:
        x, y, w, h = (float(v) for v in node["bbox"])
        if w <= 0 or h <= 0 or (node.get("visibility") or 0) < 0.5:
            continue
        role, name, value = node["role"], node["name"].strip(), node["value"].strip()
        states = node.get("states") or {}
        checked = None
        if role in INPUT_ROLES:
            kind, text = "input", value or name
        elif role in TOGGLE_ROLES:
            kind, text, checked = "toggle", name, states.get("checked") in ("true", True)
        elif role in BUTTON_ROLES:
            kind, text = "button", ": ".join(t for t in (name, value) if t) if role == "combobox" else name
            if role == "option":
                checked = states.get("selected") in ("true", True)
        elif name or node.get("text"):
            kind, text = "text", name or node["text"]
        else:
            continue
        out.append(
            {
                "id": node["bid"],
                "kind": kind,
                "tag": role,
                "text": " ".join(text.split()),
                "checked": checked,
                "focused": bool(states.get("focused")),
                "bounds": [max(0, round(v)) for v in (x, y, x + w, y + h)],
            }
        )
    return out


def text_observation(reply: dict[str, Any], action_space: str) -> bytes:
    """The text a BrowserGym agent reads of one observation, as a JSON blob: the goal, the open
    tabs, the flattened accessibility tree (`flatten_axtree_to_str`), the last action's error and
    the action space's description, the page's viewport (a `browsergym` export builds the demo
    agent's prompt of it, `publish.export_browsergym`)."""
    keep = {"goal": reply["goal"], "axtree_txt": reply["axtree_txt"], "tabs": reply.get("tabs") or []}
    keep |= {"active_tab": reply.get("active_tab", 0), "last_action_error": reply.get("error") or ""}
    keep["viewport"] = reply["viewport"]  # CSS pixels: an action not played is aimed in them at export
    return json.dumps({**keep, "action_space": action_space}, ensure_ascii=False, sort_keys=True).encode()


class BrowserGymEnv:
    """A BrowserGym server process of this slot's own (started on first use)."""

    def __init__(self, python: Path, store: ObjectStore | None) -> None:
        self.python, self.store = python, store
        self._pipe: Pipe | None = None
        self._lock = threading.Lock()
        self._shown: list[dict[str, Any]] = []
        self._screen, self._scale = Screen(1000, 1000), 1.0
        self._pointer: tuple[float, float] = (0.0, 0.0)
        self._done, self._reward = False, 0.0
        self._last: Observation | None = None
        self._action_space = ""  # BrowserGym's description of the action set, as its demo agent shows it

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self._pipe is None:
                self._pipe = Pipe(self.python)
            try:
                return self._pipe.ask(request)
            except Exception:  # a failed server is not asked again: the next call starts a fresh one
                self._pipe.close()
                self._pipe = None
                raise

    def describe(self, task: str, seed: int) -> tuple[str, dict[str, str]]:
        reply = self._ask({"op": "reset", "task": task, "seed": seed})
        return reply["goal"], {}

    def reset(self, task: Query) -> Observation:
        name, seed = seed_of(task)
        self._done, self._reward = False, 0.0
        reply = self._ask({"op": "reset", "task": name, "seed": seed})
        self._action_space = str(reply.get("action_space") or "")
        return self._observe(reply, "")

    def step(self, action: Action) -> Observation:
        if self._done and self._last is not None:  # BrowserGym ended the episode; later actions do nothing
            return self._last
        code = self.code(action)
        reply = self._ask({"op": "step", "action": code})
        self._reward += float(reply["reward"])
        self._done = bool(reply["terminated"] or reply["truncated"])
        return self._observe(reply, code)

    def verify(self) -> VerifierResult:
        return reward_verdict(self._done, self._reward)

    def close(self) -> None:
        with self._lock:
            if self._pipe is not None:
                self._pipe.close()
                self._pipe = None

    def _observe(self, reply: dict[str, Any], code: str) -> Observation:
        png = base64.b64decode(reply["png"])
        digest = put_blob(self.store, png)[0] if self.store is not None else sha256_hex(png)
        width, height = Image.open(io.BytesIO(png)).size
        self._screen = Screen(width, height)
        self._scale = width / max(1, int(reply["viewport"][0]))
        self._shown = elements(reply["nodes"])
        meta: dict[str, Any] = {"backend": "browsergym", "suite": "browsergym", "url": reply["url"]}
        if code:
            meta |= {"action": code, "error": reply["error"]} if reply["error"] else {"action": code}
        if self.store is not None and "axtree_txt" in reply:  # what BrowserGym's own agents read
            meta["text"] = put_blob(self.store, text_observation(reply, self._action_space))[0]
        self._last = Observation(
            screenshot=digest,
            width=width,
            height=height,
            elements=self._shown,
            meta=meta | ({"reward": self._reward} if self._done else {}),
            done=self._done,
        )
        return self._last

    # --- canonical actions as BrowserGym's -----------------------------------------------------
    def code(self, action: Action) -> str:
        """BrowserGym's high-level action string for a canonical action (see the module's docstring)."""
        target, at = None, self._pointer
        if action.point is not None:
            target = element_at(self._shown, action.point, self._screen)
            at = self._pointer = self._css(action.point)
        return to_code(action, target, at, None if action.to is None else self._css(action.to))

    def _css(self, point: tuple[int, int]) -> tuple[float, float]:
        """A 0-1000 point in the page's CSS pixels (the screenshot is `_scale` times larger)."""
        px = self._screen.to_px(point)
        return (px[0] / self._scale, px[1] / self._scale)
