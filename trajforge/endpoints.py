"""Which endpoint a call goes to, how many images it may carry, and which round pays for it.

A call's stage names its group: `policy` the rollouts, `critic.*` the critics, `bottleneck.*` the
thoughts' bottleneck measurement, every other stage (CSRS, thoughts, guidance, query synthesis) the
writer. Each group may have its own endpoint (`LLMSettings.for_group`).

A request never carries more images than its endpoint takes (`max_images`, vLLM's
`--limit-mm-per-prompt image=N`): the oldest are dropped (a policy's history screenshots come
first), and a critic whose views do not fit joins them side by side (`side_by_side`).

The round a call is charged to is the one the running stage works on (`charge_round`), so the
ledger (`llm_call.round_id`) adds up per round and stage without every caller passing it.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from PIL import Image

GROUP_OF_PREFIX = {"policy": "policy", "critic": "critics", "bottleneck": "bottleneck"}
_ROUND: ContextVar[int | None] = ContextVar("trajforge_round", default=None)


def stage_group(stage: str) -> str:
    """The stage group a call's stage belongs to (`policy`, `critics`, `writer`, `bottleneck`)."""
    return GROUP_OF_PREFIX.get(stage.split(".", 1)[0], "writer")


@contextmanager
def charge_round(round_id: int | None) -> Iterator[None]:
    """Every model call made inside (on this thread, and in the event loops it starts) is charged to
    `round_id`."""
    token = _ROUND.set(round_id)
    try:
        yield
    finally:
        _ROUND.reset(token)


def charged_round() -> int | None:
    return _ROUND.get()


def count_images(messages: list[dict[str, Any]]) -> int:
    return sum(
        1
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if part.get("type") == "image_url"
    )


def fit_images(messages: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """`messages` with at most `limit` images: the oldest go first, and a message left with no
    content at all (a history screenshot sent on its own, as UI-TARS sends them) goes with them."""
    extra = count_images(messages) - (limit or 0)
    if limit is None or extra <= 0:
        return messages
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and extra > 0:
            kept = []
            for part in content:
                if part.get("type") == "image_url" and extra > 0:
                    extra -= 1
                    continue
                kept.append(part)
            if not kept:
                continue
            message = {**message, "content": kept}
        out.append(message)
    return out


def fit_views(pngs: list[bytes], limit: int | None) -> tuple[list[bytes], bool]:
    """Views a critic compares, as at most `limit` images: consecutive views joined side by side
    where there are more than that (order kept, left to right). Whether any were joined."""
    if limit is None or len(pngs) <= limit:
        return pngs, False
    size, extra = divmod(len(pngs), limit)
    out, start = [], 0
    for i in range(limit):
        end = start + size + (i < extra)
        out.append(side_by_side(pngs[start:end]) if end - start > 1 else pngs[start])
        start = end
    return out, True


def side_by_side(pngs: list[bytes], gap: int = 16) -> bytes:
    """One PNG holding `pngs` left to right on white, each at its own size, tops aligned: views a
    critic compares, for an endpoint that takes fewer images than there are views."""
    images = [Image.open(io.BytesIO(p)).convert("RGB") for p in pngs]
    width = sum(i.width for i in images) + gap * (len(images) - 1)
    canvas = Image.new("RGB", (width, max(i.height for i in images)), "white")
    x = 0
    for image in images:
        canvas.paste(image, (x, 0))
        x += image.width + gap
    out = io.BytesIO()
    canvas.save(out, format="PNG")
    return out.getvalue()
