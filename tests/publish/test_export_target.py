"""An export replaces an earlier export whole, in every format and on S3, and refuses a folder
that holds anything else before writing (an export into a used folder once mixed two versions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from publish.export_target import MARKER
from publish.exports import FORMATS, export
from publish.versions import PublishConfig, publish
from storage.objectstore import S3ObjectStore
from trajforge.errors import ConfigError


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_second_export_into_the_folder_replaces_the_first_whole(version, tmp_path: Path) -> None:
    _, sessions, store, _ = version
    v2 = publish(sessions, store, "gui", PublishConfig(chunk_rows=32, val_fraction=0.0))  # train only
    for fmt in (f for f in FORMATS if f != "browsergym"):  # rows of BrowserGym's episodes only: its own test
        out = tmp_path / fmt
        export(sessions, store, "gui", 1, fmt, str(out), "qwen")
        first = _files(out)
        assert any("val" in name for name in first), first  # v1 has a val split
        export(sessions, store, "gui", v2.version, fmt, str(out), "qwen")
        marker = json.loads((out / MARKER).read_text())
        assert (marker["version"], marker["format"]) == (v2.version, fmt)
        assert _files(out) == set(marker["files"]) | {MARKER}  # exactly what the second export wrote
        assert not any(name.endswith(".parquet") and "val-" in name for name in _files(out)), fmt
        if fmt != "rl-verl":  # verl gets a val.parquet of whole train queries; the others have no val
            assert not any("val" in name for name in _files(out)), (fmt, _files(out))
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(f".{fmt}.partial")]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_folder_of_other_files_is_refused_before_anything_is_written(version, tmp_path: Path) -> None:
    _, sessions, store, _ = version
    tmp_path = tmp_path / "exports"
    mine = tmp_path / "mine"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match=r"holds files that no trajforge export wrote \(notes\.txt\)"):
        export(sessions, store, "gui", 1, "hf", str(mine))
    assert _files(mine) == {"notes.txt"} and sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    earlier = tmp_path / "earlier"
    export(sessions, store, "gui", 1, "hf", str(earlier))
    (earlier / "data" / "mine.parquet").write_bytes(b"")  # a file put into an export by hand is kept
    with pytest.raises(ConfigError, match=r"data/mine\.parquet"):
        export(sessions, store, "gui", 1, "hf", str(earlier))


@pytest.mark.s3
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_an_s3_prefix_is_replaced_whole_or_refused(version, s3_settings) -> None:
    settings, sessions, store, _ = version
    settings = settings.model_copy(update={"s3": s3_settings})
    remote = S3ObjectStore.connect(s3_settings)
    v2 = publish(sessions, store, "gui", PublishConfig(chunk_rows=32, val_fraction=0.0))
    target = f"s3://{s3_settings.bucket}/exports/gui"
    export(sessions, store, "gui", 1, "hf", target, settings=settings)
    assert any("/val-" in k for k in remote.list("exports/gui/"))
    report = export(sessions, store, "gui", v2.version, "hf", target, settings=settings)
    keys = set(remote.list("exports/gui/"))
    assert keys == set(report.files) | {f"exports/gui/{MARKER}"}
    assert json.loads(remote.get(f"exports/gui/{MARKER}"))["version"] == v2.version
    remote.put("other/readme.txt", b"theirs")
    with pytest.raises(ConfigError, match=r"holds files that no trajforge export wrote \(readme\.txt\)"):
        export(sessions, store, "gui", 1, "hf", f"s3://{s3_settings.bucket}/other", settings=settings)
    assert list(remote.list("other/")) == ["other/readme.txt"]
