"""Reads the AT-SPI element tree of one display's desktop session, as a small server.

Run by the desktop backend under the system Python, which has Debian's `python3-pyatspi` (the
project's venv does not): one line on stdin asks for the tree, one line of JSON on stdout answers
it. It imports nothing of trajforge, so it runs on any Python 3 with pyatspi.

A node is kept only while it is showing (a closed menu's items are not on screen, nor their
children), and is written as {role, name, text, bounds [x1, y1, x2, y2] in display pixels,
states, depth}. The backend turns these into trajforge's element form.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pyatspi  # type: ignore[import-not-found,unused-ignore]

STATES = {
    "checked": pyatspi.STATE_CHECKED,
    "focused": pyatspi.STATE_FOCUSED,
    "editable": pyatspi.STATE_EDITABLE,
    "selected": pyatspi.STATE_SELECTED,
    "enabled": pyatspi.STATE_ENABLED,
    "checkable": pyatspi.STATE_CHECKABLE,
    "pressed": pyatspi.STATE_PRESSED,
}
MAX_NODES = 2000
MAX_CHILDREN = 500
HIDDEN_RUN = 50
BUDGET_S = 5.0  # a read stops here with what it has (the backend gives up on a reader after 10 s)


def _text(node: Any) -> str | None:
    try:
        return str(node.queryText().getText(0, -1))
    except NotImplementedError:
        return None


def _walk(node: Any, depth: int, out: list[dict[str, Any]], deadline: float) -> bool:
    """Append `node` and its showing descendants; False when `node` is not showing."""
    if len(out) >= MAX_NODES or time.monotonic() > deadline:
        return True
    states = node.getState()
    if depth > 0 and not states.contains(pyatspi.STATE_SHOWING):
        return False
    try:
        ext = node.queryComponent().getExtents(pyatspi.DESKTOP_COORDS)
        bounds = [ext.x, ext.y, ext.x + ext.width, ext.y + ext.height]
    except NotImplementedError:
        bounds = None
    out.append(
        {
            "role": node.getRoleName(),
            "name": node.name or "",
            "text": _text(node),
            "bounds": bounds,
            "states": sorted(k for k, v in STATES.items() if states.contains(v)),
            "depth": depth,
        }
    )
    # A spreadsheet's table has millions of cells, nearly all off screen: its children are read only
    # until HIDDEN_RUN of them in a row are not showing, and at most MAX_CHILDREN of them.
    hidden = 0
    for index in range(min(node.childCount, MAX_CHILDREN)):
        child = node.getChildAtIndex(index)
        shown = child is not None and _walk(child, depth + 1, out, deadline)
        hidden = 0 if shown else hidden + 1
        if hidden >= HIDDEN_RUN:
            break
    return True


def tree() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + BUDGET_S
    for app in pyatspi.Registry.getDesktop(0):
        if app is None:
            continue
        try:
            _walk(app, 0, out, deadline)
        except Exception as exc:  # an app that quits mid-read: its nodes are gone, the rest stays
            out.append({"role": "error", "name": str(exc), "text": None, "bounds": None, "states": []})
    return out


def main() -> None:
    for _line in sys.stdin:
        try:
            reply: dict[str, Any] = {"nodes": tree()}
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
