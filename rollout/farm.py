"""What the device farms of the local backends share: the apps they serve and how devices are registered."""

from __future__ import annotations

from rollout.pool import DevicePool
from rollout.sim.render import require_fonts
from storage.objectstore import ObjectStore
from trajforge.appspec import AppSpec, builtin_app_names, load_app
from trajforge.world.model import FaultConfig


class AppFarm:
    """Devices that serve app specs (simulated or in a browser), registered as `{prefix}-{i}`."""

    backend = "sim"
    prefix = "sim"
    address = "in-process"

    def __init__(
        self,
        apps: list[AppSpec] | None = None,
        store: ObjectStore | None = None,
        faults: FaultConfig | None = None,
    ) -> None:
        self.apps = apps or [load_app(n) for n in builtin_app_names()]
        require_fonts(self.apps)
        self.store = store
        self.faults = faults or FaultConfig()

    def register(self, pool: DevicePool, count: int) -> None:
        for i in range(count):
            pool.register(f"{self.prefix}-{i}", self.backend, address=self.address)
