"""A polite stop: SIGTERM (or Ctrl-C) asks the work to end at its next step boundary.

`stop_on_signals()` (the CLI's `evolve`) turns the first SIGTERM or SIGINT into a request; the
work checks `check_stop()` at its step boundaries (each rollout step, each stage, each model
request, each encoder training step) and unwinds with `Stopped`. What was stored stays stored,
and the next run resumes from there. A second signal ends the process at once.

`Stopped` is a `BaseException`, like `KeyboardInterrupt`: no retry loop, no `except Exception`
that records a failure, and no Prefect task retry takes it for a fault of the work.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
_requested = threading.Event()
_by: list[str] = []


class Stopped(BaseException):
    """The run was asked to stop (`by` names by what: a signal's name) and ended at a step boundary."""

    def __init__(self, by: str) -> None:
        super().__init__(f"stopped by {by}")
        self.by = by

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended; else 1."""
        number = getattr(signal.Signals, self.by, None)
        return 128 + number.value if number is not None else 1


def request_stop(by: str) -> None:
    _by.append(by)
    _requested.set()


def check_stop() -> None:
    """A step boundary: raise `Stopped` once a stop was requested."""
    if _requested.is_set():
        raise Stopped(_by[0] if _by else "request")


def clear_stop() -> None:
    _requested.clear()
    _by.clear()


@contextlib.contextmanager
def stop_on_signals(quiet: tuple[str, ...] = ("prefect",)) -> Iterator[None]:
    """SIGTERM and SIGINT request a stop (main thread only); a second one exits at once, 128 + its
    number. The loggers named in `quiet` are silenced once a stop is requested: what they would
    print is the stop's unwinding (crashed task runs), not news."""

    def on_signal(number: int, _frame: object) -> None:
        if _requested.is_set():
            os._exit(128 + number)
        for name in quiet:
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
        request_stop(signal.Signals(number).name)

    clear_stop()
    before = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def call_stoppable(fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` on a thread of its own, so the main thread, which alone receives signals, stays
    free to take them (Prefect would otherwise put its own SIGTERM handler in place for a flow
    that runs on the main thread, and unwind it from wherever it is)."""
    with ThreadPoolExecutor(1, thread_name_prefix="trajforge-main") as pool:
        future: Future[T] = pool.submit(fn, *args)
        while True:
            try:
                return future.result(timeout=0.5)
            except TimeoutError:
                continue
