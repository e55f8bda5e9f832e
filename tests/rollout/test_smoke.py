"""The smoke round end to end, on every database and object store."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import Engine, func, select

from rollout.smoke import SCREENS, render_screen, run_smoke_round
from storage.db import session_factory
from storage.keys import blob_key
from storage.models import Anchor, Episode, Exclusion, Judgment, Round, Step
from storage.objectstore import open_object_store
from trajforge.settings import S3Settings, load_settings


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "s3":
        s3: S3Settings = request.getfixturevalue("s3_settings")
        monkeypatch.setenv("TRAJFORGE_STORE_BACKEND", "s3")
        monkeypatch.setenv("TRAJFORGE_S3_ENDPOINT", s3.endpoint)
        monkeypatch.setenv("TRAJFORGE_S3_BUCKET", s3.bucket)
        monkeypatch.setenv("TRAJFORGE_S3_ACCESS_KEY", "testing")
        monkeypatch.setenv("TRAJFORGE_S3_SECRET_KEY", "testing")
    return str(request.param)


def test_smoke_round_writes_the_spine(
    engine: Engine, db_url: str, store_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    report = run_smoke_round(settings, episodes=4)
    assert (report.round_number, report.episodes, report.successes, report.steps) == (1, 4, 2, 18)
    assert (report.blobs_written, report.blobs_deduped) == (4, 0)
    assert dict(report.reasons) == {"invalid_json": 1}
    assert dict(report.labels) == {"GOOD": 12, "NEUTRAL": 5, "HARMFUL": 1}

    sessions = session_factory(engine)
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Step)) == 18
        assert s.scalar(select(func.count()).select_from(Judgment)) == 18
        broken = s.scalars(select(Step).where(Step.parse_error.is_not(None))).one()
        assert broken.parse_error == "invalid_json" and broken.action is None
        assert broken.raw_output.startswith("<tool_call>")  # raw output kept as data
        exclusion = s.scalars(select(Exclusion)).one()
        assert (exclusion.stage, exclusion.reason) == ("rollout", "invalid_json")
        anchors = sorted(s.scalars(select(Anchor.label)).all())
        assert anchors == ["failure", "failure", "success", "success"]
        assert sorted(s.scalars(select(Episode.outcome)).all()) == anchors
        rnd = s.scalars(select(Round)).one()
        assert rnd.status == "done" and rnd.stats["dropped"] == {"invalid_json": 1}

    store = open_object_store(settings)
    blobs = list(store.list("blobs/"))
    assert len(blobs) == len(SCREENS)
    again = run_smoke_round(settings, episodes=1)
    assert (again.round_number, again.blobs_written, again.blobs_deduped) == (2, 0, 4)


def test_rendered_screen_is_a_phone_png(tmp_path: Path) -> None:
    png = render_screen("Home")
    path = tmp_path / "home.png"
    path.write_bytes(png)
    with Image.open(path) as img:
        assert img.size == (1080, 2400) and img.format == "PNG"
    assert render_screen("Home") == png  # deterministic: same content, same hash
    assert blob_key("a" * 64).endswith(".png")
