"""What every stage receives: the round's context (`evolve.spine.Spine` is the one the loop and
the CLI build). A stage package types against this, so it reaches the database, the object
store, the apps and the model gateways without importing the loop or a sibling stage."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from storage.models import Round
from storage.objectstore import ObjectStore
from trajforge.appspec import AppSpec
from trajforge.domain import Query, StepView
from trajforge.gateway import LLMGateway
from trajforge.recovery import Prober
from trajforge.settings import Settings
from trajforge.verdicts import Outcome


class RoundContext(Protocol):
    settings: Settings
    sessions: sessionmaker[Session]

    @property
    def store(self) -> ObjectStore: ...

    @property
    def apps(self) -> list[AppSpec]: ...

    @property
    def frames(self) -> Callable[[str], bytes]: ...

    def gateway(self, group: str) -> LLMGateway | None:
        """A model gateway for a stage group's calls; None where that group has no endpoint."""
        ...

    def round(self, number: int) -> Round:
        """Round `number`, which must have been started (ConfigError, naming the fix, otherwise)."""
        ...

    def outcomes(self, number: int) -> Mapping[int, Outcome]:
        """Round `number`'s episodes' decided outcomes by id (`critics.outcomes.round_outcomes`)."""
        ...

    def prober(self) -> Prober:
        """Error-recovery probes on one of the run's devices."""
        ...

    def demonstrator(self) -> Callable[[Query], list[StepView] | None]:
        """The reference path of a query replayed on its app, as curation's guidance takes it."""
        ...
