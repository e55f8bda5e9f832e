"""The oracle: a ground-truth path turned into canonical actions on a live device.

It plays the part of the human demonstrator (GUI-Owl §6.4 uses human or model
references): for each move it finds the widget on screen, scrolls until it is
visible, and taps, types or presses enter, exactly as a person would.
"""

from __future__ import annotations

from collections.abc import Iterator

from trajforge.actions.model import Action, ActionKind
from trajforge.world.device import SimDevice
from trajforge.world.model import Element, Move

MAX_SCROLLS = 20


class OracleError(Exception):
    """The path cannot be followed on this device (reason in `reason`)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _tap(device: SimDevice, element: Element) -> Action:
    return Action(kind=ActionKind.CLICK, point=device.size.from_px(*element.center))


def _find(device: SimDevice, move: Move) -> Element | None:
    want_id = f"app:{move.value}" if move.widget == "__open__" else None
    for e in device.elements():
        if (want_id and e.id == want_id) or (
            e.widget == move.widget and (e.value == move.value or e.kind != "list_item")
        ):
            return e
    return None


def _scroll_to(device: SimDevice, move: Move) -> Iterator[Action]:
    """Swipes that bring the move's element on screen (it may be above or below)."""
    for _ in range(MAX_SCROLLS):
        if _find(device, move) is not None:
            return
        target = next(
            (
                e
                for e in device.layout()
                if e.widget == move.widget and (e.value == move.value or e.kind != "list_item")
            ),
            None,
        )
        if target is None:
            raise OracleError(
                "element_missing", f"{move.screen}.{move.widget}={move.value!r} is not on the screen"
            )
        top, _ = device.viewport
        finger = "down" if target.bounds[1] < top else "up"  # finger up reveals what is below
        yield Action(kind=ActionKind.SWIPE, point=(500, 600), direction=finger)
    raise OracleError("element_unreachable", f"{move.widget}={move.value!r} stays off screen after scrolling")


def actions_for(device: SimDevice, app: str, moves: list[Move]) -> Iterator[Action]:
    """Yield the next action for the path; the caller applies each to `device` before asking again."""
    opening = Move("__launcher__", "__open__", app)
    element = _find(device, opening)
    if element is None:
        raise OracleError("element_missing", f"app {app!r} is not on the launcher")
    yield _tap(device, element)
    for move in moves:
        if device.state.screen != move.screen:
            raise OracleError(
                "off_path", f"expected screen {move.screen!r}, device shows {device.state.screen!r}"
            )
        yield from _scroll_to(device, move)
        element = _find(device, move)
        assert element is not None
        yield _tap(device, element)
        if element.kind == "input":
            yield Action(kind=ActionKind.TYPE, text=move.value or "")
            yield Action(kind=ActionKind.PRESS, key="enter")


def replay(device: SimDevice, app: str, moves: list[Move]) -> list[Action]:
    """Reset the device, follow the path, and return the actions taken."""
    device.reset()
    taken: list[Action] = []
    for action in actions_for(device, app, moves):
        device.act(action)
        taken.append(action)
    return taken
