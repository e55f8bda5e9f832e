"""Publishing seals nothing that should not be sealed: every check runs before a version is
claimed and a refusal writes nothing; a damaged stored shard is rewritten, not reused; verify
looks up screenshots too. On both databases."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, update

from publish.versions import SEALED_AFTER, PublishConfig, publish
from storage.datasets import list_versions, manifest, verify
from storage.db import session_factory, transaction
from storage.keys import blob_key, manifest_key
from storage.models import DatasetVersion, Round
from storage.objectstore import LocalObjectStore, open_object_store
from storage.rounds import REPORTS, record
from tests.support.smoke import smoke_round
from tests.support.spine import new_round
from trajforge.errors import DatasetError
from trajforge.settings import load_settings


@pytest.fixture
def spine(engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch):
    """One judged and curated round of the main job; sessions, the local store and its root."""
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    smoke_round(settings, queries_per_app=1, rollouts=1)
    store = open_object_store(settings)
    assert isinstance(store, LocalObjectStore)
    return session_factory(engine), store, settings.store_path


def _nothing_written(sessions, store) -> None:
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(DatasetVersion)) == 0
    assert list(store.list("shards/")) == [] and list(store.list("datasets/")) == []


def test_an_empty_database_has_nothing_to_publish(sessions, tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    with pytest.raises(DatasetError, match="the database has no rounds yet; run `trajforge evolve` first"):
        publish(sessions, store, "gui")
    _nothing_written(sessions, store)


def test_unknown_unjudged_and_uncurated_rounds_are_refused(spine) -> None:
    sessions, store, _ = spine
    with pytest.raises(DatasetError, match=r"no round 7 in the database \(rounds: 1\)"):
        publish(sessions, store, "gui", PublishConfig(rounds=(1, 7)))
    for stage in ("curate", "calibrate", "judge"):
        with transaction(sessions) as s:
            row = s.scalars(select(Round).where(Round.number == 1)).one()
            reports = dict(row.stats[REPORTS])
            reports.pop(stage)
            s.execute(update(Round).where(Round.id == row.id).values(stats={**row.stats, REPORTS: reports}))
        with pytest.raises(
            DatasetError,
            match=f"round 1 has not been through stage {stage}; run `trajforge stage {stage} --round 1` "
            "first, or leave it out with --rounds",
        ):
            publish(sessions, store, "gui")
    _nothing_written(sessions, store)


def test_rounds_without_samples_are_refused(spine) -> None:
    sessions, store, _ = spine
    new_round(sessions, policy="lost-policy", number=2)  # judged and curated, but every episode was lost
    for stage in SEALED_AFTER:
        record(sessions, 2, stage, {})
    with pytest.raises(DatasetError, match="nothing to publish: rounds 2 have no kept samples"):
        publish(sessions, store, "gui", PublishConfig(rounds=(2,)))
    _nothing_written(sessions, store)


def test_missing_screenshots_refuse_publish_and_fail_verify(spine) -> None:
    sessions, store, root = spine
    first = publish(sessions, store, "gui")
    assert verify(sessions, store, "gui", 1) == []  # sealed and intact
    images = sorted(Path(root).rglob("blobs/sha256/*/*/*.png"))
    victim = images[len(images) // 2]
    victim.unlink()
    problems = verify(sessions, store, "gui", 1)
    assert problems == [f"{blob_key(victim.stem)}: screenshot missing"]
    shards_before = sorted(store.list("shards/"))
    with pytest.raises(
        DatasetError, match=r"screenshots the samples refer to are missing .* then publish again"
    ):
        publish(sessions, store, "gui", PublishConfig(val_fraction=0.3))
    with sessions() as s:  # no second version, not even a draft; no new shard
        assert s.scalar(select(func.count()).select_from(DatasetVersion)) == 1
    assert sorted(store.list("shards/")) == shards_before and first.version == 1


def test_a_damaged_stored_shard_is_rewritten_not_reused(spine) -> None:
    sessions, store, root = spine
    publish(sessions, store, "gui")
    shard = manifest(sessions, store, "gui", 1).shards[0]
    path = Path(root) / shard.key
    path.write_bytes(path.read_bytes()[:100])  # truncated on disk
    assert any("differs from the manifest" in p for p in verify(sessions, store, "gui", 1))
    second = publish(sessions, store, "gui")  # the same rows: v1 holds them, and its shard is mended
    assert (second.version, second.unchanged, second.shards_repaired) == (1, True, 1)
    assert "1 corrupt stored shards rewritten" in second.render()
    assert verify(sessions, store, "gui", 1) == []
    third = publish(sessions, store, "gui", PublishConfig(val_fraction=0.3))  # other rows: a new version
    assert (third.version, third.unchanged, third.shards_repaired) == (2, False, 0)
    assert verify(sessions, store, "gui", 2) == []


def test_a_curated_round_that_was_never_extracted_is_refused(spine) -> None:
    """A round judged and curated, but whose samples were never extracted, is not sealed: the next
    version would silently hold none of its rows."""
    sessions, store, _ = spine
    publish(sessions, store, "gui")
    new_round(sessions, policy="another-policy", number=2)
    record(sessions, 2, "judge", {})
    record(sessions, 2, "curate", {})
    with pytest.raises(
        DatasetError, match=r"round 2 has not been through stage calibrate; run `trajforge stage calibrate"
    ):
        publish(sessions, store, "gui")
    assert [v.version for v in list_versions(sessions, "gui")] == [1]


def test_publishing_the_same_rows_again_seals_nothing(spine) -> None:
    sessions, store, _ = spine
    first = publish(sessions, store, "gui")
    again = publish(sessions, store, "gui")
    assert (again.version, again.unchanged, again.manifest_sha256) == (1, True, first.manifest_sha256)
    assert again.render().startswith("gui v1 unchanged: it already holds these")
    assert [v.version for v in list_versions(sessions, "gui")] == [1]


def test_a_missing_manifest_refuses_the_next_version(spine) -> None:
    sessions, store, root = spine
    publish(sessions, store, "gui")
    key = manifest_key("gui", 1)
    (Path(root) / key).unlink()
    with pytest.raises(
        DatasetError, match=rf"dataset gui v1: its manifest {key} is missing from the object store"
    ):
        publish(sessions, store, "gui", PublishConfig(val_fraction=0.3))
    assert [v.version for v in list_versions(sessions, "gui")] == [1]
