"""Screenshot features: ResNet (random tiny config, and loaded from a local path), the weights-free
fallbacks, and the cache that never featurises a known screenshot twice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from transformers import ResNetModel

from storage.features import FeatureStore, make_featurizer
from storage.objectstore import frame_reader
from trajforge.errors import ConfigError
from trajforge.features import PHashFeaturizer, ResNetFeaturizer, ThumbFeaturizer
from trajforge.settings import CurationSettings

from .conftest import TINY_RESNET


def _frames(replayed) -> tuple[list[str], list[bytes]]:
    store, runs = replayed
    hashes = list(dict.fromkeys(v.before for run in runs for v in run))
    return hashes, [frame_reader(store)(h) for h in hashes]


@pytest.mark.parametrize("featurizer", [ThumbFeaturizer(), PHashFeaturizer()], ids=["thumb", "phash"])
def test_fallback_features_are_unit_vectors_that_tell_screens_apart(featurizer, replayed) -> None:
    _, pngs = _frames(replayed)
    vecs = featurizer.embed(pngs)
    assert vecs.shape == (len(pngs), featurizer.dim) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert np.allclose(featurizer.embed(pngs[:1]), vecs[:1])  # deterministic
    sims = vecs @ vecs.T
    assert sims[np.triu_indices(len(pngs), 1)].min() < 0.9  # distinct screens are not all alike


def test_resnet_is_batch_invariant_and_loads_from_a_local_path(replayed, tmp_path: Path) -> None:
    _, pngs = _frames(replayed)
    one = ResNetFeaturizer.random(TINY_RESNET, batch_size=1)
    many = ResNetFeaturizer.random(TINY_RESNET, batch_size=8)
    a, b = one.embed(pngs[:6]), many.embed(pngs[:6])
    assert a.shape == (6, 16) and np.allclose(a, b, atol=1e-4)
    assert one.key == many.key  # same config and seed: one cache namespace
    one.model.save_pretrained(tmp_path / "resnet")
    loaded = make_featurizer(CurationSettings(featurizer="resnet", resnet_weights=str(tmp_path / "resnet")))
    assert isinstance(loaded, ResNetFeaturizer) and isinstance(loaded.model, ResNetModel)
    assert np.allclose(loaded.embed(pngs[:6]), a, atol=1e-4)


def test_resnet_without_usable_weights_is_one_clear_error_or_phash_until_trained(tmp_path: Path) -> None:
    # no weights given and no store to find a trained encoder in: the weights-free fallback
    assert isinstance(make_featurizer(CurationSettings(featurizer="resnet")), PHashFeaturizer)
    with pytest.raises(ConfigError, match=r"cannot load a ResNet checkpoint.*featurizer to phash"):
        make_featurizer(CurationSettings(featurizer="resnet", resnet_weights=str(tmp_path / "missing")))


class Counting:
    """A featuriser that records every screenshot it is asked to embed."""

    def __init__(self) -> None:
        self.inner = ThumbFeaturizer()
        self.key, self.dim = self.inner.key, self.inner.dim
        self.seen: list[bytes] = []

    def embed(self, images: list[bytes]) -> np.ndarray:
        self.seen += images
        return self.inner.embed(images)


def test_the_cache_never_featurises_a_known_hash(sessions, replayed) -> None:
    store, _ = replayed
    hashes, _ = _frames(replayed)
    counting = Counting()
    first = FeatureStore(sessions, counting, frame_reader(store), batch=4)
    got = first.vectors(hashes[:5] + hashes[:5] + hashes[2:7])  # repeats inside one request
    assert len(counting.seen) == 7 and set(got) == set(hashes[:7])
    assert first.stats.as_dict() == {
        "requested": 15,
        "unique": 7,
        "cached": 0,
        "computed": 7,
        "avoided": round(1 - 7 / 15, 4),
    }
    later = FeatureStore(sessions, counting, frame_reader(store))  # a later round, a new process
    again = later.vectors(hashes)
    assert len(counting.seen) == len(hashes)  # only the hashes never seen before were embedded
    assert later.stats.cached == 7 and later.stats.computed == len(hashes) - 7
    for h in hashes[:7]:
        assert np.array_equal(again[h], got[h])
