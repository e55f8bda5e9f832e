"""Devices that play both app specs and suite tasks: each episode goes to the environment its
query's app needs, built on a slot's first episode of that kind and kept for the next ones.

A run with `apps: [miniwob:click-button, takeout]` leases the same device slots for both: a slot
holds a simulated phone (or a Chromium page, `evolve.backend: web`) for takeout and a Chromium
page per suite for MiniWoB's tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rollout.env import Environment
from rollout.farm import AppFarm
from rollout.pool import DevicePool, Lease
from rollout.suites.base import Suite, SuiteEnvironment, split_ref
from storage.objectstore import ObjectStore
from trajforge.actions import Action
from trajforge.domain import Observation, Query
from trajforge.world.verify import VerifierResult

log = logging.getLogger("trajforge.suites")


class RoutedEnv:
    """One device slot's environments, one per kind of task, routed by the query's app."""

    def __init__(
        self, base: Callable[[], Environment], suites: dict[str, Suite], store: ObjectStore | None
    ) -> None:
        self._base_factory, self.suites, self.store = base, suites, store
        self._envs: dict[str, Environment] = {}
        self._current: Environment | None = None

    def _for(self, app: str) -> Environment:
        suite = self.suites.get(app)
        key = suite.name if suite is not None else ""
        if key not in self._envs:
            self._envs[key] = suite.environment(self.store) if suite is not None else self._base_factory()
        return self._envs[key]

    def reset(self, task: Query) -> Observation:
        self._current = self._for(task.app)
        return self._current.reset(task)

    def step(self, action: Action) -> Observation:
        return self._env().step(action)

    def verify(self) -> VerifierResult:
        return self._env().verify()

    def _env(self) -> Environment:
        if self._current is None:
            raise RuntimeError("reset() the environment with a task first")
        return self._current

    def close(self) -> None:
        for env in self._envs.values():
            try:
                env.close()
            except Exception as exc:  # one environment's failed close must not keep the others open
                log.warning("closing %s: %s", type(env).__name__, exc)
        self._envs.clear()


class SuiteFarm:
    """A farm of app specs (`base`) extended with suite tasks (`suites`, by app name `SUITE:TASK`)."""

    def __init__(self, base: AppFarm, suites: dict[str, Suite]) -> None:
        self.base, self.suites = base, suites
        self.backend, self.prefix, self.address = base.backend, base.prefix, base.address

    def register(self, pool: DevicePool, count: int) -> None:
        self.base.register(pool, count)

    def __call__(self, lease: Lease) -> RoutedEnv:
        return RoutedEnv(lambda: self.base(lease), self.suites, self.base.store)  # type: ignore[operator]


def describe_tasks(
    suites: dict[str, Suite], wanted: dict[str, list[int]]
) -> dict[str, list[tuple[int, str, dict[str, str]]]]:
    """Each app's (seed, instruction, params) for the seeds wanted, from one environment per suite."""
    out: dict[str, list[tuple[int, str, dict[str, str]]]] = {}
    envs: dict[str, SuiteEnvironment] = {}
    try:
        for app, seeds in wanted.items():
            suite = suites[app]
            if suite.name not in envs:
                envs[suite.name] = suite.environment(None)
            task = split_ref(app)[1]
            out[app] = [(seed, *envs[suite.name].describe(task, seed)) for seed in seeds]
    finally:
        for env in envs.values():
            env.close()
    return out
