"""The object store contract, on a local directory and on a real S3 API (moto + minio)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from storage.keys import blob_key, sha256_hex
from storage.objectstore import (
    LocalObjectStore,
    ObjectStore,
    S3ObjectStore,
    open_object_store,
    put_blob,
)
from trajforge.errors import ObjectNotFound, StorageError
from trajforge.settings import S3Settings, load_settings


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return LocalObjectStore(tmp_path / "objects")
    return S3ObjectStore.connect(request.getfixturevalue("s3_settings"))


def test_put_get_exists_list(store: ObjectStore) -> None:
    store.put("a/b/one.txt", b"1")
    store.put("a/two.txt", b"22")
    store.put("b/three.txt", b"333")
    store.put("a/two.txt", b"two")  # overwrite
    assert store.get("a/two.txt") == b"two"
    assert store.exists("a/b/one.txt") and not store.exists("a/b/none.txt")
    assert list(store.list("a/")) == ["a/b/one.txt", "a/two.txt"]
    assert list(store.list()) == ["a/b/one.txt", "a/two.txt", "b/three.txt"]


def test_missing_key(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound, match="not found"):
        store.get("nope/missing.bin")


def test_blobs_are_content_addressed_and_stored_once(store: ObjectStore) -> None:
    png = b"\x89PNG fake screenshot"
    digest, written = put_blob(store, png)
    assert (digest, written) == (sha256_hex(png), True)
    assert put_blob(store, png) == (digest, False)
    key = blob_key(digest)
    assert key == f"blobs/sha256/{digest[:2]}/{digest[2:4]}/{digest}.png"
    assert store.get(key) == png
    assert list(store.list("blobs/")) == [key]


def test_presigned_url_serves_the_object(store: ObjectStore) -> None:
    store.put("shared/file.bin", b"payload")
    url = store.presign("shared/file.bin")
    with urllib.request.urlopen(url, timeout=10) as resp:  # no credentials: the signature is enough
        assert resp.read() == b"payload"


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a\\b"])
def test_bad_keys_rejected(store: ObjectStore, key: str) -> None:
    with pytest.raises(StorageError, match="not a relative"):
        store.put(key, b"x")


@pytest.mark.s3
def test_s3_presign_is_signed(s3_settings: S3Settings) -> None:
    store = S3ObjectStore.connect(s3_settings)
    store.put("k.txt", b"v")
    assert "X-Amz-Signature=" in store.presign("k.txt")


def test_unreachable_s3_is_one_clear_storage_error() -> None:
    settings = S3Settings(endpoint="127.0.0.1:1", timeout_s=1)
    with pytest.raises(StorageError, match=r"cannot reach S3 endpoint 127.0.0.1:1 .*TRAJFORGE_S3_ENDPOINT"):
        S3ObjectStore.connect(settings)


def test_settings_select_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJFORGE_HOME", str(tmp_path / "home"))
    store = open_object_store(load_settings())
    assert isinstance(store, LocalObjectStore) and store.root == tmp_path / "home" / "objects"
