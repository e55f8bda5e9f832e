"""A suite task's queries as the environment words them: a seed it words as nothing is dropped with
its reason, kept in `exclusion`, and the rest of the round goes on."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from rollout.suites.queries import NO_INSTRUCTION, environment_queries
from storage.models import Exclusion
from storage.models import Query as QueryRow
from storage.objectstore import ObjectStore


class _Worded:
    """An environment that words odd seeds as blank (as MiniWoB's natural-language tasks did
    before their utterance object was read)."""

    def describe(self, task: str, seed: int) -> tuple[str, dict[str, str]]:
        return ("  " if seed % 2 else f"Do {task} number {seed}", {})

    def close(self) -> None:
        pass


class _Suite:
    name = "worded"

    def check_task(self, task: str) -> None:
        pass

    def environment(self, store: ObjectStore | None) -> _Worded:
        return _Worded()


def test_a_seed_the_environment_words_as_nothing_is_dropped_with_its_reason(
    sessions: sessionmaker[Session], caplog: pytest.LogCaptureFixture
) -> None:
    app = "worded:sort"
    with caplog.at_level(logging.WARNING, logger="trajforge.suites"):
        made = environment_queries(sessions, {app: _Suite()}, {app: [0, 1, 2, 3]})  # type: ignore[dict-item]
    assert [q.instruction for q in made[app]] == ["Do sort number 0", "Do sort number 2"]
    assert "worded:sort: the environment gave no instruction for 2 seed(s)" in caplog.text
    with sessions() as s:
        assert len(s.scalars(select(QueryRow)).all()) == 2
        drops = s.scalars(select(Exclusion)).all()
    assert sorted((d.item_key, d.reason, d.stage) for d in drops) == [
        (f"{app}#1", NO_INSTRUCTION, "querygen"),
        (f"{app}#3", NO_INSTRUCTION, "querygen"),
    ]
