"""Environment suites: environments that bring their own tasks and their own reward.

An app spec is one kind of world: trajforge samples its queries from the spec's navigation DAG
and verifies them on state it models. A suite is the other kind: MiniWoB++'s task pages, a
user's web app, an android_world-style task suite. The environment generates each task's
instruction from a seed and computes the reward; trajforge only rolls out, records and learns.

A run names a suite's task as `SUITE:TASK` in `apps:` (`miniwob:click-button`), beside built-in
app names and spec paths; a web suite declared in YAML is `path/to/suite.yaml:TASK`. Suites are
found by name: the built-in ones, then the entry point group `trajforge.suites`, where a pip
package registers a callable that takes no argument and returns a `Suite`. A suite task is an
app named `SUITE:TASK` everywhere after (queries, episodes, datasets, reports).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

import yaml

from rollout.env import Environment
from storage.objectstore import ObjectStore
from trajforge.domain import Query
from trajforge.errors import ConfigError, yaml_problem
from trajforge.files import read_text
from trajforge.world.verify import VerifierResult

ENTRY_POINTS = "trajforge.suites"
SEP = ":"


class SuiteEnvironment(Environment, Protocol):
    """An environment of a suite: it also says a task's instruction for a seed (its generator)."""

    def describe(self, task: str, seed: int) -> tuple[str, dict[str, str]]:
        """The instruction and parameters the environment generates for `task` under `seed`."""
        ...


class Suite(Protocol):
    """A family of tasks with their own instructions, done signal and reward."""

    name: str
    # optional: the kind of device its tasks run on ("web" or "desktop"), stored with its tasks so an
    # export can refuse an action format that cannot state them (`trajforge.actions.misfit`)

    def check_task(self, task: str) -> None:
        """Raise `ConfigError`, naming the fix, when the suite has no task called `task`."""
        ...

    def environment(self, store: ObjectStore | None) -> SuiteEnvironment:
        """A fresh environment (one device slot's); `close()` ends it."""
        ...


SuiteFactory = Callable[[], Suite]


def _builtin() -> dict[str, SuiteFactory]:
    from rollout.suites.browsergym import BrowserGymSuite
    from rollout.suites.desktop import DesktopSuite
    from rollout.suites.miniwob import MiniWobSuite

    return {"miniwob": MiniWobSuite, "desktop": DesktopSuite.builtin, "browsergym": BrowserGymSuite}


def is_suite_ref(ref: str) -> bool:
    """`miniwob:click-button` and `shop.yaml:checkout` are suite tasks; `takeout` and
    `apps/my_app.yaml` are app specs."""
    return SEP in ref and not ref.endswith((".yaml", ".yml"))


def split_ref(ref: str) -> tuple[str, str]:
    """(suite, task) of a reference: a suite file's path ends at its `.yaml:`; any other suite's name
    is the part before the first colon, so a task may hold colons (`gym:my_pkg.envs:Shapes-v0`)."""
    cut = max(ref.rfind(".yaml" + SEP), ref.rfind(".yml" + SEP))
    if cut >= 0:
        suite, _, task = ref[cut:].partition(SEP)
        suite = ref[:cut] + suite
    else:
        suite, _, task = ref.partition(SEP)
    if not suite or not task:
        raise ConfigError(
            f"apps: {ref!r} is not a suite task; write it as SUITE:TASK, e.g. miniwob:click-button"
        )
    return suite, task


def resolve(ref: str) -> tuple[str, Suite, str]:
    """(app name, suite, task) of a suite task reference, the task checked against its suite.

    Raises:
        ConfigError: an unknown suite or task.
    """
    name, task = split_ref(ref)
    suite = get_suite(name)
    suite.check_task(task)
    return f"{suite.name}{SEP}{task}", suite, task


def probe_tasks(suites: dict[str, Suite]) -> None:
    """Each suite's environment words each of the run's tasks once (seed 0) before anything runs:
    a hook that throws is one configuration error here, not a device crash retried mid-round.

    Raises:
        ConfigError: the environment refused a task (for a web suite, a hook threw).
    """
    tasks: dict[str, tuple[Suite, list[str]]] = {}
    for app, suite in suites.items():
        tasks.setdefault(suite.name, (suite, []))[1].append(split_ref(app)[1])
    for suite, names in tasks.values():
        env = suite.environment(None)
        try:
            for task in names:
                env.describe(task, 0)
        finally:
            env.close()


def suite_names() -> list[str]:
    return sorted({*_builtin(), "gym", *(ep.name for ep in entry_points(group=ENTRY_POINTS))})


def read_suite_file(path: Path) -> Any:
    """The YAML a suite file holds (a web suite's or a gym suite's), or one ConfigError naming the fix."""
    text = read_text(path, "suite")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"suite file {path}: not valid YAML at {yaml_problem(exc)}; fix the syntax"
        ) from exc


def get_suite(name: str) -> Suite:
    """The suite registered under `name` (built in, or through the `trajforge.suites` entry points).

    Raises:
        ConfigError: no suite has that name.
    """
    if name.endswith((".yaml", ".yml")):
        from rollout.suites.gym import GymSuite
        from rollout.suites.webpage import WebSuite

        data = read_suite_file(Path(name))
        if isinstance(data, dict) and "gym" in data:
            return GymSuite.from_data(Path(name), data)
        if isinstance(data, dict) and "desktop" in data:
            from rollout.suites.desktop import DesktopSuite

            return DesktopSuite.from_data(Path(name), data)
        return WebSuite.from_data(Path(name), data)
    if name == "gym":
        from rollout.suites.gym import GymSuite

        return GymSuite()
    builtin = _builtin()
    if name in builtin:
        return builtin[name]()
    for ep in entry_points(group=ENTRY_POINTS):
        if ep.name == name:
            factory: SuiteFactory = ep.load()
            return factory()
    raise ConfigError(
        f"apps: no environment suite called {name!r}; known: {', '.join(suite_names())}. A package "
        f"adds one through the {ENTRY_POINTS!r} entry point group (docs/environments.md)"
    )


def task_query(app: str, seed: int, instruction: str, params: dict[str, str]) -> Query:
    """The query of one seed of a suite task: the environment's instruction, no path, no spec goal."""
    suite, task = split_ref(app)
    uid = hashlib.sha256(f"{app}\x00{seed}".encode()).hexdigest()
    return Query(
        uid=uid,
        app=app,
        instruction=instruction,
        slots={**params, "seed": str(seed)},
        goal={"app": app, "suite": suite, "task": task, "seed": seed},
        source="environment",
    )


def reward_verdict(done: bool, reward: float, reason: str | None = None) -> VerifierResult:
    """A suite episode's verdict from its environment's reward: a success when the environment ended
    the episode with a reward > 0 (`reason`, the environment's own words for it, goes in the detail)."""
    if not done:
        return VerifierResult(False, "not_done", "the environment did not end the episode", None)
    detail = f"reward {reward:g}" + (f" ({reason})" if reason else "")
    return VerifierResult(reward > 0, None if reward > 0 else "environment_reward", detail, reward)


def seed_of(query: Query) -> tuple[str, int]:
    """(task, seed) of a suite task's query."""
    try:
        return str(query.goal["task"]), int(query.goal["seed"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"query {query.uid[:12]} of {query.app!r} is not a suite task's query") from exc
