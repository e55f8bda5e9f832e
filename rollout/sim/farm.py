"""A farm of simulated devices for the runner: one `SimEnv` per leased slot, rebuilt after a crash."""

from __future__ import annotations

import hashlib
import itertools

from rollout.pool import DevicePool, Lease
from rollout.sim.device import FaultConfig
from rollout.sim.env import SimEnv
from rollout.sim.render import FrameRenderer
from storage.objectstore import ObjectStore
from trajforge.appspec import AppSpec, builtin_app_names, load_app


class SimFarm:
    """Builds simulated devices. Each build draws faults from its own seed, so an episode
    retried after a crash does not meet the same crash again (a real device would not either).
    """

    def __init__(
        self,
        apps: list[AppSpec] | None = None,
        store: ObjectStore | None = None,
        faults: FaultConfig | None = None,
    ) -> None:
        self.apps = apps or [load_app(n) for n in builtin_app_names()]
        self.store = store
        self.faults = faults or FaultConfig()
        self.renderer = FrameRenderer()  # shared: frames of the same state are encoded once
        self._builds = itertools.count()

    def register(self, pool: DevicePool, count: int, prefix: str = "sim") -> None:
        for i in range(count):
            pool.register(f"{prefix}-{i}", "sim", address="in-process")

    def __call__(self, lease: Lease) -> SimEnv:
        build = next(self._builds)
        seed = int(hashlib.sha256(f"{self.faults.seed}:{lease.key}:{build}".encode()).hexdigest()[:8], 16)
        return SimEnv(
            self.apps,
            store=self.store,
            faults=self.faults.model_copy(update={"seed": seed}),
            renderer=self.renderer,
        )
