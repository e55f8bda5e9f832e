"""Progress on long work, shown by whoever runs it.

A stage counts what it works through with `track(label, total)` and calls the `advance` it gets
after each item. Nothing is shown unless the process installed a `Display` (`trajforge evolve`
installs one on a terminal), so library code pays one global read per track. Tracks that share a
label at the same time (the shards of one stage, on threads) add up on one line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

T = TypeVar("T")


class Display(Protocol):
    """Where tracks show: `open` a label (its total adds to an open one's; None: not counted),
    `advance` it, and `close` it once per `open`."""

    def open(self, label: str, total: int | None) -> None: ...

    def advance(self, label: str, by: int) -> None: ...

    def close(self, label: str) -> None: ...


_display: Display | None = None


def show(display: Display | None) -> Display | None:
    """Send every track from now on to `display` (None: to nowhere); returns the one it replaces."""
    global _display
    previous, _display = _display, display
    return previous


def _nothing(by: int = 1) -> None:
    return None


@contextmanager
def track(label: str, total: int | None = None) -> Iterator[Callable[..., None]]:
    """Work on `total` items (None: not counted, shown with its time only); yields `advance(by=1)`."""
    display = _display
    if display is None:
        yield _nothing
        return
    display.open(label, total)

    def advance(by: int = 1) -> None:
        display.advance(label, by)

    try:
        yield advance
    finally:
        display.close(label)


def counted(items: Iterable[T], label: str, total: int | None = None) -> Iterator[T]:
    """`items`, each counted under `label` when the loop comes back for the next."""
    with track(label, total) as advance:
        for item in items:
            yield item
            advance()


async def gather(label: str, aws: Iterable[Awaitable[T]]) -> list[T]:
    """`asyncio.gather(*aws)`, each counted under `label` as it finishes."""
    jobs = list(aws)
    with track(label, len(jobs)) as advance:

        async def counted(aw: Awaitable[T]) -> T:
            done = await aw
            advance()
            return done

        return list(await asyncio.gather(*(counted(aw) for aw in jobs)))
