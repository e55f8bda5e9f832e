"""The published version the export tests read: one smoke round, published as `gui` v1."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from publish.versions import PublishConfig, publish
from storage.datasets import iter_rows, manifest
from storage.db import session_factory
from storage.objectstore import open_object_store
from tests.support.smoke import smoke_round
from trajforge.settings import load_settings


@pytest.fixture
def version(engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    smoke_round(settings, queries_per_app=1, rollouts=2)
    sessions, store = session_factory(engine), open_object_store(settings)
    publish(sessions, store, "gui", PublishConfig(chunk_rows=32, val_fraction=0.3))
    rows = {r["uid"]: r for r in iter_rows(store, manifest(sessions, store, "gui", 1))}
    return settings, sessions, store, rows
