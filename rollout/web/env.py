"""`WebEnv`: the app specs as HTML pages in a real Chromium, in Pixel 7 mobile emulation.

Taps are touch taps at the action's point, swipes are real scroll gestures (CDP
`Input.synthesizeScrollGesture`; mouse-sourced, as headless Chromium ignores touch-sourced
ones), typing goes through the keyboard, back and home are
navigation keys the page serves. Screenshots are Chromium's; the element tree is read
from the DOM (what is on screen and not covered); the verifier reads the app state the
page embeds. Playwright's sync API is bound to its thread, so every call runs on one
worker thread of this environment.
"""

from __future__ import annotations

import logging
import os
import struct
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar
from xml.sax.saxutils import escape

from rollout.sim.render import packaged_cjk_font
from rollout.web.server import WebAppServer
from storage.keys import sha256_hex
from storage.objectstore import ObjectStore, put_blob
from trajforge.actions import Action, ActionKind, Screen
from trajforge.appspec import AppSpec
from trajforge.domain import Observation, Query
from trajforge.errors import DeviceCrashed
from trajforge.world.device import SimDevice
from trajforge.world.model import FaultConfig
from trajforge.world.verify import VerifierResult, check_exported_state

log = logging.getLogger("trajforge.web")

T = TypeVar("T")
CHROMIUM = "/usr/bin/chromium"
# Flags this closed network needs (no background connections) and a root user needs (no sandbox).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
]
DEVICE = "Pixel 7"
SCROLL_FRACTION = 0.6

_ELEMENTS_JS = """() => {
  const dpr = window.devicePixelRatio, vh = window.innerHeight, vw = window.innerWidth;
  const out = [];
  for (const el of document.querySelectorAll('[data-id]')) {
    const r = el.getBoundingClientRect();
    if (r.width <= 0 || r.top < 0 || r.bottom > vh || r.left < 0 || r.right > vw) continue;
    const hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
    if (!hit || !(el === hit || el.contains(hit))) continue;  // covered by the app bar or a dialog
    const input = el.querySelector('input[name=text]');
    out.push({id: el.dataset.id, kind: el.dataset.kind || 'button', widget: el.dataset.widget || '',
              value: el.dataset.value || null,
              checked: el.dataset.checked ? el.dataset.checked === 'true' : null,
              text: (input ? (input.value || input.placeholder) : el.innerText).trim(),
              bounds: [r.left, r.top, r.right, r.bottom].map(v => Math.round(v * dpr))});
  }
  return out;
}"""
_LINK_AT_JS = (
    "([x, y]) => { const a = document.elementFromPoint(x, y)?.closest('a'); return a ? a.href : null; }"
)


def chromium_env() -> dict[str, str | float | bool]:
    """Chromium's environment: fontconfig sees the system fonts plus the CJK font that comes with
    trajforge's Python dependencies, so pages with Chinese text render on a machine without a
    system CJK font package."""
    env: dict[str, str | float | bool] = dict(os.environ)
    font = packaged_cjk_font()
    if font is None:
        return env
    conf = Path(tempfile.gettempdir()) / f"trajforge-fonts-{os.getuid()}.conf"
    text = (
        '<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig>\n'
        '  <include ignore_missing="yes">/etc/fonts/fonts.conf</include>\n'
        f"  <dir>{escape(str(Path(font).parent))}</dir>\n</fontconfig>\n"
    )
    if not conf.is_file() or conf.read_text() != text:
        partial = conf.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(text)
        partial.replace(conf)
    env["FONTCONFIG_FILE"] = str(conf)
    return env


def chromium_available() -> bool:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return False
    return Path(CHROMIUM).is_file()


def _png_size(png: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


class WebEnv:
    """One browser page on one app server. `close()` ends both."""

    def __init__(
        self,
        apps: list[AppSpec],
        store: ObjectStore | None = None,
        faults: FaultConfig | None = None,
        timeout_ms: int = 15_000,
    ) -> None:
        self.store = store
        self.timeout_ms = timeout_ms
        self.server = WebAppServer(SimDevice(apps, faults=faults))
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="webenv")
        self._task: Query | None = None
        self._stored: set[str] = set()
        self._call(self._launch)

    def _call(self, fn: Callable[[], T]) -> T:
        """`fn` on the browser's thread; a browser failure (a screenshot Chromium could not take
        under load, a crashed page) is the device's crash, which the runner retries on a new page."""
        from playwright.sync_api import Error as BrowserError

        try:
            return self._thread.submit(fn).result()
        except BrowserError as exc:
            raise DeviceCrashed(f"Chromium: {str(exc).splitlines()[0]}") from exc

    def _launch(self) -> None:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, env=chromium_env()
        )
        self._context = self._browser.new_context(**self._pw.devices[DEVICE])
        self._page = self._context.new_page()
        self._page.set_default_timeout(self.timeout_ms)
        self._cdp = self._context.new_cdp_session(self._page)
        self._dpr = float(self._pw.devices[DEVICE]["device_scale_factor"])

    # --- protocol ------------------------------------------------------------------------
    def reset(self, task: Query) -> Observation:
        self._task = task
        self.server.device.reset(episode_seed=task.uid)
        return self._call(lambda: (self._page.goto(self.server.url + "/"), self._observe())[1])

    def step(self, action: Action) -> Observation:
        return self._call(lambda: self._step(action))

    def verify(self) -> VerifierResult:
        if self._task is None:
            raise RuntimeError("reset() the environment with a task before verifying")
        raw = self._call(lambda: self._page.locator("#app-state").text_content())
        return check_exported_state(self._task.goal, raw or "")

    def close(self) -> None:
        def stop() -> None:
            self._browser.close()
            self._pw.stop()

        try:
            self._call(stop)
        except DeviceCrashed as exc:  # a crashed browser is closed already, as far as it can be
            log.warning("closing a crashed browser: %s", exc)
        finally:
            self._thread.shutdown()
            self.server.close()

    # --- inside the browser thread ---------------------------------------------------------
    def _screen(self) -> Screen:
        vp = self._page.viewport_size or {"width": 412, "height": 915}
        return Screen(round(vp["width"] * self._dpr), round(vp["height"] * self._dpr))

    def _css(self, point: tuple[int, int]) -> tuple[float, float]:
        x, y = self._screen().to_px(point)
        return (x / self._dpr, y / self._dpr)

    def _navigate(self, path: str) -> None:
        self._page.goto(self.server.url + path)

    def _step(self, action: Action) -> Observation:
        page, kind = self._page, action.kind
        if self.server.device.state.crashed:
            raise DeviceCrashed("the web device has crashed; reset it")
        if kind in (ActionKind.CLICK, ActionKind.TYPE) and action.point is not None:
            x, y = self._css(action.point)
            if page.evaluate(_LINK_AT_JS, [x, y]):
                with page.expect_navigation():
                    page.touchscreen.tap(x, y)
            else:
                page.touchscreen.tap(x, y)
        if kind == ActionKind.TYPE:
            page.keyboard.type(action.text or "")
        elif kind == ActionKind.SWIPE:
            direction = action.swipe_direction()
            if direction in ("up", "down"):
                x, y = self._css(action.point or (500, 500))
                distance = (page.viewport_size or {"height": 915})["height"] * SCROLL_FRACTION
                self._cdp.send(
                    "Input.synthesizeScrollGesture",
                    {
                        "x": x,
                        "y": y,
                        "yDistance": -distance if direction == "up" else distance,
                        "gestureSourceType": "mouse",  # headless Chromium ignores touch-sourced scrolls
                        "speed": 4000,
                    },
                )
        elif kind == ActionKind.PRESS:
            if action.key == "enter":
                focused_form = page.evaluate("() => !!document.activeElement?.form")
                if focused_form:
                    with page.expect_navigation():
                        page.keyboard.press("Enter")
            elif action.key in ("back", "home"):
                self._navigate(f"/press?key={action.key}")
        elif kind == ActionKind.OPEN_APP:
            self._navigate(f"/open?app={action.text or ''}")
        elif kind == ActionKind.WAIT:
            page.wait_for_timeout(100)
        elif kind in (ActionKind.TERMINATE, ActionKind.ANSWER):
            self.server.device.act(action)
        return self._observe()

    def _observe(self) -> Observation:
        png = self._page.screenshot(type="png")
        width, height = _png_size(png)
        digest = put_blob(self.store, png)[0] if self.store is not None else sha256_hex(png)
        return Observation(
            screenshot=digest,
            width=width,
            height=height,
            elements=self._page.evaluate(_ELEMENTS_JS),
            meta={"backend": "web"},
        )

    def frame(self) -> bytes:
        """The current screenshot's PNG bytes."""
        return self._call(lambda: self._page.screenshot(type="png"))
