"""Screenshots the annotator's browser can load, with the step's action drawn on them.

Label Studio fetches task images from the browser (with `fetch`, so CORS applies), which is
where broken images come from. Three ways to serve them:

- `data`: the image inline as a data URL. Works anywhere, needs nothing; tasks get larger.
  The default for the local object store, which the browser cannot reach.
- `presign`: a presigned GET URL on the S3/MinIO store (MinIO answers CORS for any origin;
  an S3 bucket needs a CORS rule for the Label Studio origin). URLs expire (7 days at most).
- `storage`: an `s3://bucket/key` URI that Label Studio resolves itself through an S3 source
  storage connection on the project (set up by push), so nothing expires.
"""

from __future__ import annotations

import base64
import io
from datetime import timedelta
from typing import Any, Literal

from PIL import Image

from critics.llm import draw_action
from storage.keys import blob_key
from storage.objectstore import ObjectStore, S3ObjectStore, put_blob
from trajforge.actions import Action
from trajforge.errors import ConfigError
from trajforge.settings import AnnotationSettings

Mode = Literal["data", "presign", "storage"]


def image_mode(settings: AnnotationSettings, store: ObjectStore) -> Mode:
    """The serving mode; ConfigError when the mode needs an S3 store and there is none."""
    remote = isinstance(store, S3ObjectStore)
    if settings.images == "auto":
        return "presign" if remote else "data"
    if settings.images != "data" and not remote:
        raise ConfigError(
            f"annotate.images={settings.images} needs the S3 object store (TRAJFORGE_STORE_BACKEND=s3): "
            "the browser cannot reach the local store; use annotate.images=data"
        )
    return settings.images


def overlay(png: bytes, action: dict[str, Any] | None, max_side: int) -> bytes:
    """The screenshot with the action's point circled, scaled to `max_side`, as JPEG."""
    img = Image.open(io.BytesIO(png)).convert("RGB")
    if action is not None:
        draw_action(img, Action.model_validate(action))
    img.thumbnail((max_side, max_side))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=85)
    return buf.getvalue()


class ImageLinks:
    """Makes the URL of one step's annotated screenshot, in the configured mode."""

    def __init__(self, store: ObjectStore, settings: AnnotationSettings) -> None:
        self.store, self.settings = store, settings
        self.mode = image_mode(settings, store)

    def __call__(self, sha256: str, action: dict[str, Any] | None) -> str:
        jpeg = overlay(self.store.get(blob_key(sha256)), action, self.settings.image_max_side)
        if self.mode == "data":
            return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
        digest, _ = put_blob(self.store, jpeg, ext="jpg", content_type="image/jpeg")
        key = blob_key(digest, "jpg")
        if self.mode == "presign":
            return self.store.presign(key, timedelta(hours=self.settings.presign_expiry_h))
        assert isinstance(self.store, S3ObjectStore)
        return f"s3://{self.store.bucket}/{key}"
