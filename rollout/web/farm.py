"""A farm of browsers for the runner: one Chromium page per leased slot, rebuilt after a crash."""

from __future__ import annotations

from rollout.pool import DevicePool, Lease
from rollout.sim.device import FaultConfig
from rollout.web.env import WebEnv
from storage.objectstore import ObjectStore
from trajforge.appspec import AppSpec, builtin_app_names, load_app


class WebFarm:
    def __init__(
        self,
        apps: list[AppSpec] | None = None,
        store: ObjectStore | None = None,
        faults: FaultConfig | None = None,
    ) -> None:
        self.apps = apps or [load_app(n) for n in builtin_app_names()]
        self.store = store
        self.faults = faults

    def register(self, pool: DevicePool, count: int, prefix: str = "chromium") -> None:
        for i in range(count):
            pool.register(f"{prefix}-{i}", "web", address="127.0.0.1")

    def __call__(self, lease: Lease) -> WebEnv:
        return WebEnv(self.apps, store=self.store, faults=self.faults)
