"""Screenshots the annotator's browser can load, with the step's action drawn on them.

Label Studio fetches task images from the browser (with `fetch`, so CORS applies), which is
where broken images come from. Four ways to serve them:

- `upload`: each image uploaded to Label Studio once (as a file of the project, not a task),
  the task holding its `/data/upload/...` URL. The default for the local object store, which
  the browser cannot reach: tasks stay small, so the task list loads fast.
- `data`: the image inline as a data URL. Works anywhere, needs nothing; every task carries
  its images, so listing tasks downloads them all.
- `presign`: a presigned GET URL on the S3/MinIO store (MinIO answers CORS for any origin;
  an S3 bucket needs a CORS rule for the Label Studio origin). URLs expire (7 days at most).
- `storage`: an `s3://bucket/key` URI that Label Studio resolves itself through an S3 source
  storage connection on the project (set up by push), so nothing expires.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal, TypeVar, cast

from PIL import Image, ImageDraw

from storage.keys import blob_key
from storage.objectstore import ObjectStore, S3ObjectStore, put_blob
from trajforge.actions import Action
from trajforge.draw import draw_action
from trajforge.errors import ConfigError
from trajforge.settings import AnnotationSettings

T = TypeVar("T")
Mode = Literal["upload", "data", "presign", "storage"]
Uploader = Callable[[list[tuple[str, bytes]]], dict[str, str]]  # (name, jpeg)s -> URL by name
PENDING = "trajforge-pending:"  # stands for an image's URL until `resolve` uploads it


def image_mode(settings: AnnotationSettings, store: ObjectStore) -> Mode:
    """The serving mode; ConfigError when the mode needs an S3 store and there is none."""
    remote = isinstance(store, S3ObjectStore)
    if settings.images == "auto":
        return "presign" if remote else "upload"
    if settings.images in ("presign", "storage") and not remote:
        raise ConfigError(
            f"annotate.images={settings.images} needs the S3 object store (TRAJFORGE_STORE_BACKEND=s3): "
            "the browser cannot reach the local store; use annotate.images=upload"
        )
    return settings.images


def overlay(png: bytes, action: Action | None, max_side: int, box: list[int] | None = None) -> bytes:
    """The screenshot with the action's point circled (a swipe's arrow from start to end) and
    the target element's pixel `box` outlined in blue, scaled to `max_side`, as JPEG."""
    img = Image.open(io.BytesIO(png)).convert("RGB")
    if box is not None:
        ImageDraw.Draw(img).rectangle(tuple(box), outline="#1f6feb", width=max(2, img.width // 200))
    if action is not None:
        draw_action(img, action)
    img.thumbnail((max_side, max_side))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=85)
    return buf.getvalue()


class ImageLinks:
    """Makes the URL of one step's screenshot (annotated or plain), in the configured mode.

    In `upload` mode a URL is known only after the upload: the call returns a placeholder,
    and `resolve` uploads every pending image in one go and puts the URLs in its place."""

    def __init__(
        self, store: ObjectStore, settings: AnnotationSettings, upload: Uploader | None = None
    ) -> None:
        self.store, self.settings = store, settings
        self.mode = image_mode(settings, store)
        if self.mode == "upload" and upload is None:
            raise ConfigError("annotate.images=upload needs a Label Studio project to upload to")
        self.upload = upload
        self._made: dict[tuple[str, str], str] = {}
        self._pending: dict[str, bytes] = {}  # file name -> JPEG, not uploaded yet
        self._uploaded: dict[str, str] = {}  # placeholder -> URL

    def __call__(self, sha256: str, action: Action | None = None, box: list[int] | None = None) -> str:
        key = (sha256, repr((action.to_json() if action else None, box)))
        if key not in self._made:
            self._made[key] = self._make(sha256, action, box)
        made = self._made[key]
        return self._uploaded.get(made, made)

    def resolve(self, value: T) -> T:
        """`value` (tasks: dicts, lists, tuples, strings) with every placeholder replaced by its URL."""
        if self._pending:
            assert self.upload is not None
            urls = self.upload(sorted(self._pending.items()))
            self._uploaded.update({PENDING + name: url for name, url in urls.items()})
            self._pending.clear()
        return cast(T, self._replace(value)) if self._uploaded else value

    def _replace(self, value: Any) -> Any:
        if isinstance(value, str):
            for token in set(_TOKEN.findall(value)):
                value = value.replace(token, self._uploaded[token])
            return value
        if isinstance(value, dict):
            return {k: self._replace(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self._replace(v) for v in value)
        return value

    def _make(self, sha256: str, action: Action | None, box: list[int] | None) -> str:
        jpeg = overlay(self.store.get(blob_key(sha256)), action, self.settings.image_max_side, box)
        if self.mode == "data":
            return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
        digest, _ = put_blob(self.store, jpeg, ext="jpg", content_type="image/jpeg")
        if self.mode == "upload":
            name = f"{digest[:24]}.jpg"
            self._pending[name] = jpeg
            return PENDING + name
        key = blob_key(digest, "jpg")
        if self.mode == "presign":
            return self.store.presign(key, timedelta(hours=self.settings.presign_expiry_h))
        assert isinstance(self.store, S3ObjectStore)
        return f"s3://{self.store.bucket}/{key}"


_TOKEN = re.compile(re.escape(PENDING) + r"[0-9a-f]+\.jpg")
