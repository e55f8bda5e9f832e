"""Progress tracks: nothing is shown without a display; tracks under one label add up; counted
loops and gathers advance once per item."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.support.progress import Recorder
from trajforge import progress


@pytest.fixture
def shown() -> Iterator[Recorder]:
    recorder = Recorder()
    previous = progress.show(recorder)
    yield recorder
    progress.show(previous)


def test_without_a_display_a_track_costs_nothing_and_shows_nothing() -> None:
    assert progress.show(None) is None
    with progress.track("rollouts", 3) as advance:
        advance()
    assert list(progress.counted(range(3), "rows")) == [0, 1, 2]


def test_a_track_opens_advances_and_closes_even_on_an_error(shown: Recorder) -> None:
    with pytest.raises(RuntimeError), progress.track("judging episodes", 2) as advance:
        advance()
        advance(by=3)
        raise RuntimeError("the stage failed")
    assert shown.calls == [
        ("open", "judging episodes", 2),
        ("advance", "judging episodes", 1),
        ("advance", "judging episodes", 3),
        ("close", "judging episodes", None),
    ]


def test_counted_advances_after_each_item_and_closes_at_the_end(shown: Recorder) -> None:
    seen = []
    for item in progress.counted(["a", "b"], "dataset shards"):
        seen.append((item, len([c for c in shown.calls if c[0] == "advance"])))
    assert seen == [("a", 0), ("b", 1)]
    assert shown.calls[0] == ("open", "dataset shards", None)
    assert shown.calls[-1] == ("close", "dataset shards", None)


def test_gather_keeps_order_and_counts_every_awaitable(shown: Recorder) -> None:
    async def late(n: int) -> int:
        await asyncio.sleep(0.01 * (3 - n))
        return n

    assert asyncio.run(progress.gather("thoughts written", (late(n) for n in range(3)))) == [0, 1, 2]
    assert shown.calls.count(("advance", "thoughts written", 1)) == 3
    assert shown.calls[0] == ("open", "thoughts written", 3)
