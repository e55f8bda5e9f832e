"""The action drawn on its screenshot, as critics and annotators are shown it."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from PIL import Image, ImageDraw

from trajforge.actions import Action, ActionKind, Screen

if TYPE_CHECKING:
    from trajforge.domain import StepView


def draw_action(img: Image.Image, action: Action) -> None:
    """Circle the action's interaction point (a swipe: an arrow from start to end) in red, in place."""
    if action.point is None:
        return
    draw = ImageDraw.Draw(img)
    x, y = Screen(img.width, img.height).to_px(action.point)
    r = max(12, img.width // 30)
    draw.ellipse((x - r, y - r, x + r, y + r), outline="#ff0000", width=max(3, r // 4))
    if action.kind == ActionKind.SWIPE:
        ex, ey = Screen(img.width, img.height).to_px(action.swipe_end())
        draw.line((x, y, ex, ey), fill="#ff0000", width=max(3, r // 4))
        length = max(1.0, ((ex - x) ** 2 + (ey - y) ** 2) ** 0.5)
        ux, uy = (ex - x) / length, (ey - y) / length  # the arrowhead marks where the finger ends
        head = 2 * r
        draw.polygon(
            [
                (ex, ey),
                (ex - head * ux + head / 2 * uy, ey - head * uy - head / 2 * ux),
                (ex - head * ux - head / 2 * uy, ey - head * uy + head / 2 * ux),
            ],
            fill="#ff0000",
        )


def mark_point(png: bytes, action: Action, screen: Screen) -> bytes:
    """The screenshot with the action's interaction point circled (and a swipe's arrow) in red."""
    if action.point is None:
        return png
    img = Image.open(io.BytesIO(png)).convert("RGB")
    draw_action(img, action)
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=1)  # it is sent once; level 6 costs ~3x the CPU
    return buf.getvalue()


def episode_screens(views: Sequence[StepView], frames: Callable[[str], bytes]) -> list[bytes]:
    """What a model judging steps sees: the screen before each step, its interaction point circled
    (as it was, where the output did not parse), then the screen after the last step."""
    out = []
    for view in views:
        png = frames(view.before)
        out.append(png if view.act is None else mark_point(png, view.act, Screen(view.width, view.height)))
    return [*out, frames(views[-1].after)] if views else out
