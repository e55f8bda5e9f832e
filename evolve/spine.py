"""The spine a step works on (database sessions, object store, apps), opened once per process.

Steps take `Settings` (picklable) rather than open connections, so a Dask worker in
another process opens its own spine the first time it runs a step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from sqlalchemy.orm import Session, sessionmaker

from storage.apps import check_apps
from storage.db import engine_from_settings, session_factory, upgrade
from storage.objectstore import ObjectStore, frame_reader, open_object_store
from trajforge.appspec import AppSpec, load_apps
from trajforge.settings import Settings

_OPEN: dict[str, Spine] = {}
_LOCK = threading.Lock()


@dataclass
class Spine:
    settings: Settings
    sessions: sessionmaker[Session]
    store: ObjectStore

    @cached_property
    def apps(self) -> list[AppSpec]:
        """The run's apps (`apps:` in the config), each checked against the spec stored under its name."""
        apps = load_apps(self.settings.apps)
        check_apps(self.sessions, apps)
        return apps

    @cached_property
    def frames(self) -> Callable[[str], bytes]:
        return frame_reader(self.store)


def open_spine(settings: Settings) -> Spine:
    """The process's spine for these settings: the schema migrated and the store reached once."""
    key = settings.model_dump_json()
    with _LOCK:
        if key not in _OPEN:
            engine = engine_from_settings(settings)
            upgrade(engine)
            _OPEN[key] = Spine(settings, session_factory(engine), open_object_store(settings))
        return _OPEN[key]
