"""Error-recovery probes on every backend: the state is restored by replaying the prefix, the wrong
action is played, and only an escape seen to bring back the screen (with the task still solvable
from there, by the environment's own verifier or reward) counts."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator

import pytest

from querygen.pipeline import generate_queries
from rollout.env import Environment
from rollout.policies import NoisyOracle, OracleNoise
from rollout.recovery import BACK, probe
from rollout.sim.env import SimEnv
from rollout.suites import get_suite, task_query
from storage.objectstore import LocalObjectStore
from tests.conftest import service_missing
from trajforge.actions import Action, ActionKind, Screen, get_codec
from trajforge.appspec import builtin_app_names, load_app
from trajforge.domain import Observation, Query, StepView
from trajforge.recovery import RecoverySite
from trajforge.world.model import Move

APPS = [load_app(n) for n in builtin_app_names()]


def _chromium() -> None:
    from rollout.web.env import chromium_available

    if not chromium_available():
        service_missing("Chromium or Playwright missing (apt-get install chromium)")


def _web(store: LocalObjectStore) -> Environment:
    _chromium()
    from rollout.web.env import WebEnv

    return WebEnv(APPS, store=store)


@pytest.fixture(
    scope="module",
    params=["sim", pytest.param("web", marks=[pytest.mark.browser, pytest.mark.slow])],
)
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    store = LocalObjectStore(tmp_path_factory.mktemp("objects"))
    made = SimEnv(APPS, store=store) if request.param == "sim" else _web(store)
    yield made
    made.close()


def _wifi_query() -> Query:
    """A settings query that passes the Network screen on its way to joining a Wi-Fi network."""
    for seed in range(40):
        for q in generate_queries(load_app("settings"), 12, seed=seed).kept:
            if any(Move.from_json(m).widget == "networks" for m in q.path):
                return q
    raise AssertionError("no Wi-Fi query among the generated settings queries")


def _reference(env: Environment, query: Query) -> tuple[StepView, ...]:
    """The ground-truth path played on `env` without noise, recorded as a rollout's steps are."""
    policy = NoisyOracle(OracleNoise())
    policy.start(query, seed="reference")
    obs = env.reset(query)
    views = []
    for _ in range(30):
        out = asyncio.run(policy.act(obs))
        action = get_codec(out.format).parse(out.text, Screen(obs.width, obs.height))
        after = env.step(action)
        views.append(StepView.observed(action, obs, after))
        obs = after
        if action.kind == ActionKind.TERMINATE or after.done:
            break
    assert env.verify().success
    return tuple(views)


def _tap(view: StepView, text: str, kind: str | None = None) -> Action:
    element = next(e for e in view.elements if e["text"] == text and kind in (None, e.get("kind")))
    x1, y1, x2, y2 = element["bounds"]
    return Action(
        kind=ActionKind.CLICK, point=Screen(view.width, view.height).from_px((x1 + x2) / 2, (y1 + y2) / 2)
    )


def _site(query: Query, steps: tuple[StepView, ...], index: int, wrong: Action) -> RecoverySite:
    return RecoverySite(query, "ref", steps, index, wrong, "other", "diverged", index)


def _step_on(steps: tuple[StepView, ...], text: str) -> int:
    """The index of the step taken on the screen that shows `text`."""
    return next(i for i, v in enumerate(steps) if any(e["text"] == text for e in v.elements))


def test_a_wrong_screen_is_escaped_by_back(env: Environment) -> None:
    query = _wifi_query()
    steps = _reference(env, query)
    at = _step_on(steps, "Display")  # the top-level Settings screen; the reference opens Network
    result = probe(env, _site(query, steps, at, _tap(steps[at], "Display")))
    assert result.reason is None and result.tries == 1
    assert result.escape is not None and result.error is not None
    assert result.escape.action == BACK.model_dump(mode="json", exclude_none=True)
    assert result.escape.after == steps[at].before  # the screen of the step, observed again
    assert result.error.after not in (steps[at].before, steps[at].after)


def test_a_wrong_toggle_is_not_escaped_by_back_but_by_toggling_it_again(env: Environment) -> None:
    query = _wifi_query()
    steps = _reference(env, query)
    at = _step_on(steps, "Bluetooth")  # the Network screen; the reference opens Wi-Fi networks
    wrong = _tap(steps[at], "Bluetooth")
    result = probe(env, _site(query, steps, at, wrong))
    assert result.reason is None and result.tries == 2  # back left Bluetooth switched
    assert result.escape is not None and Action.model_validate(result.escape.action) == wrong
    assert result.escape.after == steps[at].before
    assert probe(env, _site(query, steps, at, wrong), max_escapes=1).reason == "escape_not_observed"


def test_what_is_not_an_error_or_cannot_be_restored_is_counted_with_its_reason(env: Environment) -> None:
    query = _wifi_query()
    steps = _reference(env, query)
    at = _step_on(steps, "Bluetooth")
    same = Action.model_validate(steps[at].action)
    assert probe(env, _site(query, steps, at, same)).reason == "not_an_error"
    empty = Action(kind=ActionKind.CLICK, point=(500, 950))  # below every element of the screen
    assert probe(env, _site(query, steps, at, empty)).reason == "error_without_new_screen"
    moved = dataclasses.replace(steps[at], before="0" * 64, elements=[])
    tampered = (*steps[:at], moved, *steps[at + 1 :])
    assert probe(env, _site(query, tampered, at, _tap(steps[at], "Bluetooth"))).reason == "restore_mismatch"


@pytest.fixture(scope="module")
def miniwob(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    _chromium()
    page = get_suite("miniwob").environment(LocalObjectStore(tmp_path_factory.mktemp("miniwob")))
    yield page
    page.close()


def _checkbox_reference(page: Environment, seed: int) -> tuple[Query, tuple[StepView, ...]]:
    """click-checkboxes played right by reading its instruction: tick the named boxes, Submit."""
    describe: Callable[[str, int], tuple[str, dict[str, str]]] = page.describe  # type: ignore[attr-defined]
    instruction, params = describe("click-checkboxes", seed)
    query = task_query("miniwob:click-checkboxes", seed, instruction, params)
    wanted = instruction.removeprefix("Select ").removesuffix(" and click Submit.").split(", ")
    obs = page.reset(query)
    views = []
    for name in [*[w for w in wanted if w != "nothing"], "Submit"]:
        view = StepView.observed(Action(kind=ActionKind.WAIT), obs, obs)
        action = _tap(view, name, "button" if name == "Submit" else "toggle")
        after = page.step(action)
        views.append(StepView.observed(action, obs, after))
        obs = after
    assert obs.done and page.verify().success
    return query, tuple(views)


@pytest.mark.browser
def test_miniwob_replays_by_seed_and_a_wrong_tick_is_escaped_by_unticking(miniwob: Environment) -> None:
    query, steps = _checkbox_reference(miniwob, 0)
    other = next(e["text"] for e in steps[0].elements if e["kind"] == "toggle" and e["text"] != "HF2")
    wrong = _tap(steps[0], other, "toggle")
    result = probe(miniwob, _site(query, steps, 0, wrong))
    assert result.reason is None and result.escape is not None
    assert Action.model_validate(result.escape.action) == wrong and result.tries == 2
    # Unticked again: the very pixels of the restored screen (whose tree matched the recorded step's).
    assert result.error is not None and result.escape.after == result.error.before != result.error.after
    assert probe(miniwob, _site(query, steps, 1, _tap(steps[1], "Submit"))).reason == "not_an_error"
    ends = _site(query, steps, 0, _tap(steps[0], "Submit"))
    assert probe(miniwob, ends).reason == "error_ends_episode"  # a wrong Submit ends the page's episode


class _CountingSim(SimEnv):
    resets = 0

    def reset(self, task: Query) -> Observation:
        self.resets += 1
        return super().reset(task)


def test_the_simulator_replays_a_prefix_once_then_restores_its_snapshot(tmp_path) -> None:
    env = _CountingSim(APPS, store=LocalObjectStore(tmp_path))
    query = _wifi_query()
    steps = _reference(env, query)
    at = _step_on(steps, "Bluetooth")
    env.resets = 0
    result = probe(env, _site(query, steps, at, _tap(steps[at], "Bluetooth")))
    assert result.reason is None and result.tries == 2 and env.resets == 1  # three restores, one replay
    assert result.escape is not None and result.escape.after == steps[at].before
