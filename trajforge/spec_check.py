"""An app spec's problems, found before anything is written: each names the file, the element and
the fix (`validate_spec`; `trajforge.spec_lint` has the warnings, which do not stop a spec)."""

from __future__ import annotations

import difflib
from collections import deque

from trajforge.spec_model import AppSpec
from trajforge.spec_refs import ROW_VALUE, SLOT_REF


def validate_spec(spec: AppSpec, source: str) -> list[str]:
    """Every problem of a parsed spec, each naming the file, the element and the fix."""
    found = _slot_problems(spec) + [p for sid in spec.screens for p in _screen_problems(spec, sid)]
    if not found:  # the graph is read only once its parts are sound
        found = _graph_problems(spec)
    return [f"app spec {source}: {where}: {what}" for where, what in found]


Problem = tuple[str, str]  # (where in the spec, what is wrong and the fix)
MAX_LIST_ROWS = 300  # the most values a list widget shows as rows


def _slot_problems(spec: AppSpec) -> list[Problem]:
    out: list[Problem] = []
    if spec.start not in spec.screens:
        names = ", ".join(spec.screens)
        out.append(("start", f"'{spec.start}' is not a screen (screens: {names}); set start to one of them"))
    for slot, value in spec.initial.items():
        if slot not in spec.slots:
            out.append((f"initial.{slot}", "is not a declared slot; add it under slots: or remove it"))
        elif value not in spec.slots[slot]:
            out.append((f"initial.{slot}", f"{value!r} is not among its values {spec.slots[slot]}"))
    for slot, values in spec.slots.items():
        if slot == ROW_VALUE:
            out.append((f"slots.{slot}", "'value' is reserved for a list row's own value; rename the slot"))
        if not values:
            out.append((f"slots.{slot}", "has no values; give at least one value or remove the slot"))
        elif len(set(values)) != len(values):
            out.append((f"slots.{slot}", "repeats a value; list each value once"))
    return out


def _screen_problems(spec: AppSpec, sid: str) -> list[Problem]:
    out: list[Problem] = []
    screen = spec.screens[sid]
    seen: set[str] = set()
    for widget in screen.widgets:
        where = f"screens.{sid}.widgets.{widget.id}"
        if widget.id in seen:
            out.append((where, "id is used twice on this screen; give each widget its own id"))
        seen.add(widget.id)
        if widget.goto is not None and widget.goto not in spec.screens:
            out.append(
                (
                    where,
                    f"goto '{widget.goto}' is not a screen ({_closest(widget.goto, spec)}); "
                    "fix it or add the screen",
                )
            )
        for ref in sorted(widget.slot_refs() - set(spec.slots)):
            out.append(
                (
                    where,
                    f"references slot '{ref}', which is not declared; add it under slots: or fix the name",
                )
            )
        if widget.kind == "list" and len(spec.slots.get(widget.slot or "", ())) > MAX_LIST_ROWS:
            out.append((where, _too_many_rows(widget.slot or "", len(spec.slots[widget.slot or ""]))))
        if widget.kind == "toggle" and widget.slot in spec.slots and len(spec.slots[widget.slot]) != 2:
            out.append(
                (where, f"toggles slot '{widget.slot}', which needs exactly 2 values (e.g. [on, off])")
            )
        for slot, value in widget.sets.items():
            if slot in spec.slots and value not in spec.slots[slot]:
                out.append(
                    (where, f"sets {slot}={value!r}, which is not among its values {spec.slots[slot]}")
                )
    for intent in screen.intents:
        for ref in sorted(set(SLOT_REF.findall(intent)) - set(spec.slots)):
            out.append((f"screens.{sid}.intents", f"references slot '{ref}', which is not declared"))
    return out


def _too_many_rows(slot: str, rows: int) -> str:
    return (
        f"lists slot '{slot}' as {rows:,} rows; a list holds at most "
        f"{MAX_LIST_ROWS} (a row further down takes dozens of swipes to reach, past what a task and the "
        "sampler handle): split the values over several lists or screens, or make it an input (typed "
        "values have no limit)"
    )


def _closest(name: str, spec: AppSpec) -> str:
    """The screens a wrong name most likely meant (all of them, when there are few)."""
    if len(spec.screens) <= 12:
        return f"screens: {', '.join(spec.screens)}"
    close = difflib.get_close_matches(name, list(spec.screens), n=3)
    return f"did you mean {', '.join(close)}?" if close else f"the spec has {len(spec.screens)} screens"


def _graph_problems(spec: AppSpec) -> list[Problem]:
    out: list[Problem] = []
    if spec.graph == "dag" and (cycle := _find_cycle(spec)):
        out.append(
            ("screens", f"goto edges form a cycle {' -> '.join(cycle)}; remove one edge or set graph: cyclic")
        )
    reachable = _reachable(spec)
    for sid in spec.screens:
        if sid not in reachable:
            out.append(
                (f"screens.{sid}", f"is unreachable from start '{spec.start}'; add a goto to it or remove it")
            )
    if not any(s.terminal for s in spec.screens.values()):
        out.append(
            ("screens", "no screen is terminal, so no task can end; mark at least one screen terminal: true")
        )
    return out


def _reachable(spec: AppSpec) -> set[str]:
    seen, todo = {spec.start}, deque([spec.start])
    while todo:
        for w in spec.screens[todo.popleft()].widgets:
            if w.goto and w.goto not in seen:
                seen.add(w.goto)
                todo.append(w.goto)
    return seen


def _find_cycle(spec: AppSpec) -> list[str]:
    """A cycle of goto edges as screen ids (first repeated at the end), or [] for a DAG.

    Depth-first with an explicit stack: a chain of thousands of screens needs no recursion.
    """
    graph: dict[str, list[str]] = {
        sid: [w.goto for w in s.widgets if w.goto] for sid, s in spec.screens.items()
    }
    state: dict[str, int] = {}  # 1 on the path, 2 done
    for root in graph:
        if root in state:
            continue
        path, nexts = [root], [iter(graph[root])]
        state[root] = 1
        while path:
            nxt = next(nexts[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                nexts.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in state and nxt in graph:
                state[nxt] = 1
                path.append(nxt)
                nexts.append(iter(graph[nxt]))
    return []
