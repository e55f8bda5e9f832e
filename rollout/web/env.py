"""`WebEnv`: the app specs as HTML pages in a real Chromium, in Pixel 7 mobile emulation.

Taps are touch taps at the action's point, swipes are real scroll gestures (CDP
`Input.synthesizeScrollGesture`; mouse-sourced, as headless Chromium ignores touch-sourced
ones), typing goes through the keyboard, back and home are
navigation keys the page serves. Screenshots are Chromium's; the element tree is read
from the DOM (what is on screen and not covered); the verifier reads the app state the
page embeds. Every browser call runs on the browser's own thread (`rollout.web.browser`).
"""

from __future__ import annotations

import logging

from rollout.web.browser import CHROMIUM, BrowserThread, chromium_available, chromium_env, png_size
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
__all__ = ["CHROMIUM", "WebEnv", "chromium_available", "chromium_env"]

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
        self.server = WebAppServer(SimDevice(apps, faults=faults))
        self._task: Query | None = None
        self._browser = BrowserThread(lambda pw: dict(pw.devices[DEVICE]), timeout_ms)
        self._call = self._browser.call
        self._page = self._browser.page
        self._cdp = self._call(lambda: self._browser.context.new_cdp_session(self._page))
        self._dpr = float(self._call(lambda: self._browser.pw.devices[DEVICE]["device_scale_factor"]))

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
        try:
            self._browser.close()
        finally:
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
        width, height = png_size(png)
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
