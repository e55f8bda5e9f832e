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

from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

from rollout.suites.base import (
    SEP,
    Suite,
    SuiteEnvironment,
    is_suite_ref,
    read_suite_file,
    reward_verdict,
    seed_of,
    split_ref,
    task_query,
)
from trajforge.errors import ConfigError

__all__ = [
    "SEP",
    "Suite",
    "SuiteEnvironment",
    "get_suite",
    "is_suite_ref",
    "probe_tasks",
    "read_suite_file",
    "resolve",
    "reward_verdict",
    "seed_of",
    "split_ref",
    "suite_names",
    "task_query",
]
ENTRY_POINTS = "trajforge.suites"
SuiteFactory = Callable[[], Suite]


def _builtin() -> dict[str, SuiteFactory]:
    from rollout.suites.browsergym import BrowserGymSuite
    from rollout.suites.desktop import DesktopSuite
    from rollout.suites.miniwob import MiniWobSuite

    return {"miniwob": MiniWobSuite, "desktop": DesktopSuite.builtin, "browsergym": BrowserGymSuite}


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
