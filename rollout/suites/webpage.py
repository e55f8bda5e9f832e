"""A web suite: task pages in a real Chromium whose own JavaScript generates the task and computes
the reward. MiniWoB++ is one (`rollout.suites.miniwob`); a user's web app is another, declared in
YAML (`WebSuite.from_yaml`, docs/environments.md).

The page is shown at its own size, on a desktop viewport with no device emulation and no zoom:
the screenshot is the page's task region (`region`, a CSS selector) at 1 CSS pixel per pixel,
and action points are relative to that screenshot. Clicks are mouse clicks, typing goes through
the keyboard, swipes are wheel scrolls; back, home and app launches do nothing (a page has
none). The element tree is read from the DOM as an agent would see it: every visible control
(buttons, links, fields, checkboxes, anything with a pointer cursor or a widget role) and every
visible text outside a control, with its text, kind, bounds and checked/focused state. A
control's text is its name as a user (or a screen reader) gets it: `aria-labelledby`,
`aria-label`, its `<label>`, then its own words, an image's `alt` or its `title` (an icon button
is "Close", not "×"); a field shows its value, else that name or its placeholder; an unlabelled
checkbox is named by the words right after it.
"""

from __future__ import annotations

import json
import re
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollout.suites.base import read_suite_file, reward_verdict, seed_of
from rollout.suites.page_js import CLOSE_SELECTS_JS, ELEMENTS_JS, REGION_JS, SELECT_JS
from rollout.web.browser import ANY_LOCAL_FILE, BrowserThread, chromium_available, png_size
from rollout.web.files import file_uri, folder_url
from storage.keys import sha256_hex
from storage.objectstore import ObjectStore, put_blob
from trajforge.actions import Action, ActionKind, Screen
from trajforge.actions.compare import on_screen
from trajforge.domain import Observation, Query
from trajforge.errors import ConfigError
from trajforge.world.verify import VerifierResult

SCROLL_PX = 120
# Playwright's message for an exception the page's JavaScript threw (not a closed or crashed page)
_THROWN = re.compile(r"^Page\.evaluate: ((?:[A-Z]\w*)?(?:Error|Exception)\b.*)$")


class HookError(ConfigError):
    """A web suite's hook threw in the page: the suite's configuration is wrong, not the device."""


class Hooks(BaseModel):
    """JavaScript the suite runs in the page: each an expression of a function."""

    model_config = ConfigDict(extra="forbid")

    reset: str = Field(description="`({task, seed}) => ...`: start the task under this seed (page loaded).")
    instruction: str = Field(description="`() => ...`: the instruction (a string), or {instruction, params}.")
    done: str = Field(description="`() => ...`: true once the environment has ended the episode.")
    reward: str = Field(description="`() => ...`: the environment's reward (a number); > 0 is success.")
    reason: str | None = Field(None, description="`() => ...`: optional, why the reward is what it is.")


class WebSuite(BaseModel):
    """A suite of task pages: where the page is, the region shown, and the hooks."""

    model_config = ConfigDict(extra="forbid")

    device: ClassVar[str] = "web"
    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    url: str = Field(description="The task page (http, https or file); `{task}` becomes the task name.")
    tasks: list[str] | None = Field(None, description="The suite's task names; none: any the page accepts.")
    viewport: tuple[int, int] = (500, 320)
    region: str | None = Field(None, description="CSS selector of the part of the page that is the screen.")
    hooks: Hooks
    settle_ms: int = Field(0, ge=0, le=5000, description="Wait after each action (animations).")
    local_files: Literal["folder", "any"] = Field(
        "folder",
        description="What a file:// page may read: `folder`, only files under `root` (served from a "
        "loopback address); `any`, every local file (only for a page you trust).",
    )
    root: Path | None = Field(
        None, description="The folder a file:// page may read; default: the suite file's folder."
    )

    @property
    def page_url(self) -> str:
        """Where the browser opens the page (`{task}` still in it)."""
        if self.url.startswith("file:") and self.local_files == "folder":
            return folder_url(self.url, self.root)
        return self.url

    @property
    def browser_args(self) -> tuple[str, ...]:
        return (ANY_LOCAL_FILE,) if self.url.startswith("file:") and self.local_files == "any" else ()

    @classmethod
    def from_yaml(cls, path: Path) -> WebSuite:
        return cls.from_data(path, read_suite_file(path))

    @classmethod
    def from_data(cls, path: Path, data: Any) -> WebSuite:
        """The suite a suite file at `path` declares, its file URLs made relative to the file."""
        try:
            suite = cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"web suite {path}: {exc}".splitlines()[0] + f" ({_first_error(exc)})") from exc
        if suite.url.startswith("file://") and not suite.url.startswith("file:///"):  # relative to the file
            suite = suite.model_copy(update={"url": file_uri(path.parent / suite.url[7:])})
        if suite.url.startswith("file:"):
            root = (path.parent / (suite.root or ".")).resolve()
            if suite.local_files == "folder" and not root.is_relative_to(path.parent.resolve()):
                raise ConfigError(
                    f"web suite {path}: root {suite.root} is outside the suite's folder, so its pages "
                    "could read every file under it; give a folder under the suite file's, or set "
                    "`local_files: any` for a page you trust"
                )
            suite = suite.model_copy(update={"root": root})
        return suite

    def check_task(self, task: str) -> None:
        if self.tasks is not None and task not in self.tasks:
            raise ConfigError(
                f"apps: suite {self.name!r} has no task {task!r}; its tasks: {', '.join(self.tasks)}"
            )

    def environment(self, store: ObjectStore | None) -> PageEnv:
        return PageEnv(self, store)


def need_chromium(suite: str) -> None:
    if not chromium_available():
        raise ConfigError(f"suite {suite!r} runs in Chromium through Playwright: apt-get install chromium")


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        return f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
    return str(exc).splitlines()[0]


class PageEnv:
    """One browser page of a web suite; it stays on a task's page across its episodes."""

    def __init__(self, suite: WebSuite, store: ObjectStore | None = None, timeout_ms: int = 15_000) -> None:
        need_chromium(suite.name)
        self.suite, self.store = suite, store
        width, height = suite.viewport
        self._browser = BrowserThread(
            lambda pw: {"viewport": {"width": width, "height": height}}, timeout_ms, suite.browser_args
        )
        self._page_url = suite.page_url
        self._call = self._browser.call
        self._page = self._browser.page
        self._url: str | None = None
        self._shown: tuple[float, ...] = (0.0, 0.0, float(width), float(height))  # the last shot's region

    # --- the suite's side ---------------------------------------------------------------------
    def describe(self, task: str, seed: int) -> tuple[str, dict[str, str]]:
        def run() -> tuple[str, dict[str, str]]:
            self._start(task, seed)
            return self._instruction()

        return self._call(run)

    # --- protocol ----------------------------------------------------------------------------
    def reset(self, task: Query) -> Observation:
        name, seed = seed_of(task)

        def run() -> Observation:
            self._start(name, seed)
            shown, _ = self._instruction()
            obs = self._observe()
            if shown != task.instruction:  # the page generated another task than the one queried
                return obs.model_copy(update={"meta": {**obs.meta, "instruction_drift": shown}})
            return obs

        return self._call(run)

    def step(self, action: Action) -> Observation:
        return self._call(lambda: self._step(action))

    def verify(self) -> VerifierResult:
        return self._call(lambda: reward_verdict(*self._outcome()))

    def close(self) -> None:
        self._browser.close()

    # --- inside the browser thread ------------------------------------------------------------
    def _hook(self, name: str, expression: str, arg: object = None) -> Any:
        """`expression` evaluated in the page; an exception the suite's JavaScript threw is the
        suite's mistake, one `HookError` (not a device crash a new page would retry)."""
        from playwright.sync_api import Error as BrowserError

        try:
            return self._page.evaluate(expression, arg)
        except BrowserError as exc:
            thrown = _THROWN.match(str(exc).splitlines()[0])
            if thrown is None:
                raise  # the browser's own failure: the device crashed
            raise HookError(
                f"web suite {self.suite.name!r}: its {name} hook threw {thrown[1]} on {self._url}; fix the "
                "hook (`hooks:` in its YAML) or the page"
            ) from exc

    def _start(self, task: str, seed: int) -> None:
        url = self._page_url.replace("{task}", task)
        if url != self._url:
            self._page.goto(url)
            self._url = url
        self._hook("reset", f"({self.suite.hooks.reset})({json.dumps({'task': task, 'seed': seed})})")

    def _instruction(self) -> tuple[str, dict[str, str]]:
        value = self._hook("instruction", f"({self.suite.hooks.instruction})()")
        if isinstance(value, dict):
            params = {str(k): str(v) for k, v in (value.get("params") or {}).items()}
            return str(value.get("instruction") or ""), params
        return str(value or ""), {}

    def _outcome(self) -> tuple[bool, float, str | None]:
        read = self._hook("done, reward or reason", f"() => ({self._outcome_js})")
        return bool(read["done"]), float(read["reward"]), read["reason"]

    @cached_property
    def _outcome_js(self) -> str:
        hooks = self.suite.hooks
        reason = f"(({hooks.reason})() ?? null)" if hooks.reason else "null"
        return f"{{done: !!({hooks.done})(), reward: Number(({hooks.reward})()) || 0, reason: {reason}}}"

    @cached_property
    def _read_js(self) -> str:
        """One round trip per observation: the region, the element tree and the outcome hooks."""
        return (
            f"(sel) => ({{region: ({REGION_JS})(sel), elements: ({ELEMENTS_JS})(sel), "
            f"outcome: ({self._outcome_js})}})"
        )

    def _step(self, action: Action) -> Observation:
        page, kind = self._page, action.kind
        x0, y0, w, h = self._shown  # the points are relative to the screenshot the policy saw
        screen = Screen(round(w), round(h))
        select = None
        if kind in (ActionKind.CLICK, ActionKind.LONG_PRESS, ActionKind.TYPE) and action.point is not None:
            x, y = screen.to_px(action.point)
            typed = (action.text or "") if kind == ActionKind.TYPE else None
            select = page.evaluate(SELECT_JS, [x0 + x, y0 + y, typed])
            if select in ("click", "close"):
                page.mouse.click(x0 + x, y0 + y, delay=800 if kind == ActionKind.LONG_PRESS else 0)
            if select == "close":
                page.evaluate(CLOSE_SELECTS_JS)
        if kind == ActionKind.TYPE and select != "chosen":
            page.keyboard.type(action.text or "")
        elif kind == ActionKind.SWIPE and action.point is not None:
            x, y = screen.to_px(action.point)
            page.mouse.move(x0 + x, y0 + y)
            page.mouse.wheel(0, SCROLL_PX if action.swipe_direction() == "up" else -SCROLL_PX)
        elif kind == ActionKind.PRESS and action.key == "enter":
            page.keyboard.press("Enter")
        elif kind == ActionKind.WAIT:
            page.wait_for_timeout(100)
        if self.suite.settle_ms:
            page.wait_for_timeout(self.suite.settle_ms)
        return self._observe()

    def _observe(self) -> Observation:
        read = self._hook("done, reward or reason", self._read_js, self.suite.region)
        x, y, w, h = self._shown = tuple(float(v) for v in read["region"])
        png = self._page.screenshot(type="png", clip={"x": x, "y": y, "width": w, "height": h})
        width, height = png_size(png)
        digest = put_blob(self.store, png)[0] if self.store is not None else sha256_hex(png)
        done = bool(read["outcome"]["done"])
        return Observation(
            screenshot=digest,
            width=width,
            height=height,
            elements=[
                e | {"bounds": on_screen(e["bounds"], Screen(width, height))} for e in read["elements"]
            ],
            meta={"backend": "web", "suite": self.suite.name}
            | ({"reward": float(read["outcome"]["reward"])} if done else {}),
            done=done,
        )
