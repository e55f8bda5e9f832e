"""Every export format loaded back with the real readers and checked sample by sample."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import datasets as hf
import polars as pl
import pytest
from PIL import Image

from publish.export_target import MARKER
from publish.exports import ACTION_FORMATS, export
from storage.objectstore import S3ObjectStore
from trajforge.actions import Action, Screen, get_codec, misfit
from trajforge.actions.compare import mismatch
from trajforge.actions.space import KNOWLEDGE_SYSTEM, smart_resize
from trajforge.errors import ConfigError


def _action(row: dict) -> Action | None:
    target = json.loads(row["payload"]).get("action")
    return Action.model_validate(target) if target else None


@pytest.mark.parametrize("action_format", ["qwen", "uitars"])
def test_sharegpt_matches_llama_factory_and_actions_reparse(
    version, tmp_path: Path, action_format: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, sessions, store, rows = version
    out = tmp_path / "export"
    report = export(sessions, store, "gui", 1, "sft-sharegpt", str(out), action_format, max_side=540)
    info = json.loads((out / "dataset_info.json").read_text())
    assert set(info) == {"gui_v1_train", "gui_v1_val"}
    assert info["gui_v1_train"]["formatting"] == "sharegpt"
    assert info["gui_v1_train"]["columns"] == {"messages": "messages", "images": "images"}
    assert info["gui_v1_train"]["tags"]["system_tag"] == "system"
    codec = get_codec(action_format)
    moved = tmp_path / "moved"
    out.rename(moved)  # an export can be moved: its image paths are relative to its folder
    out = moved
    monkeypatch.chdir(tmp_path.parent)  # LLaMA-Factory resolves them against dataset_dir, not the cwd
    seen, copies = 0, Counter[str]()
    for entry in info.values():
        for line in (out / entry["file_name"]).read_text().splitlines():
            record = json.loads(line)
            system, user, answer = record["messages"]
            assert (system["role"], user["role"], answer["role"]) == ("system", "user", "assistant")
            row = rows[record["meta"]["uid"]]
            action = _action(row)
            contract = "Action Space" if action_format == "uitars" else "<tools>"
            # an action row states its format's action space; a question states none
            assert (contract in system["content"]) == (action is not None)
            assert user["content"].count("<image>") == len(record["images"]) >= 1
            for path in record["images"]:
                assert not Path(path).is_absolute()
                with Image.open(out / path) as img:
                    # downscaled from 1080x2400 and written so: LLaMA-Factory's processor feeds it
                    # on its 28-pixel grid (252x532), the resize a written 252x532 would have saved
                    assert img.size == (243, 540) and smart_resize(*img.size) == (252, 532)
            if action is not None:
                # qwen speaks pixels of the image as fed (252x532), uitars 0-1000
                screen = Screen(252, 532) if action_format == "qwen" else Screen(243, 540)
                parsed = codec.parse(answer["content"], screen).core()
                assert parsed.kind == action.kind and mismatch(parsed, action.core(), [], screen, 4) is None
                thought = json.loads(row["payload"]).get("thought")
                if thought:
                    assert codec.parse(answer["content"], screen).thought == thought
            copies[record["meta"]["uid"]] += 1
            seen += 1
    assert seen == sum(report.rows.values())
    for uid, n in copies.items():
        assert n == max(1, round(rows[uid]["weight"]))  # weight honoured by repetition
    assert report.repeated == seen - len(copies)
    assert len(copies) == len(rows) - sum(report.skipped.values())


def test_weights_kept_writes_each_row_once(version, tmp_path: Path) -> None:
    _, sessions, store, rows = version
    report = export(
        sessions, store, "gui", 1, "sft-sharegpt", str(tmp_path / "kept"), "canonical", weights="keep"
    )
    assert report.repeated == 0 and sum(report.rows.values()) == len(rows)
    with pytest.raises(ConfigError, match="unknown --weights 'double'; known: repeat, keep"):
        export(sessions, store, "gui", 1, "sft-sharegpt", str(tmp_path / "x"), weights="double")


def test_messages_are_swift_standard_and_every_answer_stays_a_string(version, tmp_path: Path) -> None:
    """Answers that look like JSON (canonical, agentcpm) come back from `datasets`' JSON reader
    as the same strings: every content is a string, the images are `<image>` tags and paths."""
    _, sessions, store, rows = version
    for action_format in ("canonical", "agentcpm"):
        out = tmp_path / action_format
        export(sessions, store, "gui", 1, "sft-messages", str(out), action_format, weights="keep")
        path = out / "gui_v1_train.jsonl"
        written = [json.loads(line) for line in path.read_text().splitlines()]
        loaded = hf.load_dataset("json", data_files=str(path), split="train")
        assert len(loaded) == len(written)
        for record, back in zip(written, loaded, strict=True):
            system, user, _ = record["messages"]
            knowledge = _action(rows[record["meta"]["uid"]]) is None
            assert system["role"] == "system" and ("JSON" in system["content"]) != knowledge
            assert user["content"].count("<image>") == len(record["images"]) >= 1
            assert all(not Path(p).is_absolute() and (out / p).is_file() for p in record["images"])
            assert [m["content"] for m in back["messages"]] == [m["content"] for m in record["messages"]]
            assert all(isinstance(m["content"], str) for m in back["messages"])


# What an action contract says, in some family: none of it may reach a question's prompt.
CONTRACT_WORDS = ("tool_call", "Action:", "POINT", "action_type", '"kind"', "<think>", "mobile_use", "Schema")


def test_no_knowledge_row_carries_an_action_contract_in_any_family(version, tmp_path: Path) -> None:
    """Knowledge rows (Step-GUI §2.1.4) are questions answered in prose: in every action format their
    system prompt states no action space, while every action row's states its format's."""
    _, sessions, store, rows = version
    for action_format in (
        f for f in ACTION_FORMATS if not misfit(f, "phone")
    ):  # desktop ones: the desktop loop
        out = tmp_path / action_format
        # the prompts are the point here, not the images: small ones keep the test fast
        export(
            sessions, store, "gui", 1, "sft-messages", str(out), action_format, max_side=320, weights="keep"
        )
        kinds: Counter[str] = Counter()
        for file in out.glob("*.jsonl"):
            for line in file.read_text().splitlines():
                record = json.loads(line)
                category, system = record["meta"]["category"], record["messages"][0]["content"]
                kinds[category] += 1
                if _action(rows[record["meta"]["uid"]]) is not None:
                    assert system != KNOWLEDGE_SYSTEM, (action_format, category)
                else:
                    assert system == KNOWLEDGE_SYSTEM, (action_format, category, system[:200])
                    assert not any(word in system for word in CONTRACT_WORDS)
        assert len(kinds) >= 6 and "action_prediction" in kinds, (action_format, kinds)


def test_verl_rows_carry_the_ground_truth_of_the_source_step(version, tmp_path: Path) -> None:
    _, sessions, store, rows = version
    tmp_path = tmp_path / "verl"
    report = export(sessions, store, "gui", 1, "rl-verl", str(tmp_path), "agentcpm")
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [MARKER, "reward.py", "reward_lib", "train.parquet", "val.parquet"]  # a split a file
    table = hf.load_dataset("parquet", data_files=str(tmp_path / "train.parquet"), split="train")
    assert len(table) == report.rows["train"] and report.skipped["no_action_ground_truth"] > 0
    assert {"data_source", "prompt", "images", "ability", "reward_model", "extra_info"} <= set(
        table.column_names
    )
    assert [rec["extra_info"]["index"] for rec in table] == list(range(len(table)))
    assert report.max_image_tokens == 39 * 86  # one 1080x2400 screenshot: 1092x2408 after smart_resize
    assert report.prompt_length_hint() > report.max_image_tokens
    for rec in table:
        row = rows[rec["extra_info"]["uid"]]
        truth = json.loads(rec["reward_model"]["ground_truth"])
        payload = json.loads(row["payload"])
        assert truth["action"] == payload["action"] and truth["bbox"] == payload.get("bbox")
        assert truth["tolerance"] == 40 and rec["reward_model"]["style"] == "rule"
        assert get_codec("agentcpm").parse(truth["formatted"], Screen(*truth["screen"])).core() == (
            Action.model_validate(payload["action"]).core()
        )
        system, user = rec["prompt"]
        assert system["role"] == "system" and '{"POINT":[x,y]}' in system["content"]
        assert user["content"].count("<image>") == len(rec["images"]) == len(row["images"])
        Image.open(io.BytesIO(rec["images"][0]["bytes"])).verify()
        if truth["bbox"] is not None:
            x1, y1, x2, y2 = truth["bbox"]
            x, y = truth["action"]["point"]
            assert x1 <= x <= x2 and y1 <= y <= y2


def test_hf_export_loads_with_datasets_and_has_a_card(version, tmp_path: Path) -> None:
    _, sessions, store, rows = version
    tmp_path = tmp_path / "hf"
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
    assert isinstance(loaded["train"].features["images"].feature, hf.Image)  # a Hub upload shows them
    assert sample["images"][0].size == (1080, 2400) and sample["system"]
    for needle in ("## Columns", "## Action format and coordinates", "relative, 0-1000", "dataset_info:"):
        assert needle in card
    whole = hf.load_dataset(str(tmp_path))  # the card's configs and features, as from the Hub
    assert isinstance(whole["train"].features["images"].feature, hf.Image)


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


def test_a_desktop_format_on_phone_episodes_is_one_error_before_anything_is_written(
    version, tmp_path: Path
) -> None:
    _, sessions, store, _ = version
    out = tmp_path / "out"
    for action_format, family in (("pyautogui", None), ("canonical", "qwen25vl-computer")):
        with pytest.raises(ConfigError, match=r"gui v1 holds phone episodes \(.*\), which the") as err:
            export(sessions, store, "gui", 1, "sft-sharegpt", str(out), action_format, family=family)
        assert "\n" not in str(err.value) and "export it with a phone format" in str(err.value)
    assert not out.exists()


def test_the_browsergym_format_keeps_only_browsergym_steps_and_takes_no_family(
    version, tmp_path: Path
) -> None:
    """A phone dataset has no BrowserGym observation: every row is skipped with the reason counted
    (tests/evolve/test_browsergym_loop.py exports BrowserGym's own episodes)."""
    _, sessions, store, rows = version
    with pytest.raises(ConfigError, match="browsergym format answers in BrowserGym's own action strings"):
        export(sessions, store, "gui", 1, "browsergym", str(tmp_path / "no"), family="uitars15")
    report = export(sessions, store, "gui", 1, "browsergym", str(tmp_path / "bg"))
    assert sum(report.rows.values()) == 0 and report.skipped == {"no_browsergym_observation": len(rows)}


def test_verl_val_comes_from_whole_train_queries_when_val_has_no_action_rows(version, tmp_path: Path) -> None:
    """verl's recipe passes data.val_files: a version whose val split holds no action rows still
    gets a val.parquet, of whole queries taken out of train."""
    from publish.versions import PublishConfig, publish

    _, sessions, store, _ = version
    v2 = publish(sessions, store, "gui", PublishConfig(chunk_rows=32, val_fraction=0.0))
    assert v2.splits.keys() == {"train"}
    report = export(sessions, store, "gui", v2.version, "rl-verl", str(tmp_path / "verl"), "qwen")
    assert {"train.parquet", "val.parquet"} <= {p.name for p in (tmp_path / "verl").iterdir()}
    train, val = (pl.read_parquet(tmp_path / "verl" / f"{s}.parquet") for s in ("train", "val"))
    queries = {s: set(f["extra_info"].struct.field("query")) for s, f in (("train", train), ("val", val))}
    assert queries["val"] and not queries["train"] & queries["val"]
    assert set(val["extra_info"].struct.field("split")) == {"val"}
    assert (len(train), len(val)) == (report.rows["train"], report.rows["val"])
    assert "note: val.parquet: the val split had no action rows, so 1 of" in report.render()


def test_a_killed_exports_work_folders_are_swept_by_the_next_export(version, tmp_path: Path) -> None:
    """A killed `datasets export` leaves `.OUT.partial-PID-…`; a killed trainer export leaves
    `.rl-verl.partial-PID.partial-…` beside its own folder. The next export to the target sweeps
    those of dead processes, and keeps a live one's."""
    _, sessions, store, _ = version
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    tmp_path = tmp_path / "exports"  # beside nothing but the export
    left = [
        tmp_path / f".verl.partial-{dead.pid}-x1y2",
        tmp_path / f".verl.partial-{dead.pid}.partial-{dead.pid}-q",
        tmp_path / f"verl.partial-{dead.pid}",
    ]
    live = tmp_path / f".verl.partial-{os.getpid()}-busy"
    for folder in [*left, live]:
        (folder / "data").mkdir(parents=True)
    export(sessions, store, "gui", 1, "rl-verl", str(tmp_path / "verl"), "qwen")
    assert not any(folder.exists() for folder in left) and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "verl"])
