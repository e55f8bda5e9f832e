"""`ObjectStore`: put, get, exists, list, presign; a local directory or S3/MinIO.

Screenshots are content-addressed (`put_blob`): stored once under their sha256.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import urllib3

from storage.keys import blob_key, sha256_hex
from trajforge.errors import ObjectNotFound, StorageError
from trajforge.settings import S3Settings, Settings

if TYPE_CHECKING:  # imported by the S3 store alone: a local store's commands start without it
    from minio import Minio


@runtime_checkable
class ObjectStore(Protocol):
    """Where bytes live. Keys are '/'-separated and built by `storage.keys`."""

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None: ...

    def get(self, key: str) -> bytes:
        """Raises ObjectNotFound when the key is absent."""
        ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys under `prefix`, in lexicographic order."""
        ...

    def presign(self, key: str, expires: timedelta = timedelta(hours=1)) -> str:
        """A URL a client can GET without credentials until it expires."""
        ...


def put_blob(
    store: ObjectStore, data: bytes, ext: str = "png", content_type: str = "image/png"
) -> tuple[str, bool]:
    """Store `data` under its sha256 unless already there.

    Returns:
        (sha256, written): written is False when identical content was already stored.
    """
    digest = sha256_hex(data)
    key = blob_key(digest, ext)
    if store.exists(key):
        return digest, False
    store.put(key, data, content_type)
    return digest, True


def _check_key(key: str) -> str:
    if not key or key.startswith("/") or ".." in key.split("/") or "\\" in key:
        raise StorageError(f"object key {key!r} is not a relative '/'-separated path")
    return key


class LocalObjectStore:
    """A directory on disk; writes are atomic (temp file + rename)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create object store directory {root}: {exc.strerror}") from exc

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise ObjectNotFound(f"object {key!r} not found in {self.root}") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> Iterator[str]:
        folder = self.root / prefix.rpartition("/")[0]  # walk only the folder the prefix is in
        keys = (
            p.relative_to(self.root).as_posix()
            for p in folder.rglob("*")
            if p.is_file() and not p.name.startswith(".tmp-")
        )
        yield from sorted(k for k in keys if k.startswith(prefix))

    def presign(self, key: str, expires: timedelta = timedelta(hours=1)) -> str:
        path = self._path(key)
        if not path.is_file():
            raise ObjectNotFound(f"object {key!r} not found in {self.root}")
        return path.resolve().as_uri()  # a local file needs no signature


class S3ObjectStore:
    """S3 or MinIO through the `minio` client. Build with `S3ObjectStore.connect`."""

    def __init__(self, client: Minio, bucket: str, endpoint: str) -> None:
        self.client, self.bucket, self.endpoint = client, bucket, endpoint

    @classmethod
    def connect(cls, settings: S3Settings) -> S3ObjectStore:
        """Connect and make sure the bucket exists.

        Raises:
            StorageError: the endpoint is unreachable or refuses the credentials.
        """
        from minio import Minio

        timeout = urllib3.Timeout(connect=settings.timeout_s, read=settings.timeout_s)
        # Few retries: an unreachable endpoint must fail in seconds, not minutes.
        retries = urllib3.Retry(total=2, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504])
        http = urllib3.PoolManager(timeout=timeout, retries=retries, maxsize=32)
        client = Minio(
            settings.endpoint,
            access_key=settings.access_key.get_secret_value(),
            secret_key=settings.secret_key.get_secret_value(),
            secure=settings.secure,
            region=settings.region,
            http_client=http,
        )
        store = cls(client, settings.bucket, settings.endpoint)
        store._call(
            "check bucket",
            lambda: None if client.bucket_exists(settings.bucket) else client.make_bucket(settings.bucket),
        )
        return store

    def _call(self, what: str, fn):  # type: ignore[no-untyped-def]
        from minio.error import MinioException, S3Error

        try:
            return fn()
        except S3Error as exc:
            if exc.code in ("NoSuchKey", "NoSuchObject"):
                raise ObjectNotFound(
                    f"object {exc.object_name!r} not found in bucket {self.bucket!r}"
                ) from exc
            raise StorageError(
                f"S3 {what} on {self.endpoint}/{self.bucket} failed: {exc.code}: {exc.message}"
            ) from exc
        except (urllib3.exceptions.HTTPError, MinioException, OSError) as exc:
            raise StorageError(
                f"cannot reach S3 endpoint {self.endpoint} ({what}): {type(exc).__name__}; "
                "check TRAJFORGE_S3_ENDPOINT and that the server is running"
            ) from exc

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        self._call(
            "put",
            lambda: self.client.put_object(
                self.bucket, _check_key(key), io.BytesIO(data), len(data), content_type=content_type
            ),
        )

    def get(self, key: str) -> bytes:
        def read() -> bytes:
            resp = self.client.get_object(self.bucket, _check_key(key))
            try:
                return resp.read()
            finally:
                resp.close()
                resp.release_conn()

        data: bytes = self._call("get", read)
        return data

    def exists(self, key: str) -> bool:
        try:
            self._call("stat", lambda: self.client.stat_object(self.bucket, _check_key(key)))
        except ObjectNotFound:
            return False
        return True

    def list(self, prefix: str = "") -> Iterator[str]:
        objects = self._call(
            "list",
            lambda: list(self.client.list_objects(self.bucket, prefix=prefix, recursive=True)),
        )
        yield from sorted(o.object_name for o in objects if o.object_name)

    def remove(self, key: str) -> None:
        self._call("remove", lambda: self.client.remove_object(self.bucket, _check_key(key)))

    def presign(self, key: str, expires: timedelta = timedelta(hours=1)) -> str:
        url: str = self._call(
            "presign",
            lambda: self.client.presigned_get_object(self.bucket, _check_key(key), expires=expires),
        )
        return url


def open_object_store(settings: Settings) -> ObjectStore:
    """The store the settings select (local directory by default)."""
    if settings.store.backend == "s3":
        return S3ObjectStore.connect(settings.s3)
    return LocalObjectStore(settings.store_path)


def frame_reader(store: ObjectStore) -> Callable[[str], bytes]:
    """Screenshot bytes by sha256 (the `frames` argument of every stage that shows images)."""
    return lambda sha: store.get(blob_key(sha))
