"""What every environment suite shares: the suite protocol, task references (`SUITE:TASK`), a suite
task's query and its verdict from the environment's reward. `rollout.suites` finds suites by name."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Protocol

import yaml

from rollout.env import Environment
from storage.objectstore import ObjectStore
from trajforge.domain import Query
from trajforge.errors import ConfigError, yaml_problem
from trajforge.files import read_text
from trajforge.world.verify import VerifierResult

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


def read_suite_file(path: Path) -> Any:
    """The YAML a suite file holds (a web suite's or a gym suite's), or one ConfigError naming the fix."""
    text = read_text(path, "suite")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"suite file {path}: not valid YAML at {yaml_problem(exc)}; fix the syntax"
        ) from exc


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
