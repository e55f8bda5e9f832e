"""The tuning and reporting halves: every MiniWoB++ task the project names is counted as looked at,
so no figure on it is reported as unseen."""

from __future__ import annotations

import re
from pathlib import Path

from bench.halves import LOOKED_AT, REPORTING, TUNING, app_half, task_half

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"miniwob:([a-z0-9]+(?:-[a-z0-9]+)*)")


def test_every_miniwob_task_the_project_names_is_tuning() -> None:
    named = set()
    for folder in ("bench", "docs", "tests", "evolve", "rollout", "critics", "curation", "flows"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md", ".yaml") and path.name != "test_halves.py":
                named |= set(NAMED.findall(path.read_text()))
    misspelt = {"click-buton", "click-chekboxes"}  # the tests of "did you mean"
    assert named - misspelt - LOOKED_AT == set(), "add them to bench.halves.LOOKED_AT"
    assert {app_half(f"miniwob:{t}") for t in LOOKED_AT} == {TUNING}


def test_the_split_is_by_the_hash_of_the_name_and_apps_of_our_own_are_tuning() -> None:
    halves = {task_half(f"task-{i}") for i in range(20)}
    assert halves == {TUNING, REPORTING}
    assert app_half("takeout") == TUNING and app_half("pantry") == TUNING  # built in, an example
    assert app_half("counter:add") == TUNING  # docs/examples/webapp's suite
    assert app_half("my-shop") == REPORTING and app_half("my_suite:checkout") == REPORTING
