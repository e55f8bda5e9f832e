"""The terminal's view of `trajforge.progress`: a line per open track, with its count, the time
spent and an ETA, on standard error and only on a terminal. It leaves nothing behind, so the
lines printed between (the round lines) read as they do without it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from trajforge.progress import show, track


class _Lines:
    """A `trajforge.progress.Display` on a rich `Progress`: tracks open at once under one label
    (a stage's shards, on threads) share its line, their totals added."""

    def __init__(self, bar: Any) -> None:
        self._bar = bar
        self._open: dict[str, tuple[Any, int]] = {}  # label -> (rich task, tracks open)
        self._lock = threading.Lock()

    def open(self, label: str, total: int | None) -> None:
        with self._lock:
            if label not in self._open:
                self._open[label] = (self._bar.add_task(label, total=total), 1)
                self._bar.refresh()  # drawn now, not at the next tick: a quick stage shows too
                return
            task, n = self._open[label]
            self._open[label] = (task, n + 1)
            if total is not None:
                counted = next(t.total for t in self._bar.tasks if t.id == task)
                self._bar.update(task, total=(counted or 0) + total)

    def advance(self, label: str, by: int) -> None:
        with self._lock:
            entry = self._open.get(label)
        if entry is not None:
            self._bar.advance(entry[0], by)

    def close(self, label: str) -> None:
        with self._lock:
            task, n = self._open[label]
            if n > 1:
                self._open[label] = (task, n - 1)
                return
            del self._open[label]
        self._bar.remove_task(task)


@contextmanager
def shown() -> Iterator[None]:
    """Show every track opened inside (by this thread or any other) on the terminal."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    if not console.is_terminal:  # nothing at all, not even the empty line rich leaves
        yield
        return
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        previous = show(_Lines(bar))
        try:
            yield
        finally:
            show(previous)


@contextmanager
def progress_bar(label: str, total: int) -> Iterator[Callable[..., None]]:
    """One bar of `total` items, shown as `shown` does; yields `advance(by=1)`."""
    with shown(), track(label, total) as advance:
        yield advance
