"""Real simulator frames and rollouts for the curation tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import ResNetConfig

from querygen.pipeline import generate_queries
from rollout.sim.env import replay_reference
from storage.objectstore import LocalObjectStore
from trajforge.appspec import builtin_app_names, load_app
from trajforge.domain import Query, StepView

APPS = [load_app(n) for n in builtin_app_names()]
TINY_RESNET = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")


def sample_queries(app: str, n: int, seed: int = 1) -> list[Query]:
    spec = next(a for a in APPS if a.name == app)
    return list(generate_queries(spec, n, seed=seed).kept)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalObjectStore, list[list[StepView]]]:
    """Ground-truth replays of a few takeout and settings queries, frames in a local store."""
    store = LocalObjectStore(Path(tmp_path_factory.mktemp("frames")))
    queries = sample_queries("takeout", 3) + sample_queries("settings", 2)
    return store, [replay_reference(q, APPS, store) for q in queries]
