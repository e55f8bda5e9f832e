"""A farm of browsers for the runner: one Chromium page per leased slot, rebuilt after a crash."""

from __future__ import annotations

from rollout.farm import AppFarm
from rollout.pool import Lease
from rollout.web.env import WebEnv


class WebFarm(AppFarm):
    backend = "web"
    prefix = "chromium"
    address = "127.0.0.1"

    def __call__(self, lease: Lease) -> WebEnv:
        return WebEnv(self.apps, store=self.store, faults=self.faults)
