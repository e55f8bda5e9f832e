"""The simulated device: a launcher plus app specs as state machines, with layout.

It knows where every element is (so taps hit bounding boxes and the element tree is
real) but draws nothing; `rollout.sim.render` turns its `render_key()` into pixels.
Query validation replays paths on it without rendering at all.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from trajforge.actions.compare import element_at
from trajforge.actions.model import DEFAULT_SCREEN, Action, ActionKind, Screen
from trajforge.errors import DeviceCrashed, DeviceHung
from trajforge.spec_model import AppSpec, Widget
from trajforge.world.model import (
    APPBAR_H,
    GAP,
    ICON_H,
    ICON_W,
    ICONS_PER_ROW,
    LAUNCHER,
    MARGIN,
    NAV_H,
    POPUP_CLOSE,
    ROW_H,
    SCROLL_FRACTION,
    STATUS_H,
    Element,
    FaultConfig,
    SimState,
    fill,
)


class SimDevice:
    """Apps on a simulated phone. `act` applies one canonical action."""

    def __init__(
        self, apps: list[AppSpec], screen: Screen = DEFAULT_SCREEN, faults: FaultConfig | None = None
    ) -> None:
        self.apps = {a.name: a for a in apps}
        self.size = screen
        self.scale = screen.width / 1080
        self.faults = faults or FaultConfig()
        self._rng = random.Random(self.faults.seed)
        self._layouts: dict[tuple[Any, ...], tuple[Element, ...]] = {}
        # laid-out states kept (a replay scrolls back through the same ones); 0: none (benchmarks)
        self.layout_cache = 256
        self.state = SimState()
        self.reset()

    # --- state ---------------------------------------------------------------------------
    def reset(self, episode_seed: int | str = 0) -> None:
        """Launcher, every app with its initial slot values.

        Faults are drawn from (faults.seed, episode_seed): an episode replays with the same
        faults, and different episodes see different ones.
        """
        self._rng = random.Random(f"{self.faults.seed}:{episode_seed}")
        self.state = SimState(slots={name: app.initial_values() for name, app in self.apps.items()})

    def snapshot(self) -> tuple[SimState, Any]:
        """The state and the fault draws so far: `restore` comes back to this very moment."""
        return copy.deepcopy(self.state), self._rng.getstate()

    def restore(self, snapshot: tuple[SimState, Any]) -> None:
        state, draws = snapshot
        self.state = copy.deepcopy(state)
        self._rng.setstate(draws)

    @property
    def app(self) -> AppSpec | None:
        return self.apps[self.state.app] if self.state.app else None

    def slot_values(self) -> dict[str, str]:
        return dict(self.state.slots.get(self.state.app or "", {}))

    # --- layout --------------------------------------------------------------------------
    def _px(self, v: float) -> int:
        return round(v * self.scale)

    @property
    def viewport(self) -> tuple[int, int]:
        return (self._px(STATUS_H + APPBAR_H), self.size.height - self._px(NAV_H))

    def layout(self) -> list[Element]:
        """Every element of the current screen, visible or scrolled away.

        Cached by everything it depends on: a long list (hundreds of slot values) is laid out
        once per state, not at every hit test of a replay that scrolls through it.
        """
        s = self.state
        if s.loading:
            return []
        if self.app is None:
            return self._launcher()
        key = (
            s.app,
            s.screen,
            s.scroll,
            s.focus,
            tuple(sorted(self.slot_values().items())),
            tuple(sorted(s.typed.items())),
        )
        cached = self._layouts.get(key)
        if cached is None:
            cached = self._layout()
            if self.layout_cache:
                if len(self._layouts) >= self.layout_cache:
                    self._layouts.pop(next(iter(self._layouts)))
                self._layouts[key] = cached
        return list(cached)

    def _layout(self) -> tuple[Element, ...]:
        s = self.state
        assert self.app is not None
        screen = self.app.screens[s.screen]
        values = self.slot_values()
        top, _ = self.viewport
        y = top + self._px(GAP) - s.scroll
        out: list[Element] = []
        for w in screen.widgets:
            if w.bounds is not None:
                x1, y1, x2, y2 = w.bounds
                box = (
                    x1 * self.size.width // 1000,
                    y1 * self.size.height // 1000,
                    x2 * self.size.width // 1000,
                    y2 * self.size.height // 1000,
                )
                out.extend(self._elements(w, values, [box]))
                continue
            rows = self.app.slots[w.slot] if w.kind == "list" and w.slot else [None]
            boxes = []
            for _ in rows:
                h = self._px(ROW_H[w.kind])
                boxes.append((self._px(MARGIN), y, self.size.width - self._px(MARGIN), y + h))
                y += h + self._px(GAP)
            out.extend(self._elements(w, values, boxes))
        return tuple(out)

    def _elements(
        self, w: Widget, values: dict[str, str], boxes: list[tuple[int, int, int, int]]
    ) -> list[Element]:
        if w.kind == "list":
            assert w.slot is not None and self.app is not None
            return [
                Element(
                    f"{w.id}:{i}",
                    "list_item",
                    fill(w.label or "{value}", values, row),
                    box,
                    w.id,
                    row,
                    checked=values.get(w.slot) == row if w.goto is None else None,
                )
                for i, (row, box) in enumerate(zip(self.app.slots[w.slot], boxes, strict=True))
            ]
        key = f"{self.state.screen}.{w.id}"
        text = fill(w.label, values)
        if w.kind == "input":
            text = self.state.typed.get(key, "") or text
        checked = (
            values.get(w.slot or "") == self.app.slots[w.slot][1]
            if w.kind == "toggle" and self.app and w.slot
            else None
        )
        return [
            Element(w.id, w.kind, text, boxes[0], w.id, checked=checked, focused=self.state.focus == w.id)
        ]

    def _launcher(self) -> list[Element]:
        out = []
        cell_w = self.size.width // ICONS_PER_ROW
        for i, app in enumerate(sorted(self.apps.values(), key=lambda a: a.name)):
            col, row = i % ICONS_PER_ROW, i // ICONS_PER_ROW
            x1 = col * cell_w + (cell_w - self._px(ICON_W)) // 2
            y1 = self._px(400) + row * self._px(ICON_H + 60)
            out.append(
                Element(
                    f"app:{app.name}",
                    "app_icon",
                    app.title,
                    (x1, y1, x1 + self._px(ICON_W), y1 + self._px(ICON_H)),
                    value=app.name,
                )
            )
        return out

    def elements(self) -> list[Element]:
        """The element tree as a user sees it: visible elements; a dialog hides what is under it."""
        if self.state.popup:
            w, h = self.size.width, self.size.height
            return [
                Element(
                    POPUP_CLOSE,
                    "button",
                    "Close",
                    (
                        w // 2 - self._px(200),
                        h // 2 + self._px(60),
                        w // 2 + self._px(200),
                        h // 2 + self._px(200),
                    ),
                )
            ]
        top, bottom = self.viewport
        fixed = {w.id for w in self.app.screens[self.state.screen].widgets if w.bounds} if self.app else set()
        return [
            e
            for e in self.layout()
            if self.app is None or e.widget in fixed or (e.bounds[1] >= top and e.bounds[3] <= bottom)
        ]

    def max_scroll(self) -> int:
        if self.app is None or self.state.loading:
            return 0
        content = [e.bounds[3] + self.state.scroll for e in self.layout()]
        top, bottom = self.viewport
        return max(0, max(content, default=top) + self._px(GAP) - bottom)

    def render_key(self) -> tuple[Any, ...]:
        """Everything that decides the pixels; equal keys give equal frames."""
        s = self.state
        title = fill(self.app.screens[s.screen].title, self.slot_values()) if self.app else ""
        return (
            self.size.width,
            self.size.height,
            s.app,
            s.screen,
            title,
            s.popup,
            s.loading,
            tuple(self.elements() if not s.popup else self.layout() + self.elements()),
        )

    # --- actions -------------------------------------------------------------------------
    def act(self, action: Action) -> str:
        """Apply one action; returns what happened (an event name, e.g. 'navigated').

        Raises:
            DeviceCrashed / DeviceHung: a fault switch fired, or the device already crashed.
        """
        s = self.state
        if s.crashed:
            raise DeviceCrashed("the simulated device has crashed; reset it")
        if self.faults.crash_rate and self._rng.random() < self.faults.crash_rate:
            s.crashed = True
            raise DeviceCrashed("the simulated device crashed (fault injection)")
        if self.faults.hang_rate and self._rng.random() < self.faults.hang_rate:
            raise DeviceHung("the simulated device stopped responding (fault injection)")
        if s.loading:
            s.loading = False
            return "waited" if action.kind == ActionKind.WAIT else "ignored_while_loading"
        if s.popup:
            if (action.kind == ActionKind.PRESS and action.key == "back") or self._hit(action) == POPUP_CLOSE:
                s.popup = False
                return "dismissed_popup"
            return "ignored_under_popup"
        return self._apply(action)

    def _hit(self, action: Action) -> str | None:
        if action.kind != ActionKind.CLICK or action.point is None:
            return None
        target = self._target(action.point)
        return None if target is None else target.id

    def _target(self, point: tuple[int, int]) -> Element | None:
        """The element a tap at a per-mille point activates (`element_at`'s rule)."""
        return element_at(self.elements(), point, self.size, bounds=lambda e: e.bounds)

    def _apply(self, action: Action) -> str:
        s, kind = self.state, action.kind
        if kind == ActionKind.CLICK:
            return self._tap(action)
        if kind == ActionKind.SWIPE:
            direction = action.swipe_direction()
            if direction not in ("up", "down"):
                return "no_change"
            step = round((self.viewport[1] - self.viewport[0]) * SCROLL_FRACTION)
            new = min(self.max_scroll(), max(0, s.scroll + (step if direction == "up" else -step)))
            changed, s.scroll = new != s.scroll, new
            return "scrolled" if changed else "no_change"
        if kind == ActionKind.TYPE:
            if action.point is not None:
                self._tap(action.model_copy(update={"kind": ActionKind.CLICK, "text": None}))
            return self._type(action.text or "")
        if kind == ActionKind.PRESS:
            return self._press(action.key or "")
        if kind == ActionKind.OPEN_APP:
            return self.open_app(action.text or "")
        if kind == ActionKind.TERMINATE:
            s.finished = action.status
            return "terminated"
        if kind == ActionKind.ANSWER:
            s.answer = action.text
            return "answered"
        return "no_change"  # wait, long_press

    def _tap(self, action: Action) -> str:
        assert action.point is not None
        target = self._target(action.point)
        return "tap_missed" if target is None else self._activate(target)

    def activate(self, element_id: str) -> str:
        """Tap an element by id, visible or not (the web backend's browser decides what is visible)."""
        target = next((e for e in self.layout() + self.elements() if e.id == element_id), None)
        return "tap_missed" if target is None else self._activate(target)

    def _activate(self, target: Element) -> str:
        if target.id == POPUP_CLOSE:
            self.state.popup = False
            return "dismissed_popup"
        if target.kind == "app_icon":
            return self._open(target.value or "")
        assert self.app is not None
        widget = next(w for w in self.app.screens[self.state.screen].widgets if w.id == target.widget)
        values = self.state.slots[self.app.name]
        if widget.kind == "input":
            self.state.focus = widget.id
            return "focused"
        if widget.kind == "toggle" and widget.slot:
            on, off = self.app.slots[widget.slot]
            values[widget.slot] = off if values.get(widget.slot) == on else on
            return "toggled"
        if widget.kind == "list" and widget.slot and target.value is not None:
            values[widget.slot] = target.value
        values.update(widget.sets)
        if widget.goto:
            return self._goto(widget.goto)
        return "selected" if widget.kind in ("list", "button") else "no_change"

    def open_app(self, name_or_title: str) -> str:
        wanted = name_or_title.casefold()
        app = next((a for a in self.apps.values() if wanted in (a.name.casefold(), a.title.casefold())), None)
        return self._open(app.name) if app else "unknown_app"

    def type_text(self, text: str) -> str:
        return self._type(text)

    def press(self, key: str) -> str:
        return self._press(key)

    def _type(self, text: str) -> str:
        s, app = self.state, self.app
        if app is None or s.focus is None:
            return "typed_nowhere"
        widget = app.widget(s.screen, s.focus)
        s.typed[f"{s.screen}.{widget.id}"] = text
        if widget.slot:
            s.slots[app.name][widget.slot] = text
        return "typed"

    def _press(self, key: str) -> str:
        s = self.state
        if key == "home":
            s.app, s.screen, s.stack, s.focus, s.scroll = None, LAUNCHER, [], None, 0
            return "home"
        if key == "back":
            if s.focus is not None:
                s.focus = None  # the keyboard closes first, as on Android
                return "keyboard_closed"
            if s.stack:
                s.screen, s.scroll = s.stack.pop(), 0
                return "back"
            return self._press("home") if s.app else "no_change"
        if key == "enter" and self.app is not None and s.focus is not None:
            widget = self.app.widget(s.screen, s.focus)
            if widget.goto:
                return self._goto(widget.goto)
        return "no_change"

    def _open(self, name: str) -> str:
        s, app = self.state, self.apps[name]
        s.app, s.stack, s.typed = name, [], {}
        self._enter(app.start)
        return "opened_app"

    def _goto(self, screen: str) -> str:
        self.state.stack.append(self.state.screen)
        self._enter(screen)
        return "navigated"

    def _enter(self, screen: str) -> None:
        s = self.state
        s.screen, s.scroll, s.focus = screen, 0, None
        if self.faults.popup_rate and self._rng.random() < self.faults.popup_rate:
            s.popup = True
        if self.faults.slow_rate and self._rng.random() < self.faults.slow_rate:
            s.loading = True
