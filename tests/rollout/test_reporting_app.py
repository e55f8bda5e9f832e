"""The to-do app written for the reporting half (bench/apps/todo): every task can be done through the
element tree trajforge reports, its first deciding action ends it, and a wrong one is a failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.halves import REPORTING, app_half
from rollout.suites import task_query
from rollout.suites.webpage import PageEnv, WebSuite
from tests.rollout.test_suites import _need_chromium, _tap
from trajforge.actions import Action, ActionKind
from trajforge.domain import Observation
from trajforge.text import quoted

pytestmark = pytest.mark.browser
TODO = Path(__file__).resolve().parents[2] / "bench" / "apps" / "todo" / "suite.yaml"


@pytest.fixture(scope="module")
def todo() -> Iterator[PageEnv]:
    _need_chromium()
    env = WebSuite.from_yaml(TODO).environment(None)
    assert isinstance(env, PageEnv)
    yield env
    env.close()


def _start(env: PageEnv, task: str, seed: int) -> tuple[str, list[str], Observation]:
    """The instruction, its quoted values and the first screen of `task` at `seed`."""
    instruction, params = env.describe(task, seed)
    return instruction, quoted(instruction), env.reset(task_query(f"todo:{task}", seed, instruction, params))


def _el(obs: Observation, text: str) -> dict:
    return next(e for e in obs.elements or [] if e["text"] == text)


def _type(obs: Observation, field: str, text: str) -> Action:
    return _tap(obs, _el(obs, field)).model_copy(update={"kind": ActionKind.TYPE, "text": text})


@pytest.mark.parametrize("seed", [3, 11])
def test_every_task_is_done_through_the_element_tree(todo: PageEnv, seed: int) -> None:
    assert app_half("todo:add-task") == REPORTING  # written after the features were fixed
    _, (new,), obs = _start(todo, "add-task", seed)
    obs = todo.step(_type(obs, "New task", new))
    assert not obs.done and todo.step(_tap(obs, _el(obs, "Add"))).done and todo.verify().success

    _, (name,), obs = _start(todo, "complete-task", seed)
    assert todo.step(_tap(obs, _el(obs, name))).done and todo.verify().success  # the box's label

    _, (name,), obs = _start(todo, "delete-task", seed)
    assert todo.step(_tap(obs, _el(obs, f"Delete {name}"))).done and todo.verify().success

    _, _, obs = _start(todo, "show-done", seed)
    assert todo.step(_tap(obs, _el(obs, "Done"))).done and todo.verify().success

    _, _, obs = _start(todo, "clear-done", seed)
    assert todo.step(_tap(obs, _el(obs, "Clear done"))).done and todo.verify().success

    _, (old, new), obs = _start(todo, "rename-task", seed)
    obs = todo.step(_tap(obs, _el(obs, f"Edit {old}")))
    obs = todo.step(_type(obs, "New name", new))
    assert todo.step(_tap(obs, _el(obs, "Save"))).done and todo.verify().success


def test_the_first_wrong_deciding_action_ends_the_task_as_a_failure(todo: PageEnv) -> None:
    _, (name,), obs = _start(todo, "delete-task", 5)
    deletes = [e for e in obs.elements or [] if e["kind"] == "button" and e["text"].startswith("Delete ")]
    other = next(e for e in deletes if e["text"] != f"Delete {name}")
    assert todo.step(_tap(obs, other)).done
    verdict = todo.verify()
    assert not verdict.success and verdict.failed == "environment_reward" and "deleted" in verdict.detail

    _, _, obs = _start(todo, "show-done", 5)
    assert todo.step(_tap(obs, _el(obs, "Active"))).done and not todo.verify().success
