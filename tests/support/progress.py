"""A progress display that keeps every call, for tests of what a stage counts."""

from __future__ import annotations

import threading


class Recorder:
    """A display that keeps every call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int | None]] = []
        self.lock = threading.Lock()

    def open(self, label: str, total: int | None) -> None:
        with self.lock:
            self.calls.append(("open", label, total))

    def advance(self, label: str, by: int) -> None:
        with self.lock:
            self.calls.append(("advance", label, by))

    def close(self, label: str) -> None:
        with self.lock:
            self.calls.append(("close", label, None))
