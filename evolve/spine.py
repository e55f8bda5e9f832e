"""The spine a step or command works on (database sessions, object store, apps, the model
gateway), opened once per process: every command and step goes through `open_spine`.

Steps take `Settings` (picklable) rather than open connections, so a Dask worker in
another process opens its own spine the first time it runs a step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from critics.outcomes import round_outcomes
from rollout.loop import open_prober, suite_round_queries
from rollout.sim.env import demonstrator
from rollout.suites import Suite, is_suite_ref, resolve, split_ref
from storage.apps import check_apps, round_apps
from storage.db import engine_from_settings, session_factory, upgrade
from storage.llm_cache import build_gateway
from storage.models import Round
from storage.objectstore import ObjectStore, frame_reader, open_object_store
from trajforge.appspec import AppSpec, load_apps
from trajforge.domain import Query, StepView
from trajforge.errors import ConfigError
from trajforge.gateway import LLMGateway
from trajforge.recovery import Prober
from trajforge.settings import Settings
from trajforge.verdicts import Outcome

_OPEN: dict[str, Spine] = {}
_LOCK = threading.Lock()


@dataclass
class Spine:
    settings: Settings
    sessions: sessionmaker[Session]

    @cached_property
    def store(self) -> ObjectStore:
        """The object store, reached on first use: commands that only read the database never touch it."""
        return open_object_store(self.settings)

    @cached_property
    def apps(self) -> list[AppSpec]:
        """The run's app specs (`apps:` in the config), each checked against the spec stored under its
        name; none where `apps:` names only suite tasks, every built-in one where it names nothing."""
        refs = [r for r in self.settings.apps if not is_suite_ref(r)]
        apps = load_apps(refs) if refs or not self.settings.apps else []
        check_apps(self.sessions, apps)
        return apps

    @cached_property
    def suites(self) -> dict[str, Suite]:
        """The run's suite tasks (`run_suites`)."""
        return run_suites(self.settings.apps)

    @cached_property
    def frames(self) -> Callable[[str], bytes]:
        return frame_reader(self.store)

    def gateway(self, group: str) -> LLMGateway | None:
        """A model gateway for a stage group's calls (None where that group has no endpoint); build
        one per event loop."""
        return build_gateway(self.settings.llm, self.sessions, group)

    def round(self, number: int) -> Round:
        """Round `number`, which `trajforge evolve` must have started."""
        with self.sessions() as s:
            row = s.scalars(select(Round).where(Round.number == number)).first()
        if row is None:
            raise ConfigError(f"round {number} has not been started; run `trajforge evolve` to start it")
        return row

    def outcomes(self, number: int) -> Mapping[int, Outcome]:
        return round_outcomes(self.sessions, self.round(number).id, self.settings.critics)

    def prober(self) -> Prober:
        return open_prober(self)

    def suite_queries(self, rnd: Round) -> list[str]:
        return suite_round_queries(self, rnd)

    def demonstrator(self) -> Callable[[Query], list[StepView] | None]:
        return demonstrator(self.apps, self.store)


class RoundApps(Spine):
    """The spine of a command run on a stored round (`trajforge critics run`, `curate`): the
    configured apps, then every other app stored in the database, so a round rolled out from a
    spec file is judged and curated with no config (`storage.apps.round_apps`)."""

    @cached_property
    def apps(self) -> list[AppSpec]:
        return round_apps(self.sessions, load_apps(self.settings.apps))


def new_spine(settings: Settings) -> Spine:
    """A spine of its own: the schema migrated, the store reached on first use."""
    engine = engine_from_settings(settings)
    upgrade(engine)
    return Spine(settings, session_factory(engine))


def run_suites(apps: list[str]) -> dict[str, Suite]:
    """The suite tasks (`SUITE:TASK`) of `apps`, by app name, each checked against its suite.

    Raises:
        ConfigError: an unknown suite or task, or two suite files with the same `name:` (their
            tasks would share one page per device).
    """
    out: dict[str, Suite] = {}
    source: dict[str, str] = {}  # suite name -> the suite part of the first ref naming it
    for ref in apps:
        if is_suite_ref(ref):
            app, suite, _ = resolve(ref)
            given = split_ref(ref)[0]
            given = str(Path(given).resolve()) if given.endswith((".yaml", ".yml")) else given
            if source.setdefault(suite.name, given) != given:
                raise ConfigError(
                    f"apps: {source[suite.name]} and {given} are both suite {suite.name!r}; give one of "
                    "them another `name:` (a suite's tasks share its page on each device)"
                )
            out[app] = suite
    return out


def check_run_apps(settings: Settings) -> None:
    """Every spec file and suite task `apps:` names loads and checks (a desktop task's strings
    render, its paths stay in its home), before anything of the home is made.

    Raises:
        ConfigError, SpecError: the first that does not, in one line naming it.
    """
    load_apps([ref for ref in settings.apps if not is_suite_ref(ref)])
    run_suites(settings.apps)


def open_spine(settings: Settings) -> Spine:
    """The process's spine for these settings, opened once (`new_spine`): a Prefect task gets the
    settings, which pickle, and finds the spine its process opened for them."""
    key = settings.model_dump_json()
    with _LOCK:
        if key not in _OPEN:
            _OPEN[key] = new_spine(settings)
        return _OPEN[key]


def round_context(settings: Settings) -> RoundApps:
    """A `RoundApps` spine on the process's database connection for these settings."""
    return RoundApps(settings, open_spine(settings).sessions)
