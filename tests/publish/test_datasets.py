"""Versioned datasets on both databases and both object stores: immutability, concurrency,
reproducibility, shard reuse, diff and verify."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import Engine, delete, select, update

from publish import versions as publishing
from publish.shards import split_of
from publish.versions import PublishConfig, publish
from storage.datasets import diff, list_versions, manifest, verify
from storage.db import session_factory, transaction
from storage.models import DatasetVersion, Sample, VersionShard
from storage.objectstore import LocalObjectStore, ObjectStore, S3ObjectStore, open_object_store
from tests.support.smoke import smoke_round
from trajforge.errors import SealedVersion, UnknownVersion, VersionConflict
from trajforge.settings import load_settings

CONFIG = PublishConfig(chunk_rows=32)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def spine(request, engine: Engine, db_url: str, tmp_path, monkeypatch: pytest.MonkeyPatch):
    """Two curated rounds of the main job; sessions and a store of either kind."""
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    smoke_round(settings, queries_per_app=1, rollouts=2)
    smoke_round(settings, queries_per_app=1, rollouts=2)
    store: ObjectStore
    if request.param == "s3":
        store = S3ObjectStore.connect(request.getfixturevalue("s3_settings"))
    else:
        store = LocalObjectStore(tmp_path / "objects")
    copy_screenshots(settings, store)
    return session_factory(engine), store


def copy_screenshots(settings, store: ObjectStore) -> None:
    """The rounds' screenshots move into the store under test (publish checks every one is there)."""
    rounds = open_object_store(settings)
    for key in rounds.list("blobs/"):
        if not store.exists(key):
            store.put(key, rounds.get(key))


def test_a_version_is_sealed_verified_and_never_changes(spine) -> None:
    sessions, store = spine
    report = publish(sessions, store, "gui", CONFIG)
    assert report.version == 1 and report.rows > 0 and report.shards > 1
    man = manifest(sessions, store, "gui", 1)
    assert man.rows == sum(s.rows for s in man.shards) == report.rows
    assert man.lineage.rounds == [1, 2] and man.lineage.critics
    (ref,) = list_versions(sessions, "gui")
    assert man.body() == store.get(str(ref.manifest_key))  # the typed manifest is the very bytes stored
    assert verify(sessions, store, "gui", 1) == []
    with pytest.raises(SealedVersion, match="publish a new version"), transaction(sessions) as s:
        s.execute(update(DatasetVersion).where(DatasetVersion.version == 1).values(config_hash="x"))
    with pytest.raises(SealedVersion), transaction(sessions) as s:
        s.execute(delete(VersionShard))
    with pytest.raises(SealedVersion), transaction(sessions) as s:
        s.add(VersionShard(version_id=1, shard_id=1))  # slipping a shard into a sealed version
    assert manifest(sessions, store, "gui", 1) == man
    with pytest.raises(UnknownVersion, match="has no version 7"):
        manifest(sessions, store, "gui", 7)


def test_splits_are_by_query_without_leakage(spine) -> None:
    sessions, store = spine
    publish(sessions, store, "gui", PublishConfig(chunk_rows=32, val_fraction=0.3))
    man = manifest(sessions, store, "gui", 1)
    from storage.datasets import iter_rows

    by_split: dict[str, set[str]] = {"train": set(), "val": set()}
    for row in iter_rows(store, man):
        by_split[row["split"]].add(row["query"])
        assert row["split"] == split_of(row["query"], 0.3)
    assert by_split["train"] and by_split["val"] and not by_split["train"] & by_split["val"]


def test_rebuilding_from_the_same_inputs_gives_the_same_manifest_hash(spine, tmp_path) -> None:
    sessions, store = spine
    first = publish(sessions, store, "gui", CONFIG)
    elsewhere = LocalObjectStore(tmp_path / "rebuild")  # the same inputs, a fresh object store
    for key in store.list("blobs/"):
        elsewhere.put(key, store.get(key))
    again = publish(sessions, elsewhere, "gui-rebuild", CONFIG)
    a, b = manifest(sessions, store, "gui", 1), manifest(sessions, elsewhere, "gui-rebuild", 1)
    assert a.shards == b.shards and a.lineage == b.lineage
    assert a.model_copy(update={"dataset": "x"}) == b.model_copy(
        update={"dataset": "x"}
    )  # only the name differs
    second = publish(sessions, store, "gui", CONFIG)  # nothing changed: every shard reused
    assert second.shards_reused == second.shards == first.shards and again.rows == first.rows


def test_a_new_version_reuses_unchanged_shards_and_diffs_by_category_and_reason(spine) -> None:
    sessions, store = spine
    publish(sessions, store, "gui", CONFIG)
    with transaction(sessions) as s:  # curation drops some samples of round 2 after the fact
        victims = s.scalars(
            select(Sample.uid)
            .where(Sample.round_id == 2, Sample.status == "kept")
            .order_by(Sample.uid)
            .limit(5)
        ).all()
        s.execute(
            update(Sample).where(Sample.uid.in_(victims)).values(status="dropped", reason="near_duplicate")
        )
    smoke_round(load_settings(), queries_per_app=1, rollouts=1)  # and a new round arrives
    copy_screenshots(load_settings(), store)
    report = publish(sessions, store, "gui", CONFIG)
    assert report.version == 2 and 0 < report.shards_reused < report.shards
    d = diff(sessions, store, "gui", 1, 2)
    assert sum(d.removed.values()) == 5 and d.removed_reasons == {"near_duplicate": 5}
    assert sum(d.added.values()) > 0 and not d.changed and d.shared_shards == report.shards_reused
    assert (parent := manifest(sessions, store, "gui", 2).parent) and parent.version == 1


def test_verify_finds_a_corrupted_shard(spine) -> None:
    sessions, store = spine
    publish(sessions, store, "gui", CONFIG)
    shard = manifest(sessions, store, "gui", 1).shards[0]
    store.put(shard.key, b"not parquet")
    problems = verify(sessions, store, "gui", 1)
    assert len(problems) == 1 and shard.key in problems[0] and "differs" in problems[0]


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)  # real concurrency: SQLite serialises writers
def test_racing_publishers_one_wins_the_other_gets_a_clear_conflict(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    smoke_round(load_settings(), queries_per_app=1, rollouts=1)
    sessions = session_factory(engine)
    store = open_object_store(load_settings())
    both_staged, loser_done = threading.Barrier(2), threading.Event()
    claim = publishing._claim

    def racing_claim(*args: Any, **kwargs: Any) -> Any:
        """Both claim at once, and the winner seals only after the loser tried: a race on a
        loaded machine is still a race."""
        both_staged.wait(timeout=120)
        try:
            won = claim(*args, **kwargs)
        except VersionConflict:
            loser_done.set()
            raise
        loser_done.wait(timeout=120)
        return won

    monkeypatch.setattr(publishing, "_claim", racing_claim)
    results: list[object] = []

    def racer(config: PublishConfig) -> None:
        try:
            results.append(publish(sessions, store, "race", config))
        except VersionConflict as exc:
            results.append(exc)

    threads = [threading.Thread(target=racer, args=(PublishConfig(val_fraction=v),)) for v in (0.1, 0.2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    conflicts = [r for r in results if isinstance(r, VersionConflict)]
    assert len(results) == 2 and len(conflicts) == 1, results
    assert "v1" in str(conflicts[0]) and "publish again" in str(conflicts[0])
    versions = [v for v in list_versions(sessions, "race")]
    assert [(v.version, v.status) for v in versions] == [(1, "sealed")]
    assert verify(sessions, store, "race", 1) == []


def test_the_loser_of_a_race_on_one_draft_gets_a_version_conflict(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same config: the second publisher resumes the first one's draft, and the first seals it
    while the second writes. The second gets `VersionConflict` (not `SealedVersion`, whose advice
    would seal an identical version), and publishing again says the rows are unchanged."""
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    smoke_round(load_settings(), queries_per_app=1, rollouts=1)
    sessions = session_factory(engine)
    store = open_object_store(load_settings())
    claimed: list[object] = []
    second_claimed, first_sealed = threading.Event(), threading.Event()
    claim = publishing._claim

    def ordered_claim(*args: Any, **kwargs: Any) -> Any:
        won = claim(*args, **kwargs)
        claimed.append(won)
        if len(claimed) == 1:
            second_claimed.wait(timeout=120)  # the first seals only once the second holds the draft
        else:
            second_claimed.set()
            first_sealed.wait(timeout=120)  # the second writes after the first sealed
        return won

    monkeypatch.setattr(publishing, "_claim", ordered_claim)
    results: list[object] = []

    def racer(done: threading.Event | None) -> None:
        try:
            results.append(publish(sessions, store, "race", CONFIG))
        except Exception as exc:
            results.append(exc)
        finally:
            if done is not None:
                done.set()

    first = threading.Thread(target=racer, args=(first_sealed,))
    first.start()
    while not claimed:
        time.sleep(0.01)
    second = threading.Thread(target=racer, args=(None,))
    second.start()
    first.join()
    second.join()
    assert [type(r).__name__ for r in results] == ["PublishReport", "VersionConflict"], results
    assert "sealed by another publisher" in str(results[1])
    assert [(v.version, v.status) for v in list_versions(sessions, "race")] == [(1, "sealed")]
    monkeypatch.setattr(publishing, "_claim", claim)
    assert publish(sessions, store, "race", CONFIG).unchanged
