"""The screen encoder: GUI augmentations, self-supervised training on a small set of real
simulator screenshots, the checkpoint stored in the object store and found by dedup."""

from __future__ import annotations

import io
import json
import logging
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import sessionmaker
from typer.testing import CliRunner

from curation.augment import AUGMENTATIONS, augment, screen_kind
from curation.encoder import (
    EncoderSpec,
    train_encoder,
    train_store_encoder,
    write_checkpoint,
)
from flows.cli import app as cli
from storage.encoders import latest_encoder
from storage.features import FeatureStore, make_featurizer
from storage.models import Step
from storage.objectstore import LocalObjectStore, frame_reader, open_object_store
from tests.support.progress import Recorder
from trajforge import progress
from trajforge.domain import StepView
from trajforge.errors import ConfigError
from trajforge.features import PHashFeaturizer, ResNetFeaturizer

SMALL = EncoderSpec(
    width=32,
    height=64,
    hidden=(8, 16),
    depths=(1, 1),
    batch=8,
    steps=30,
    rows=2,
    bar_width=64,
    bar_height=8,
    bar_cells=3,
)


def _screens(replayed: tuple[LocalObjectStore, list[list[StepView]]]) -> list[bytes]:
    store, episodes = replayed
    frames = frame_reader(store)
    return list(dict.fromkeys(frames(h) for ep in episodes for s in ep for h in (s.before, s.after)))


def test_each_augmentation_keeps_the_screen_size_and_changes_pixels(replayed) -> None:
    screen = Image.open(io.BytesIO(_screens(replayed)[3])).convert("RGB").resize((64, 128))
    for op, _ in AUGMENTATIONS["phone"]:
        out = op(screen, random.Random(1))
        assert out.size == screen.size and out.mode == "RGB"
        assert np.abs(np.asarray(out, np.int16) - np.asarray(screen, np.int16)).sum() > 0, op.__name__
    assert augment(screen, random.Random(2)).size == screen.size


def test_pages_get_no_status_bar_and_the_budget_is_sized_to_the_screens(replayed) -> None:
    phone = Image.open(io.BytesIO(_screens(replayed)[3])).convert("RGB")
    page = phone.crop((0, 0, 160, 210))  # a MiniWoB++ task's size
    assert screen_kind([phone, phone, page]) == "phone" and screen_kind([page, page, phone]) == "page"
    assert "status_bar" in {op.__name__ for op, _ in AUGMENTATIONS["phone"]}
    assert "status_bar" not in {op.__name__ for op, _ in AUGMENTATIONS["page"]}
    spec = EncoderSpec()  # 6 views of each distinct screenshot, batch 48, 30 to 200 steps
    assert [spec.planned_steps(n) for n in (40, 400, 4000)] == [30, 50, 200]


def test_the_budget_counts_steps_so_a_clock_that_jumps_trains_the_same_encoder(
    replayed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No training decision reads the clock: with every clock jumping an hour a call (a machine so
    loaded that any wall-time budget would be spent at once), the same screenshots and seed give the
    same steps, losses and weights."""
    import time
    from dataclasses import replace

    spec, screens = replace(SMALL, steps=4, min_steps=4), _screens(replayed)[:12]
    model, report, bar = train_encoder(screens, spec, device="cpu")
    jumps = iter(range(0, 10**9, 3600))
    for name in ("perf_counter", "monotonic", "time"):
        monkeypatch.setattr(time, name, lambda: float(next(jumps)))
    again, slow, bar_again = train_encoder(screens, spec, device="cpu")
    monkeypatch.undo()
    assert slow.steps == report.steps == report.planned == 4 and slow.seconds >= 3600
    assert (slow.loss_first, slow.loss_last, bar_again) == (report.loss_first, report.loss_last, bar)
    weights, weights_again = model.state_dict(), again.state_dict()
    assert all(np.array_equal(weights[k].numpy(), weights_again[k].numpy()) for k in weights)


@pytest.mark.slow  # over 40 s of CPU on 2 cores: the fast tier stays under 15 min
def test_training_lowers_the_loss_and_the_checkpoint_loads_as_a_featurizer(replayed, tmp_path: Path) -> None:
    screens = _screens(replayed)
    shown = Recorder()
    previous = progress.show(shown)
    try:
        model, report, bar = train_encoder(screens, SMALL, device="cpu")
    finally:
        progress.show(previous)
    label = "encoder training steps"  # counted on a terminal, one step at a time
    assert shown.calls[0] == ("open", label, report.planned) and shown.calls[-1] == ("close", label, None)
    assert shown.calls.count(("advance", label, 1)) == report.steps
    assert report.images == len(screens) and report.steps == report.planned == SMALL.planned_steps(
        len(screens)
    )
    assert report.device == "cpu" and report.kind == "phone"
    assert report.loss_last < report.loss_first
    assert (bar.width, bar.height, bar.weight) == (64, 8, SMALL.bar_weight)
    assert len(bar.centre_screen) == 2 * 16 and len(bar.centre_bar) == 3 * 16  # rows or cells x channels
    write_checkpoint(model, SMALL, report, bar, tmp_path)
    featurizer = ResNetFeaturizer.load(str(tmp_path))
    assert (featurizer.size, featurizer.rows, featurizer.imagenet) == ((32, 64), 2, False)
    assert featurizer.bar == bar and featurizer.threshold == SMALL.threshold
    vectors = featurizer.embed(screens[:5])
    assert vectors.shape == (5, (2 + 3) * 16) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    # the screen and its app bar are each centred on the training screens' mean, then weighted
    screen, title = vectors[:, :32], vectors[:, 32:]
    share = np.linalg.norm(title, axis=1) / np.linalg.norm(screen, axis=1)
    assert np.allclose(share, SMALL.bar_weight, atol=1e-4)


def test_too_few_screenshots_is_one_clear_error(replayed) -> None:
    with pytest.raises(ConfigError, match="at least 8 distinct screenshots"):
        train_encoder(_screens(replayed)[:3], SMALL, device="cpu")


@pytest.mark.slow  # over 40 s of CPU on 2 cores: the fast tier stays under 15 min
def test_dedup_uses_the_stored_encoder_and_falls_back_to_phash_until_one_is_trained(
    engine: Engine,
    db_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from evolve.smoke import run_smoke_round
    from storage.db import session_factory
    from trajforge.settings import load_settings

    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    with caplog.at_level(logging.INFO, logger="trajforge.features"):
        # run here for real: the fallback's log line is checked, and a restored snapshot writes rows only
        report = run_smoke_round(settings, queries_per_app=1, rollouts=2)
    assert report.curation.featurizer == PHashFeaturizer.key  # nothing trained yet: the fallback, logged
    assert "no screen encoder trained on this store yet" in caplog.text

    sessions: sessionmaker = session_factory(engine)
    store = open_object_store(settings)
    frames = frame_reader(store)
    monkeypatch.setattr("curation.encoder.EncoderSpec", lambda **kw: SMALL)
    done = CliRunner().invoke(cli, ["curate", "train-encoder", "--device", "cpu"])
    assert done.exit_code == 0, done.output
    stored = latest_encoder(sessions)
    assert stored is not None
    assert stored.facts["training"]["steps"] == SMALL.planned_steps(stored.facts["training"]["images"])
    assert (
        f"{stored.facts['training']['steps']} steps (of" in done.output
        and f"stored encoder {stored.sha256[:16]}" in done.output
    )
    assert sorted(store.list(stored.prefix)) == [
        f"{stored.prefix}/{name}" for name in ("config.json", "model.safetensors", "trajforge_encoder.json")
    ]
    featurizer = make_featurizer(settings.curate, sessions, store)
    assert featurizer.key == f"resnet:{stored.sha256[:24]}" and featurizer.dim == (2 + 3) * 16
    with sessions() as s:
        hashes = list(s.scalars(select(Step.screenshot)))
    features = FeatureStore(sessions, featurizer, frames)
    assert len(features.vectors(hashes)) == len(set(hashes)) == stored.facts["training"]["images"]
    # the same weights saved again record nothing new
    assert train_store_encoder(sessions, store, frames, settings.curate)[0] == stored

    # dedup-eval measures the trained encoder on the user's pairs
    shots = []
    for i, sha in enumerate(dict.fromkeys(hashes)):
        (tmp_path / f"{i}.png").write_bytes(frames(sha))
        shots.append(f"{i}.png")
    pairs = tmp_path / "pairs.jsonl"
    rows = [
        {"a": shots[:3], "b": shots[:3], "duplicate": True},
        {"a": shots[:3], "b": shots[5:9], "duplicate": False},
    ]
    pairs.write_text("\n".join(json.dumps(r) for r in rows))
    done = CliRunner().invoke(cli, ["curate", "dedup-eval", "--pairs", str(pairs)])
    assert done.exit_code == 0, done.output
    assert f"featurizer {featurizer.key}" in done.output and "precision 1.00 recall 1.00" in done.output


def test_a_round_with_too_few_screenshots_keeps_phash_and_says_why(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from curation.encoder import round_encoder
    from storage.db import session_factory
    from tests.support.smoke import smoke_round
    from trajforge.settings import load_settings

    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    smoke_round(settings, queries_per_app=1, rollouts=1)
    sessions: sessionmaker = session_factory(engine)
    with sessions.begin() as s:  # every step of round 1 on one screen: nothing to contrast
        one = s.scalars(select(Step.screenshot).limit(1)).one()
        s.execute(update(Step).values(screenshot=one))
    store = open_object_store(settings)
    got = round_encoder(sessions, store, frame_reader(store), settings.curate, 2)
    assert got == {"featurizer": "phash", "source": "fallback", "reason": "too_few_screenshots"}
    assert latest_encoder(sessions) is None
