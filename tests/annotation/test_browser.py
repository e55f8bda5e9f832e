"""The labelling view in a real browser: a blind audit task in the compact view renders every
screenshot, takes a verdict, a step label, an instruction and a click-to-correct, and pull stores them."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select

from annotation import config as cfg
from annotation.client import Studio
from annotation.pull import pull
from annotation.push import push_round
from rollout.web.env import chromium_available
from storage.anchors import deciding_anchor
from storage.models import (
    Anchor,
    AnnotationProject,
    AnnotationTask,
    Correction,
    Episode,
    HumanAnnotation,
    Step,
)
from storage.objectstore import open_object_store
from tests.annotation.conftest import smoke_round
from tests.conftest import service_missing
from tests.support.label_studio import LabelStudioServer, logged_in_page
from trajforge.settings import AnnotationSettings, S3Settings

pytestmark = [pytest.mark.labelstudio, pytest.mark.browser, pytest.mark.slow]


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
def test_annotator_judges_a_blind_audit_in_the_compact_view_and_corrects_by_clicking(
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
    report = push_round(sessions, round_id, open_object_store(settings), annotate, settings.s3)
    assert report.queued["audit"] > 0
    with sessions() as s:
        task_id, episode_id = s.execute(
            select(AnnotationTask.ls_task_id, AnnotationTask.episode_id)
            .where(AnnotationTask.blind, AnnotationTask.duplicate_of.is_(None))
            .join(Episode, Episode.id == AnnotationTask.episode_id)
            .where(Episode.num_steps >= 2)
        ).first()  # type: ignore[misc]
        project_id = s.scalars(select(AnnotationProject.ls_project_id)).one()
        before = s.scalars(
            select(Step.screenshot).where(Step.episode_id == episode_id, Step.index == 1)
        ).one()
    ls = Studio(annotate).ls
    task = ls.tasks.get(id=str(task_id))
    assert task.data is not None
    steps = task.data["steps"]
    scheme = "/data/upload/" if store_env == "data" else "http://"  # the local store uploads them
    assert all(step["image"].startswith(scheme) and step["after"].startswith(scheme) for step in steps)
    assert not list(ls.predictions.list(task=task_id))  # blind: nothing pre-filled
    assert "consensus" not in str(task.data) and "critics:" not in str(task.data)  # no verdict shown

    with logged_in_page(label_studio) as page:
        started = time.monotonic()
        page.goto(f"{label_studio.url}/projects/{project_id}/data?task={task_id}")
        page.get_by_text("Did the agent complete the task?").wait_for(timeout=60_000)
        # the filmstrip (every step and the final screen) and step 1's before and after all render
        page.wait_for_function(
            f"() => [...document.querySelectorAll('.tf-strip img')].filter(i => i.naturalWidth > 0).length"
            f" >= {len(steps) + 1}",
            timeout=60_000,
        )
        page.wait_for_function(
            "() => [...document.querySelectorAll('.lsf-image img, img[alt]')].filter(i => i.naturalWidth > 0)"
            ".length >= 2",
            timeout=60_000,
        )
        assert page.get_by_text("Blind audit: the critics' verdicts are hidden").count() >= 1
        step_text = page.get_by_text(f"Step 1 of {len(steps)}").locator("xpath=..").inner_text()
        assert "critics:" not in step_text and "exact:" in step_text
        assert "per mille" in page.content()
        loaded = time.monotonic()

        page.keyboard.press("f")  # verdict: failure
        page.locator(f"input[name={cfg.FIRST_WRONG}]").fill("2")
        page.evaluate("() => document.activeElement.blur()")
        page.keyboard.press("Alt+ArrowRight")  # step navigation: to step 2
        page.get_by_text(f"Step 2 of {len(steps)}").wait_for(timeout=10_000)
        page.locator("input[name=HARMFUL]").first.check()
        page.locator(
            f"textarea[name={cfg.corrected_instruction(1)}], input[name={cfg.corrected_instruction(1)}]"
        ).fill("Tap the back arrow at the top left")
        page.evaluate("() => document.activeElement.blur()")
        page.keyboard.press("c")  # the click-to-correct kind, then a click on the before-screen
        canvas = page.locator("canvas").first
        canvas.scroll_into_view_if_needed()
        box = canvas.bounding_box()
        assert box is not None
        page.mouse.click(box["x"] + box["width"] * 0.25, box["y"] + box["height"] * 0.5)
        page.get_by_role("button", name="Submit").click()
        deadline = time.monotonic() + 30
        while not ls.annotations.list(id=task_id) and time.monotonic() < deadline:
            time.sleep(0.5)
        submitted = time.monotonic()
    print(  # the figure the closing note quotes: a scripted annotator's time on one task
        f"\ncompact view: {len(steps)} steps, loaded in {loaded - started:.1f} s, judged and "
        f"corrected in {submitted - loaded:.1f} s"
    )

    pulled = pull(sessions, annotate)
    assert pulled.annotations["new"] == 1 and pulled.corrections == {"clicked": 1}
    with sessions() as s:
        anchor = deciding_anchor(s.scalars(select(Anchor).where(Anchor.episode_id == episode_id)).all())
        note = s.scalars(select(HumanAnnotation).where(HumanAnnotation.episode_id == episode_id)).one()
        fix = s.scalars(select(Correction).where(Correction.episode_id == episode_id)).one()
    assert anchor is not None and anchor.source == "human" and anchor.label == "failure"
    assert anchor.annotator == label_studio.username
    # a blind task: everything the annotator set is independent of the critics
    assert note.independent_verdict and note.independent_steps == [1] and not note.accepted_as_is
    assert note.step_labels == {"1": "HARMFUL"} and note.first_wrong_step == 2
    assert (
        fix.step_index == 1
        and fix.source == "clicked"
        and fix.instruction == "Tap the back arrow at the top left"
    )
    assert fix.action is not None and fix.action.kind == "click" and fix.action.point is not None
    x, y = fix.action.point
    assert abs(x - 250) <= 15 and abs(y - 500) <= 15, fix.action  # per mille of the screen
    assert before  # the screen the click corrected is the step's own
