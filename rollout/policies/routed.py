"""A policy that hands some apps (or suite tasks) to others: the loop's trained candidate, with each
task it lost on the held-out set left to the policy that did better there (`evolve.heldout`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rollout.policies.base import Policy, PolicyOutput
from trajforge.domain import Observation, Query


class Routed:
    """`base` acts, except on a query of an app in `others`, where that app's policy does. Each episode
    makes a fresh policy of the one it needs, as the factories the runner calls do."""

    def __init__(
        self,
        base: Callable[[], Policy],
        others: Mapping[str, Callable[[], Policy]],
        name: str,
        version: int,
    ) -> None:
        self.name, self.version = name, version
        self._base, self.others = base, dict(others)
        self._acting: Policy | None = None

    def start(self, query: Query, seed: str, guidance: str | None = None, rollout: int = 0) -> None:
        self._acting = self.others.get(query.app, self._base)()
        self._acting.start(query, seed, guidance, rollout)

    async def act(self, observation: Observation) -> PolicyOutput:
        if self._acting is None:
            raise RuntimeError("Routed.act before start: the runner starts every episode first")
        return await self._acting.act(observation)
