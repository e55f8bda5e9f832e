"""A policy that hands some apps (or suite tasks) to another: the loop's trained policy, with round 1's
policy kept on the tasks where the trained one measured below it (`evolve.heldout`)."""

from __future__ import annotations

from collections.abc import Callable

from rollout.policies.base import Policy, PolicyOutput
from trajforge.domain import Observation, Query


class Routed:
    """`base` acts, except on a query of one of `apps`, where `other` does. Each episode makes a fresh
    policy of the one it needs, as the factories the runner calls do."""

    def __init__(
        self,
        base: Callable[[], Policy],
        other: Callable[[], Policy],
        apps: frozenset[str],
        name: str,
        version: int,
    ) -> None:
        self.name, self.version = name, version
        self._base, self._other, self.apps = base, other, apps
        self._acting: Policy | None = None

    def start(self, query: Query, seed: str, guidance: str | None = None, rollout: int = 0) -> None:
        self._acting = (self._other if query.app in self.apps else self._base)()
        self._acting.start(query, seed, guidance, rollout)

    async def act(self, observation: Observation) -> PolicyOutput:
        if self._acting is None:
            raise RuntimeError("Routed.act before start: the runner starts every episode first")
        return await self._acting.act(observation)
