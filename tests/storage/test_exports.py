"""Every export format loaded back with the real readers and checked sample by sample."""

from __future__ import annotations

import io
import json
from pathlib import Path

import datasets as hf
import polars as pl
import pytest
from PIL import Image
from sqlalchemy import Engine

from rollout.smoke import run_smoke_round
from storage.datasets import iter_rows, manifest
from storage.db import session_factory
from storage.exports import export
from storage.objectstore import S3ObjectStore, open_object_store
from storage.publish import PublishConfig, publish
from trajforge.actions import Action, Screen, get_codec
from trajforge.errors import ConfigError
from trajforge.settings import load_settings


@pytest.fixture
def version(engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings = load_settings()
    run_smoke_round(settings, queries_per_app=1, rollouts=2)
    sessions, store = session_factory(engine), open_object_store(settings)
    publish(sessions, store, "gui", PublishConfig(chunk_rows=32, val_fraction=0.3))
    rows = {r["uid"]: r for r in iter_rows(store, manifest(sessions, store, "gui", 1))}
    return settings, sessions, store, rows


def _action(row: dict) -> Action | None:
    target = json.loads(row["payload"]).get("action")
    return Action.model_validate(target) if target else None


@pytest.mark.parametrize("action_format", ["qwen", "uitars"])
def test_sharegpt_matches_llama_factory_and_actions_reparse(
    version, tmp_path: Path, action_format: str
) -> None:
    _, sessions, store, rows = version
    report = export(sessions, store, "gui", 1, "sft-sharegpt", str(tmp_path), action_format, max_side=540)
    info = json.loads((tmp_path / "dataset_info.json").read_text())
    assert set(info) == {"gui_v1_train", "gui_v1_val"}
    assert info["gui_v1_train"]["formatting"] == "sharegpt"
    assert info["gui_v1_train"]["columns"] == {"messages": "messages", "images": "images"}
    codec = get_codec(action_format)
    seen = 0
    for entry in info.values():
        for line in (tmp_path / entry["file_name"]).read_text().splitlines():
            record = json.loads(line)
            user, answer = record["messages"]
            assert (user["role"], answer["role"]) == ("user", "assistant")
            assert user["content"].count("<image>") == len(record["images"]) >= 1
            for path in record["images"]:
                with Image.open(tmp_path / path) as img:
                    assert max(img.size) == 540  # downscaled from 1080x2400
            row = rows[record["meta"]["uid"]]
            action = _action(row)
            if action is not None:
                text = answer["content"].split("</think>\n")[-1]
                assert codec.parse(text, Screen(1080, 2400)).core() == action.core()
            seen += 1
    assert seen == sum(report.rows.values()) == len(rows) - sum(report.skipped.values())


def test_messages_have_image_parts(version, tmp_path: Path) -> None:
    _, sessions, store, _ = version
    export(sessions, store, "gui", 1, "sft-messages", str(tmp_path))
    lines = (tmp_path / "gui_v1_train.jsonl").read_text().splitlines()
    for line in lines:
        user, _ = json.loads(line)["messages"]
        images = [p for p in user["content"] if p["type"] == "image_url"]
        texts = [p for p in user["content"] if p["type"] == "text"]
        assert (
            len(texts) == 1 and images and all((tmp_path / p["image_url"]["url"]).is_file() for p in images)
        )


def test_verl_rows_carry_the_ground_truth_of_the_source_step(version, tmp_path: Path) -> None:
    _, sessions, store, rows = version
    report = export(sessions, store, "gui", 1, "rl-verl", str(tmp_path), "agentcpm")
    files = sorted(str(p) for p in tmp_path.glob("*.parquet"))
    table = hf.load_dataset("parquet", data_files=files, split="train")
    assert len(table) == sum(report.rows.values()) and report.skipped["no_action_ground_truth"] > 0
    assert {"data_source", "prompt", "images", "ability", "reward_model", "extra_info"} <= set(
        table.column_names
    )
    for rec in table:
        row = rows[rec["extra_info"]["uid"]]
        truth = json.loads(rec["reward_model"]["ground_truth"])
        payload = json.loads(row["payload"])
        assert truth["action"] == payload["action"] and truth["bbox"] == payload.get("bbox")
        assert truth["tolerance"] == 40 and rec["reward_model"]["style"] == "rule"
        assert get_codec("agentcpm").parse(truth["formatted"], Screen(*truth["screen"])).core() == (
            Action.model_validate(payload["action"]).core()
        )
        assert rec["prompt"][0]["content"].count("<image>") == len(rec["images"]) == len(row["images"])
        Image.open(io.BytesIO(rec["images"][0]["bytes"])).verify()
        if truth["bbox"] is not None:
            x1, y1, x2, y2 = truth["bbox"]
            x, y = truth["action"]["point"]
            assert x1 <= x <= x2 and y1 <= y <= y2


def test_hf_export_loads_with_datasets_and_has_a_card(version, tmp_path: Path) -> None:
    _, sessions, store, rows = version
    export(sessions, store, "gui", 1, "hf", str(tmp_path))
    loaded = hf.load_dataset(
        "parquet",
        data_files={
            "train": str(tmp_path / "data" / "train-*.parquet"),
            "val": str(tmp_path / "data" / "val-*.parquet"),
        },
    )
    assert len(loaded["train"]) + len(loaded["val"]) == len(rows)
    assert {r["uid"] for r in loaded["val"]} == {u for u, r in rows.items() if r["split"] == "val"}
    card = (tmp_path / "README.md").read_text()
    assert card.startswith("---\nconfigs:") and "## Lineage" in card and "rounds: 1" in card
    sample = loaded["train"][0]
    assert all((tmp_path / p).is_file() for p in sample["images"])


@pytest.mark.s3
def test_export_to_s3(version, s3_settings) -> None:
    settings, sessions, store, rows = version
    settings = settings.model_copy(update={"s3": s3_settings})
    S3ObjectStore.connect(s3_settings)  # creates the bucket
    report = export(
        sessions, store, "gui", 1, "hf", f"s3://{s3_settings.bucket}/exports/v1", settings=settings
    )
    remote = S3ObjectStore.connect(s3_settings)
    keys = set(remote.list("exports/v1/"))
    assert "exports/v1/README.md" in keys and any(k.startswith("exports/v1/data/") for k in keys)
    first = next(k for k in sorted(keys) if k.endswith(".parquet"))
    assert pl.read_parquet(io.BytesIO(remote.get(first))).height > 0
    assert sum(report.rows.values()) == len(rows)


def test_unknown_formats_are_one_clear_error(version, tmp_path: Path) -> None:
    _, sessions, store, _ = version
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="unknown export format 'alpaca'; known: sft-sharegpt"):
        export(sessions, store, "gui", 1, "alpaca", str(out))
    with pytest.raises(ConfigError, match="unknown action format"):
        export(sessions, store, "gui", 1, "hf", str(out), "androidworld2")
    assert not out.exists()  # nothing written half-way
