"""Runs BrowserGym environments for trajforge's `browsergym` suite, inside BrowserGym's own venv.

BrowserGym pins its own Playwright and lxml, so it lives in a virtualenv of its own (`make
browsergym`) and the suite talks to this server over a pipe: one JSON request per line on stdin,
one JSON reply per line on stdout. It imports nothing of trajforge.

Requests:
- `{"op": "tasks"}`: the registered BrowserGym task ids (`miniwob.click-test`, ...), from every
  `browsergym.*` benchmark package installed here.
- `{"op": "reset", "task": ID, "seed": N}`: `gym.make("browsergym/ID")` (kept while the task stays
  the same), then `reset(seed=N)`.
- `{"op": "step", "action": CODE}`: BrowserGym's own `step` with a high-level action string.
- `{"op": "close"}`.

Every reset and step answers the observation: `goal`, the screenshot as base64 PNG, the viewport's
CSS size, the accessibility tree's nodes that carry a BrowserGym id (`bid`) with their role, name,
value, states and bounding box, `url`, `error` (BrowserGym's `last_action_error`), and after a step
`reward`, `terminated`, `truncated`. A failure answers `{"ok": false, "kind": "config"|"crash",
"error": ...}`: `config` when the request itself is wrong (an unknown task), `crash` otherwise.

Chromium: BrowserGym launches Playwright's own Chromium, and its chat window ignores the env's
launch options. Playwright finds its browsers under `PLAYWRIGHT_BROWSERS_PATH` (its documented
setting), so when `TRAJFORGE_CHROMIUM` names a browser, that folder is laid out with Playwright's
expected executable path linked to it: every launch, the chat's included, runs that browser.
"""

from __future__ import annotations

import base64
import importlib
import io
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

# BrowserGym's benchmark packages; each registers its tasks as `browsergym/<benchmark>.<task>`.
BENCHMARKS = (
    "miniwob",
    "webarena",
    "visualwebarena",
    "webarenalite",
    "workarena",
    "assistantbench",
    "weblinx",
)
# The high-level action subsets trajforge's actions map to (bid, coordinates, chat, navigation).
SUBSETS = ["chat", "infeas", "bid", "coord", "nav", "tab"]
STATES = ("checked", "focused", "selected", "expanded", "disabled", "pressed")


def link_chromium(chromium: str) -> str:
    """A Playwright browsers folder whose Chromium (and headless shell) is `chromium`; its path."""
    import playwright

    listing = Path(playwright.__file__).parent / "driver" / "package" / "browsers.json"
    browsers = {b["name"]: b["revision"] for b in json.loads(listing.read_text())["browsers"]}
    root = Path(tempfile.gettempdir()) / f"trajforge-playwright-{os.getuid()}"
    layout = {
        "chromium": ("chrome-linux", "chrome"),
        "chromium-headless-shell": ("chrome-linux", "headless_shell"),
    }
    for name, (folder, exe) in layout.items():
        if name not in browsers:
            continue
        target = root / f"{name}-{browsers[name]}" / folder / exe
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_symlink() or os.readlink(target) != chromium:
            partial = target.with_name(f"{exe}.{os.getpid()}")
            partial.unlink(missing_ok=True)
            partial.symlink_to(chromium)
            partial.replace(target)
    return str(root)


def registered() -> list[str]:
    import gymnasium

    for bench in BENCHMARKS:
        try:
            importlib.import_module(f"browsergym.{bench}")
        except ImportError:
            continue
    return sorted(i.removeprefix("browsergym/") for i in gymnasium.registry if i.startswith("browsergym/"))


class Server:
    def __init__(self) -> None:
        self.env: Any = None
        self.task: str | None = None
        self.action_space = ""

    def reset(self, task: str, seed: int) -> dict[str, Any]:
        if task != self.task:
            import gymnasium
            from browsergym.core.action.highlevel import HighLevelActionSet

            self.close()
            if task not in registered():
                raise LookupError(f"no BrowserGym task {task!r}")
            actions = HighLevelActionSet(subsets=SUBSETS, multiaction=True, strict=False)
            self.env = gymnasium.make(f"browsergym/{task}", action_mapping=actions.to_python_code)
            self.task = task
            # the action space as BrowserGym's demo agent describes it to its model
            self.action_space = actions.describe(with_long_description=False, with_examples=True)
        obs, _info = self.env.reset(seed=seed)
        return {**self.observe(obs), "action_space": self.action_space}

    def step(self, action: str) -> dict[str, Any]:
        obs, reward, terminated, truncated, _info = self.env.step(action)
        return {
            **self.observe(obs),
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
        }

    def observe(self, obs: dict[str, Any]) -> dict[str, Any]:
        from browsergym.utils.obs import flatten_axtree_to_str
        from PIL import Image

        out = io.BytesIO()
        Image.fromarray(obs["screenshot"]).save(out, format="PNG", compress_level=1)
        page = self.env.unwrapped.page
        urls, titles = obs.get("open_pages_urls") or (), obs.get("open_pages_titles") or ()
        viewport = page.viewport_size or {"width": obs["screenshot"].shape[1], "height": 0}
        return {
            "goal": str(obs.get("goal") or ""),
            "png": base64.b64encode(out.getvalue()).decode("ascii"),
            "viewport": [viewport["width"], viewport["height"]],
            "nodes": nodes(obs["axtree_object"], obs["extra_element_properties"]),
            "url": str(obs.get("url") or ""),
            "error": str(obs.get("last_action_error") or ""),
            # the text observation BrowserGym's agents read (demo_agent/agent.py `obs_preprocessor`)
            "axtree_txt": flatten_axtree_to_str(obs["axtree_object"]),
            "tabs": [[str(u), str(t)] for u, t in zip(urls, titles, strict=False)],
            "active_tab": int(obs.get("active_page_index") or 0),
        }

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
        self.env, self.task = None, None


def nodes(axtree: dict[str, Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The accessibility tree's nodes that have a bid and a box: role, name, value, the text of its
    own text children, states, bbox ([x, y, width, height] in screenshot pixels), visibility and
    whether it is clickable."""
    out = []
    by_id = {n.get("nodeId"): n for n in axtree.get("nodes", ())}
    for node in axtree.get("nodes", ()):
        bid = node.get("browsergym_id")
        props = extra.get(bid) if bid is not None else None
        if not props or props.get("bbox") is None or node.get("ignored"):
            continue
        states = {
            p["name"]: p.get("value", {}).get("value")
            for p in node.get("properties", ())
            if p.get("name") in STATES
        }
        out.append(
            {
                "bid": str(bid),
                "role": str(node.get("role", {}).get("value") or ""),
                "name": str(node.get("name", {}).get("value") or ""),
                "value": str(node.get("value", {}).get("value") or ""),
                "text": " ".join(
                    str(child.get("name", {}).get("value") or "")
                    for child in (by_id.get(c) for c in node.get("childIds", ()))
                    if child is not None and child.get("role", {}).get("value") == "StaticText"
                ).strip(),
                "states": states,
                "bbox": props["bbox"],
                "visibility": props.get("visibility"),
                "clickable": bool(props.get("clickable")),
            }
        )
    return out


def main() -> None:
    # Replies go to the real stdout; anything a library prints (and Playwright's driver, which
    # inherits it) goes to stderr, so it cannot break the protocol.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def answer(reply: dict[str, Any]) -> None:
        replies.write(json.dumps(reply) + "\n")
        replies.flush()

    if os.environ.get("TRAJFORGE_CHROMIUM"):
        os.environ["PLAYWRIGHT_BROWSERS_PATH"] = link_chromium(os.environ["TRAJFORGE_CHROMIUM"])
    server = Server()
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        try:
            if op == "tasks":
                reply: dict[str, Any] = {"tasks": registered()}
            elif op == "reset":
                reply = server.reset(str(request["task"]), int(request["seed"]))
            elif op == "step":
                reply = server.step(str(request["action"]))
            elif op == "close":
                server.close()
                answer({"ok": True})
                return
            else:
                raise LookupError(f"unknown request {op!r}")
            answer({"ok": True, **reply})
        except LookupError as exc:
            answer({"ok": False, "kind": "config", "error": str(exc)})
        except Exception as exc:  # the browser or the task failed: the caller's device crashed
            tail = traceback.format_exc().strip().splitlines()[-3:]
            error = f"{type(exc).__name__}: {exc}"[:2000]
            answer({"ok": False, "kind": "crash", "error": error, "trace": tail})


if __name__ == "__main__":
    main()
