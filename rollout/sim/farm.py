"""A farm of simulated devices for the runner: one `SimEnv` per leased slot, rebuilt after a crash."""

from __future__ import annotations

import hashlib
import itertools
from functools import cached_property

from rollout.farm import AppFarm
from rollout.pool import Lease
from rollout.sim.env import SimEnv
from rollout.sim.render import FrameRenderer
from trajforge.actions import Screen
from trajforge.world.device import DEFAULT_SCREEN


class SimFarm(AppFarm):
    """Each build draws faults from its own seed, so an episode retried after a crash does not
    meet the same crash again (a real device would not either). Frames are encoded once for
    the whole farm.
    """

    screen: Screen = DEFAULT_SCREEN  # the phones' size (a benchmark may set a smaller one)

    @cached_property
    def renderer(self) -> FrameRenderer:
        return FrameRenderer()

    @cached_property
    def _builds(self) -> itertools.count[int]:
        return itertools.count()

    def __call__(self, lease: Lease) -> SimEnv:
        build = next(self._builds)
        seed = int(hashlib.sha256(f"{self.faults.seed}:{lease.key}:{build}".encode()).hexdigest()[:8], 16)
        return SimEnv(
            self.apps,
            store=self.store,
            screen=self.screen,
            faults=self.faults.model_copy(update={"seed": seed}),
            renderer=self.renderer,
        )
