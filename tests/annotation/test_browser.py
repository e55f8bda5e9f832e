"""The labelling view in a real browser: every screenshot renders, a verdict submits, pull sees it."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from annotation import config as cfg
from annotation.client import Studio
from annotation.pull import pull
from annotation.push import push_round
from critics.anchors import deciding_anchor
from rollout.web.env import chromium_available
from storage.models import Anchor, AnnotationProject, AnnotationTask
from storage.objectstore import open_object_store
from tests.annotation.conftest import smoke_round
from tests.conftest import service_missing
from tests.support.label_studio import LabelStudioServer, logged_in_page
from trajforge.settings import AnnotationSettings, S3Settings

pytestmark = [pytest.mark.labelstudio, pytest.mark.browser, pytest.mark.slow]

IMAGES_JS = """() => [...document.querySelectorAll('.lsf-image img')]
    .map(img => ({src: img.currentSrc.slice(0, 40), width: img.naturalWidth, done: img.complete}))"""


@pytest.fixture
def store_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """`data` on the local store, `presign` on a moto S3 store."""
    monkeypatch.setenv("TRAJFORGE_DB_URL", f"sqlite:///{tmp_path / 'browser.db'}")
    if request.param == "presign":
        s3: S3Settings = request.getfixturevalue("s3_settings")
        for key, value in {
            "STORE_BACKEND": "s3",
            "S3_ENDPOINT": s3.endpoint,
            "S3_ACCESS_KEY": "testing",
            "S3_SECRET_KEY": "testing",
            "S3_BUCKET": s3.bucket,
            "S3_REGION": "us-east-1",
        }.items():
            monkeypatch.setenv(f"TRAJFORGE_{key}", value)
    return str(request.param)


@pytest.mark.parametrize("store_env", ["data", pytest.param("presign", marks=pytest.mark.s3)], indirect=True)
def test_annotator_sees_every_screenshot_and_submits_a_verdict(
    label_studio: LabelStudioServer, store_env: str
) -> None:
    if not chromium_available():
        service_missing("Chromium or Playwright missing (apt-get install chromium)")
    settings, sessions, round_id = smoke_round(rollouts=2)
    annotate = AnnotationSettings(
        url=label_studio.url,
        api_key=label_studio.token,
        project_prefix=f"b-{uuid.uuid4().hex[:8]}",
        project_by="purpose",
        audit_fraction=1.0,
    )
    report = push_round(sessions, round_id, open_object_store(settings), annotate, settings.s3, limit=1)
    assert sum(report.pushed.values()) == 1
    with sessions() as s:
        task_id, episode_id = s.execute(select(AnnotationTask.ls_task_id, AnnotationTask.episode_id)).one()
        project_id = s.scalars(select(AnnotationProject.ls_project_id)).one()
    ls = Studio(annotate).ls
    task = ls.tasks.get(id=str(task_id))
    assert task.data is not None
    steps = task.data["steps"]
    scheme = "data:image/jpeg" if store_env == "data" else "http://"
    assert all(step["image"].startswith(scheme) for step in steps)
    predicted = next(r for r in ls.predictions.list(task=task_id)[0].result if r["from_name"] == cfg.VERDICT)
    choice = "success" if predicted["value"]["choices"] == ["failure"] else "failure"

    with logged_in_page(label_studio) as page:
        page.goto(f"{label_studio.url}/projects/{project_id}/data?task={task_id}")
        page.get_by_text("Did the agent complete the task?").wait_for(timeout=60_000)
        page.wait_for_function(
            f"() => [...document.querySelectorAll('.lsf-image img')].filter(i => i.complete).length >= {len(steps)}",
            timeout=60_000,
        )
        images: list[dict[str, Any]] = page.evaluate(IMAGES_JS)
        assert len(images) == len(steps)
        assert all(img["width"] > 0 for img in images), images  # every screenshot really rendered
        assert page.get_by_text("There was an issue loading URL").count() == 0
        page.locator(".lsf-choices").first.locator(f"input[name={choice}]").check()
        page.get_by_role("button", name="Submit").click()
        deadline = time.monotonic() + 30
        while not ls.annotations.list(id=task_id) and time.monotonic() < deadline:
            time.sleep(0.5)

    pulled = pull(sessions, annotate)
    assert pulled.annotations["new"] == 1 and pulled.anchors["set"] == 1
    with sessions() as s:
        anchor = deciding_anchor(s.scalars(select(Anchor).where(Anchor.episode_id == episode_id)).all())
    assert anchor is not None and anchor.source == "human" and anchor.label == choice
    assert anchor.annotator == label_studio.username
