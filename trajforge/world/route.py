"""An app's navigation DAG as the route check reads it, and an episode followed through its step record.

`AppModel` answers two questions from the spec alone: which screen an element tree shows
(the screen whose widgets contain every widget the tree names), and how many actions are
left from a state to the goal by any valid route (back up some screens or reopen the app,
then forward on the DAG setting each goal slot on the way; an input costs tap, type and
enter).

`Tracker` follows one episode from what was observed: the element hit by each tap, the
text typed, the keys pressed, whether the frame changed, and the next step's element tree,
which overrides the predicted screen and reads toggles and selected rows back. It never
runs the simulator and never reads the verifier, so it works on every backend whose
element trees name the spec's widgets (sim, web, an annotated Android app). It reads the
spec's widget ids, so what it feeds is a programmatic check (`trajforge.world.route_check`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from trajforge.actions.model import Action, ActionKind
from trajforge.spec_model import AppSpec, Widget
from trajforge.world.verify import Goal

LAUNCHER = "__launcher__"  # the home screen's name in the step record
UNREACHABLE = 10_000
INPUT_COST = 3  # tap the field, type, press enter


class AppModel:
    def __init__(self, spec: AppSpec) -> None:
        self.spec = spec
        self.widgets = {name: {w.id: w for w in s.widgets} for name, s in spec.screens.items()}
        self._dist: dict[tuple[tuple[str, str, tuple[tuple[str, str], ...]], str, frozenset[str]], int] = {}

    def identify(self, elements: list[dict[str, Any]], hint: str | None) -> str | None:
        """The screen an element tree shows; None when it cannot tell (pop-up, loading, no widgets)."""
        if any(e.get("kind") == "app_icon" for e in elements):
            return LAUNCHER
        named = {str(e["widget"]) for e in elements if e.get("widget")}
        if not named:
            return None
        candidates = [s for s, ws in self.widgets.items() if named <= ws.keys()]
        if hint in candidates:
            return hint
        return candidates[0] if len(candidates) == 1 else None

    def remaining(
        self, goal: Goal, app: str | None, screen: str, stack: list[str], values: dict[str, str]
    ) -> int:
        """Fewest actions from this state to the goal, by any route."""
        sat = goal.satisfied(values)
        relaunch = 2 + self._forward(goal, self.spec.start, sat)  # home, then open the app
        if app != self.spec.name:
            return relaunch - (1 if screen == LAUNCHER else 0)
        best = min(relaunch, self._forward(goal, screen, sat))
        for k, earlier in enumerate(reversed(stack), 1):
            best = min(best, k + self._forward(goal, earlier, sat))
        return best

    def _forward(self, goal: Goal, screen: str, sat: frozenset[str]) -> int:
        key = (goal.key, screen, sat)
        if key not in self._dist:
            self._dist[key] = self._search(goal, screen, sat)
        return self._dist[key]

    def _search(self, goal: Goal, start: str, sat: frozenset[str]) -> int:
        """Dijkstra over (screen, goal slots already right) along the DAG's forward edges."""
        want = dict(goal.state)
        heap: list[tuple[int, str, frozenset[str]]] = [(0, start, sat)]
        seen: set[tuple[str, frozenset[str]]] = set()
        while heap:
            cost, screen, done = heapq.heappop(heap)
            if screen == goal.screen and len(done) == len(want):
                return cost
            if (screen, done) in seen or screen not in self.widgets:
                continue
            seen.add((screen, done))
            for w in self.widgets[screen].values():
                for step, after in _edges(w, want, done):
                    heapq.heappush(heap, (cost + step, w.goto or screen, after))
        return UNREACHABLE


def _edges(w: Widget, want: dict[str, str], done: frozenset[str]) -> list[tuple[int, frozenset[str]]]:
    """What using a widget can do to the goal slots: (cost, goal slots right afterwards)."""
    if w.kind == "text":
        return []
    after = set(done)
    if w.kind == "toggle":
        if w.slot not in want:
            return []
        after ^= {w.slot}
    elif w.kind in ("list", "input") and w.slot in want:
        after.add(w.slot)  # pick (or type) the goal's value
    for slot, value in w.sets.items():
        if slot in want:
            (after.add if want[slot] == value else after.discard)(slot)
    if w.goto is None and frozenset(after) == done:
        return []
    return [(INPUT_COST if w.kind == "input" else 1, frozenset(after))]


@dataclass
class Tracker:
    """One episode's state as the step record shows it."""

    model: AppModel
    goal: Goal
    app: str | None = None
    screen: str = LAUNCHER
    stack: list[str] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)
    focus: str | None = None

    @classmethod
    def start(cls, model: AppModel, goal: Goal) -> Tracker:
        return cls(model, goal, values=model.spec.initial_values())

    def remaining(self) -> int:
        return self.model.remaining(self.goal, self.app, self.screen, self.stack, self.values)

    def at_goal(self) -> bool:
        return self.app == self.goal.app and self.remaining() == 0

    def advance(self, action: Action, hit: dict[str, Any] | None, changed: bool) -> str:
        """Apply one observed action; returns what it did (an event name)."""
        if not changed and action.kind != ActionKind.TERMINATE:
            return "no_change"
        kind = action.kind
        if kind in (ActionKind.CLICK, ActionKind.LONG_PRESS) or (kind == ActionKind.TYPE and hit is not None):
            event = self._tap(hit)
            if kind != ActionKind.TYPE:
                return event
        if kind == ActionKind.TYPE:
            widget = self._widget(self.focus)
            if widget is None or widget.slot is None:
                return "typed_nowhere"
            self.values[widget.slot] = action.text or ""
            return "typed"
        if kind == ActionKind.PRESS:
            return self._press(action.key or "")
        if kind == ActionKind.OPEN_APP:
            wanted = (action.text or "").casefold()
            spec = self.model.spec
            self._open(spec.name if wanted in (spec.name.casefold(), spec.title.casefold()) else wanted)
            return "opened_app"
        return "other"

    def observe(self, elements: list[dict[str, Any]]) -> None:
        """The next element tree: correct the screen, read toggles and selected rows back."""
        seen = self.model.identify(elements, self.screen if self.app == self.model.spec.name else None)
        if seen == LAUNCHER:
            self.app, self.screen, self.stack, self.focus = None, LAUNCHER, [], None
            return
        if seen is None or self.app != self.model.spec.name:
            return
        if seen != self.screen:
            if seen in self.stack:
                while self.stack and self.stack[-1] != seen:
                    self.stack.pop()
                self.stack.pop()
            else:
                self.stack.append(self.screen)
            self.screen, self.focus = seen, None
        spec = self.model.spec
        for e in elements:
            w = self.model.widgets[seen].get(str(e.get("widget") or ""))
            if w is None or w.slot is None or e.get("checked") is None:
                continue
            if w.kind == "toggle":
                self.values[w.slot] = spec.slots[w.slot][1 if e["checked"] else 0]
            elif w.kind == "list" and w.goto is None and e["checked"] and e.get("value") is not None:
                self.values[w.slot] = str(e["value"])

    def _widget(self, widget_id: str | None) -> Widget | None:
        if self.app != self.model.spec.name or widget_id is None:
            return None
        return self.model.widgets.get(self.screen, {}).get(widget_id)

    def _tap(self, hit: dict[str, Any] | None) -> str:
        if hit is None:
            return "tap_missed"
        if hit.get("kind") == "app_icon":
            self._open(str(hit.get("value") or ""))
            return "opened_app"
        widget = self._widget(str(hit.get("widget") or ""))
        if widget is None:
            return "tap_other"  # a pop-up's button, another app, an element the spec does not name
        if widget.kind == "input":
            self.focus = widget.id
            return "focused"
        if widget.kind == "toggle" and widget.slot:
            on, off = self.model.spec.slots[widget.slot][:2]
            self.values[widget.slot] = off if self.values.get(widget.slot) == on else on
            return "toggled"
        if widget.kind == "list" and widget.slot and hit.get("value") is not None:
            self.values[widget.slot] = str(hit["value"])
        self.values.update(widget.sets)
        if widget.goto:
            self._goto(widget.goto)
            return "navigated"
        return "selected"

    def _press(self, key: str) -> str:
        if key == "home":
            self.app, self.screen, self.stack, self.focus = None, LAUNCHER, [], None
            return "home"
        if key == "back":
            if self.focus is not None:
                self.focus = None
                return "keyboard_closed"
            if self.stack:
                self.screen = self.stack.pop()
                return "back"
            return self._press("home") if self.app else "no_change"
        widget = self._widget(self.focus)
        if key == "enter" and widget is not None and widget.goto:
            self._goto(widget.goto)
            return "submitted"
        return "no_change"

    def _open(self, name: str) -> None:
        self.app, self.stack, self.focus = name, [], None
        self.screen = self.model.spec.start if name == self.model.spec.name else LAUNCHER

    def _goto(self, screen: str) -> None:
        self.stack.append(self.screen)
        self.screen, self.focus = screen, None
