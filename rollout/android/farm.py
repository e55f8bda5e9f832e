"""Android devices for the runner: each registered serial is one device; the env is rebuilt after a crash."""

from __future__ import annotations

from rollout.android.env import AdbEnv
from rollout.pool import DevicePool, Lease
from storage.objectstore import ObjectStore


class AndroidFarm:
    """Args: packages maps app names to Android packages (the built-in apps use com.trajforge.NAME)."""

    def __init__(
        self, serials: list[str], packages: dict[str, str], adb: str = "adb", store: ObjectStore | None = None
    ) -> None:
        self.serials, self.packages, self.adb, self.store = serials, packages, adb, store

    def register(self, pool: DevicePool, count: int | None = None, prefix: str = "android") -> None:
        for serial in self.serials:
            pool.register(f"{prefix}-{serial}", "android", address=serial)

    def __call__(self, lease: Lease) -> AdbEnv:
        return AdbEnv(lease.address, self.packages, adb=self.adb, store=self.store)
