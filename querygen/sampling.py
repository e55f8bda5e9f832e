"""Path sampling on an app's navigation graph (GUI-Owl §6.2 step 1) and its metadata (step 2).

A path is a list of moves from the app's start screen to a terminal screen. Choices
are weighted toward screens and edges that earlier rounds covered least, so coverage
grows round over round. The path's goal is what the verifier will check.
"""

from __future__ import annotations

import random
from bisect import bisect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Literal

from trajforge.appspec import AppSpec
from trajforge.world.model import Move
from trajforge.world.verify import Goal

Difficulty = Literal["easy", "medium", "hard"]
MAX_ACTIONS = 12
STOP_AT_TERMINAL = 0.5  # chance to stop at a terminal screen that still offers moves
# Why a random walk gave no path (counted per reason in the generation report).
DEAD_END = "dead_end"  # a screen with no move left that is not terminal
TOO_SHORT = "path_shorter_than_min_actions"  # every way on ends before the spec's `min_actions`
TOO_LONG = "path_longer_than_max_actions"
UNSAMPLED_HINTS = {
    DEAD_END: "a non-terminal screen with no move left; give it a goto or mark it terminal",
    TOO_SHORT: "the spec's tasks are shorter than its min_actions (default 3, opening the app included); "
    "set `min_actions:` lower in the spec to allow them",
    TOO_LONG: f"no terminal screen within {MAX_ACTIONS} actions; mark a nearer screen terminal",
}


@dataclass(frozen=True)
class SampledPath:
    app: str
    moves: tuple[Move, ...]
    state: dict[str, str]  # slot values the path set, in order of setting
    end: str

    def screens(self) -> list[str]:
        return [m.screen for m in self.moves] + [self.end]


@dataclass
class Coverage:
    """How often earlier paths used each screen and edge; rarer ones are preferred."""

    screens: Counter[str] = field(default_factory=Counter)
    edges: Counter[str] = field(default_factory=Counter)

    def add(self, path: SampledPath) -> None:
        for move in path.moves:
            self.screens[move.screen] += 1
            self.edges[f"{move.screen}.{move.widget}"] += 1
        self.screens[path.end] += 1

    def weight(self, move: Move, target: str) -> float:
        return 1.0 / (1 + self.edges[f"{move.screen}.{move.widget}"]) + 1.0 / (1 + self.screens[target])


def finishing_screens(spec: AppSpec) -> set[str]:
    """Screens from which some terminal screen can still be reached (one backward search)."""
    into: dict[str, list[str]] = {}
    for src, _, dst in spec.edges():
        into.setdefault(dst, []).append(src)
    finishing = {sid for sid, s in spec.screens.items() if s.terminal}
    todo = list(finishing)
    while todo:
        for src in into.get(todo.pop(), ()):
            if src not in finishing:
                finishing.add(src)
                todo.append(src)
    return finishing


# A move on a screen, the screen after it, and the values it picks from (None: no value; a list or
# an input widget offers one move per value, all with the move's weight).
Option = tuple[Move, str, Sequence[str] | None]


def _options(
    spec: AppSpec, screen: str, done: set[tuple[str, str]], visited: set[str], finishing: set[str]
) -> list[Option]:
    """Every move on `screen` that can still end on a terminal screen."""
    out: list[Option] = []
    for w in spec.screens[screen].widgets:
        if (screen, w.id) in done or w.kind == "text" or (w.goto and w.goto not in finishing):
            continue
        target = w.goto or screen
        if w.goto and spec.graph == "cyclic" and w.goto in visited:
            continue
        if w.kind in ("list", "input"):
            assert w.slot is not None
            if w.kind == "input" and not w.goto:
                continue
            out.append((Move(screen, w.id), target, spec.slots[w.slot]))
        elif w.kind == "toggle" or w.goto or w.sets:
            out.append((Move(screen, w.id), target, None))
    return out


def _choose(options: list[Option], coverage: Coverage, rng: random.Random) -> tuple[Move, str]:
    """One move, by coverage weight, as `rng.choices` would pick it from every move spelt out (one
    per list value) with one draw, without spelling them out: a 200,000-value list costs one
    multiplication, not 200,000 moves."""
    weights = [coverage.weight(move, target) for move, target, _ in options]
    sizes = [len(values) if values else 1 for _, _, values in options]
    cum = list(accumulate(w * size for w, size in zip(weights, sizes, strict=True)))
    drawn = rng.random() * cum[-1]
    i = bisect(cum, drawn, 0, len(cum) - 1)
    move, target, values = options[i]
    if not values:
        return move, target
    k = min(int((drawn - (cum[i - 1] if i else 0.0)) / weights[i]), len(values) - 1)
    return Move(move.screen, move.widget, values[k]), target


def sample_path(
    spec: AppSpec,
    rng: random.Random,
    coverage: Coverage,
    initial: dict[str, str],
    finishing: set[str] | None = None,
) -> SampledPath | str:
    """One random walk to a terminal screen, or why there is none (DEAD_END, TOO_SHORT, TOO_LONG)."""
    finishing = finishing if finishing is not None else finishing_screens(spec)
    screen, moves, state = spec.start, [], {}
    done: set[tuple[str, str]] = set()
    visited = {screen}
    current = dict(initial)
    cost = 1  # opening the app
    while cost < MAX_ACTIONS:
        options = _options(spec, screen, done, visited, finishing)
        at_terminal = spec.screens[screen].terminal
        if at_terminal and cost >= spec.min_actions and (not options or rng.random() < STOP_AT_TERMINAL):
            break
        if not options:
            return TOO_SHORT if at_terminal else DEAD_END
        move, target = _choose(options, coverage, rng)
        widget = spec.widget(move.screen, move.widget)
        if widget.kind == "toggle":
            assert widget.slot is not None
            on, off = spec.slots[widget.slot]
            value = off if current.get(widget.slot) == on else on
            move = Move(move.screen, move.widget, value)
            state[widget.slot] = current[widget.slot] = value
        elif widget.kind in ("list", "input"):
            assert widget.slot is not None and move.value is not None
            state[widget.slot] = current[widget.slot] = move.value
        for slot, value in widget.sets.items():
            state[slot] = current[slot] = value
        moves.append(move)
        cost += 3 if widget.kind == "input" else 1
        if widget.goto is None or widget.kind == "list":
            done.add((move.screen, move.widget))  # one pick per radio list or toggle
        screen = target
        visited.add(screen)
    else:
        return TOO_LONG
    path = SampledPath(spec.name, tuple(moves), state, screen)
    if not spec.screens[screen].terminal:
        return DEAD_END
    cost = path_cost(spec, path)
    if cost < spec.min_actions:
        return TOO_SHORT
    return TOO_LONG if cost > MAX_ACTIONS else path


def path_cost(spec: AppSpec, path: SampledPath) -> int:
    """Actions before any scrolling: open the app, a tap per move, tap + type + enter per input."""
    inputs = sum(1 for m in path.moves if spec.widget(m.screen, m.widget).kind == "input")
    return 1 + len(path.moves) + 2 * inputs


def goal_of(path: SampledPath, slots: list[str]) -> Goal:
    """The verifier's goal: end on the path's last screen with these of its slot values."""
    return Goal(app=path.app, screen=path.end, state={s: path.state[s] for s in slots if s in path.state})


def difficulty(actions: int, constraints: int) -> Difficulty:
    """easy: at most 4 actions and 2 constraints; hard: 9+ actions or 5+ constraints."""
    if actions >= 9 or constraints >= 5:
        return "hard"
    return "easy" if actions <= 4 and constraints <= 2 else "medium"
