"""The terminal's progress lines: shards under one label share a line, totals added; a line goes
when its last track closes; off a terminal nothing is installed."""

from __future__ import annotations

import threading

import pytest
from rich.console import Console
from rich.progress import Progress

from flows.progress_view import _Lines, shown
from trajforge import progress


def test_tracks_under_one_label_share_a_line_with_their_totals_added() -> None:
    bar = Progress(console=Console(file=open("/dev/null", "w")))  # noqa: SIM115 (rich keeps it)
    lines = _Lines(bar)
    previous = progress.show(lines)
    try:
        with progress.track("rollouts", 4) as first:
            done = threading.Event()

            def shard() -> None:
                with progress.track("rollouts", 6) as second:
                    second(by=2)
                    done.set()

            with progress.track("judge"):
                assert [(t.description, t.total) for t in bar.tasks] == [("rollouts", 4), ("judge", None)]
            worker = threading.Thread(target=shard)
            worker.start()
            worker.join()
            assert done.is_set()
            first()
            (task,) = bar.tasks
            assert (task.description, task.total, task.completed) == ("rollouts", 10, 3)
        assert bar.tasks == []
    finally:
        progress.show(previous)


def test_off_a_terminal_nothing_is_shown(capsys: pytest.CaptureFixture[str]) -> None:
    with shown():  # pytest's captured stderr is not a terminal
        assert progress.show(None) is None
        with progress.track("rollouts", 2) as advance:
            advance()
    assert capsys.readouterr().err == ""
