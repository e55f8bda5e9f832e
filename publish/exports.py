"""Exports of a sealed dataset version for the trainers users already run.

- `sft-sharegpt`: LLaMA-Factory's multimodal sharegpt layout (`messages` with a system turn,
  an `images` list as long as the `<image>` tokens), one JSONL per split, the screenshots as
  files beside it, and the `dataset_info.json` LLaMA-Factory reads (`dataset_dir: <export>`).
- `sft-messages`: ms-swift's standard messages (`messages` with string contents, `<image>` tags,
  an `images` list), one JSONL per split; swift reads it with `--dataset FILE`.
- `rl-verl`: one verl Parquet per split (`train.parquet`, `val.parquet`): `prompt` (system +
  user chat), `images` (PNG bytes), `ability`, `reward_model` with the ground truth that
  `trajforge/rewards.py` scores, `extra_info` with `index` and provenance. Only samples whose
  answer is an action become RL prompts; the rest are counted as skipped.
- `hf`: Parquet files that `datasets.load_dataset` reads with the screenshots as an `Image`
  feature (embedded bytes), and a dataset card (README.md) describing columns, coordinates,
  action format and lineage.

Images and coordinates are written for the trainer the export is for (`trainer`; by default the
format's own: LLaMA-Factory for sft-sharegpt, ms-swift for sft-messages, verl for rl-verl): a
pixel-coordinate format's screenshots are written at the size that trainer feeds the model, so
its resize leaves them as they are and every answer's pixels are pixels of the image as fed.
A prompt asks for a thought only where its answer carries one (`thoughts`); an rl-verl export
writes `reward.py` beside its parquet, which verl loads without trajforge installed.

Every row's answer is written by the chosen format's codec (`--action-format`), the thought
in the format's own slot, coordinates in the space the model family predicts (for qwen,
mobiler1 and uitars15, pixels of the smart-resized image, `--max-side` included). An action a
format cannot state is skipped with a counted reason; one it states differently but with the
same effect (a direction swipe drawn as two points) is counted as converted. Every row starts
with the system prompt stating the format's action space. SFT rows are repeated `round(weight)`
times (`weights="repeat"`), because LLaMA-Factory and ms-swift drop a per-row weight; image
paths are relative to the export folder, so it can be moved (`publish.export_writer`). Rows
stream shard by shard, so memory is bounded by the shard size. `out` is a directory or
`s3://bucket/prefix` (written locally, then uploaded file by file).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TextIO, get_args

import polars as pl
from sqlalchemy.orm import Session, sessionmaker

from publish.card import trajforge_version
from publish.export_browsergym import export_browsergym
from publish.export_family import FamilyShaper
from publish.export_rows import (
    IMAGE_TOKEN,
    THOUGHTS,
    ExportReport,
    Rendered,
    dataset_card,
    has_action,
    hf_row,
    render_row,
    verl_row,
    write_hf_parquet,
    write_reward,
)
from publish.export_target import export_target
from publish.export_writer import Writer
from storage.apps import round_devices
from storage.datasets import Manifest, iter_rows, manifest, read_shard
from storage.objectstore import ObjectStore
from trajforge.actions import CODECS, misfit
from trajforge.actions.compare import DEFAULT_TOLERANCE
from trajforge.actions.space import IMAGE_TRAINERS, export_sizes
from trajforge.errors import ConfigError
from trajforge.families import PROMPT_VERSION, Family, get_family
from trajforge.progress import counted
from trajforge.settings import ExportFormat, Settings

FORMATS: tuple[str, ...] = get_args(ExportFormat)
ACTION_FORMATS = tuple(CODECS)
WEIGHTS = ("repeat", "keep")
# The trainer each format is written for unless --trainer says otherwise (hf: the images' own size).
FORMAT_TRAINER = {"sft-sharegpt": "llamafactory", "sft-messages": "swift", "rl-verl": "verl"}
Render = Callable[..., Rendered | None]  # `render_row` with the export's format, report and family


def export(
    sessions: sessionmaker[Session],
    store: ObjectStore,
    name: str,
    version: int,
    fmt: str,
    out: str,
    action_format: str = "canonical",
    max_side: int | None = None,
    tolerance: int = DEFAULT_TOLERANCE,
    settings: Settings | None = None,
    weights: str = "repeat",
    trainer: str = "auto",
    thoughts: str = "recorded",
    family: str | None = None,
    misfit_as: str | None = None,
) -> ExportReport:
    """Write dataset `name` v`version` as `fmt` to `out` (see the module docstring).

    `trainer` (llamafactory, swift, verl, none; auto: the trainer `fmt` is for) sets the image
    size a pixel-coordinate format is written at: the size that trainer feeds the model, so the
    answers' pixels land where they should on the image as fed. `thoughts` is one of THOUGHTS.
    `family` (a `trajforge.families` name) writes each action row as that family's conversation
    (`publish.export_family`), in its action format and coordinate space. An action format that
    cannot state the episodes' device is refused, or replaced by `misfit_as` where given (the
    built-in policy, which learns the canonical actions, exports `canonical` there).
    """
    fam, action_format = _family(family, fmt, action_format)
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    if action_format not in ACTION_FORMATS:
        raise ConfigError(f"unknown action format {action_format!r}; known: {', '.join(ACTION_FORMATS)}")
    _check_options(max_side, weights, thoughts)
    man = manifest(sessions, store, name, version)
    action_format = _fit_devices(sessions, man, action_format, misfit_as)
    report = ExportReport(fmt, out, trainer=(fed_by := images_trainer(fmt, trainer)))
    with export_target(out, settings) as (root, finish):
        writer = Writer(root, store, max_side, partial(export_sizes, action_format, trainer=fed_by))
        shaper = FamilyShaper(fam, sessions, writer.size_for, fmt != "rl-verl") if fam else None
        render = partial(
            render_row, action_format=action_format, report=report, thoughts=thoughts, shaper=shaper
        )
        if fmt == "browsergym":  # text only: BrowserGym's own observation and actions
            export_browsergym(man, sessions, store, root, report)
        elif fmt in ("sft-sharegpt", "sft-messages"):
            _export_sft(man, store, writer, fmt, weights, render, report)
        else:
            _export_parquet(man, store, writer, fmt, tolerance, render, report)
        _family_report(report, fam, shaper)
        if fmt == "rl-verl":
            write_reward(root)
        if fmt == "hf":
            card = dataset_card(man, action_format, sorted(report.rows))
            (root / "README.md").write_text(card, encoding="utf-8")
        marker = {"dataset": name, "version": version, "format": fmt, "action_format": action_format}
        report.files = finish({**marker, "family": family, "card": _export_card(man, report, thoughts)})
    report.images = len(writer.images | writer.embedded)
    return report


def _check_options(max_side: int | None, weights: str, thoughts: str) -> None:
    if max_side is not None and max_side < 1:
        raise ConfigError(f"--max-side must be a positive number of pixels, not {max_side}")
    if weights not in WEIGHTS:
        raise ConfigError(f"unknown --weights {weights!r}; known: {', '.join(WEIGHTS)}")
    if thoughts not in THOUGHTS:
        raise ConfigError(f"unknown --thoughts {thoughts!r}; known: {', '.join(THOUGHTS)}")


def _export_card(man: Manifest, report: ExportReport, thoughts: str) -> dict[str, Any]:
    """What the export pins beside its version's card (`publish.card`): the trainer it wrote for,
    the image sizes its coordinates assume, how thoughts were chosen, the prompt check's count."""
    return {
        "made_with": man.lineage.made_with,
        "critics": man.lineage.critics,
        "sampling": man.lineage.sampling,
        "trainer": report.trainer,
        "coordinate_sizes": dict(report.coordinate_sizes),
        "thoughts": thoughts,
        "offline_thoughts": report.offline_thoughts,
        "prompt_check": None
        if report.prompts_checked is None
        else {"compared": report.prompts_checked, "differ": report.prompt_mismatches},
        "exported_by": trajforge_version(),
    }


def _fit_devices(
    sessions: sessionmaker[Session], man: Manifest, action_format: str, instead: str | None
) -> str:
    """The action format, where it can state every device the version's episodes ran on; else
    `instead`, or ConfigError (a desktop's format on phone taps, a phone's on a desktop), before
    anything is written."""
    devices = round_devices(sessions, man.lineage.rounds)
    wrong = sorted(app for app, device in devices.items() if misfit(action_format, device))
    if wrong and instead is not None:
        return instead
    if wrong:
        kind = devices[wrong[0]]
        raise ConfigError(
            f"{man.dataset} v{man.version} holds {kind} episodes ({', '.join(wrong[:3])}), which the "
            f"{action_format} format cannot state: it is a {'desktop' if kind == 'phone' else 'phone'}'s; "
            f"export it with a {kind} format or family (or the canonical format)"
        )
    return action_format


def _family(family: str | None, fmt: str, action_format: str) -> tuple[Family | None, str]:
    """The family an export is shaped by, and the action format it answers in."""
    if fmt == "browsergym" and (family is not None or action_format != "canonical"):
        raise ConfigError(
            "the browsergym format answers in BrowserGym's own action strings; leave --family and "
            "--action-format out"
        )
    if family is None:
        return None, action_format
    fam = get_family(family)
    if action_format not in ("canonical", fam.action_format):
        raise ConfigError(
            f"--family {fam.name} answers in the {fam.action_format} format, not {action_format}; "
            "leave --action-format out"
        )
    if fmt == "hf":
        raise ConfigError(
            "an hf export has one system and one user column, not a family's conversation; "
            "export sft-sharegpt, sft-messages or rl-verl with --family"
        )
    return fam, fam.action_format


def _family_report(report: ExportReport, fam: Family | None, shaper: FamilyShaper | None) -> None:
    """What a family export tells its user: whose conversation the rows are, the prompt check's
    counts, the history steps the family could not state."""
    if fam is None or shaper is None:
        return
    report.notes.append(
        f"action rows are {fam.name}'s conversation ({fam.source}; prompt {PROMPT_VERSION}); "
        f"roll a checkpoint trained on them out with policy.family: {fam.name}"
    )
    report.prompts_checked, report.prompt_mismatches = shaper.checked, shaper.mismatched
    report.notes += shaper.notes()


def images_trainer(fmt: str, trainer: str) -> str | None:
    """The trainer whose image size the export writes for (None: the images' own size)."""
    if trainer not in IMAGE_TRAINERS:
        raise ConfigError(f"unknown --trainer {trainer!r}; known: {', '.join(IMAGE_TRAINERS)}")
    if trainer == "auto":
        return FORMAT_TRAINER.get(fmt)
    return None if trainer == "none" else trainer


def _export_sft(
    man: Manifest,
    store: ObjectStore,
    writer: Writer,
    fmt: str,
    weights: str,
    render: Render,
    report: ExportReport,
) -> None:
    files: dict[str, TextIO] = {}
    stem = f"{man.dataset}_v{man.version}"
    try:
        for row in counted(iter_rows(store, man), "export: rows", sum(sh.rows for sh in man.shards)):
            writer.image(row["images"][-1])  # its exported size sets the answer's coordinates
            rendered = render(row, size=writer.sizes[row["images"][-1]])
            if rendered is None:
                continue
            images = [writer.image(sha) for sha in rendered.shown(row)]
            # Every content a string (the images as <image> tags, their paths in `images`): a loader
            # that infers types over the file (datasets, ms-swift) then keeps every answer a string.
            record: dict[str, Any] = {
                "messages": rendered.chat
                or [
                    {"role": "system", "content": rendered.system},
                    {"role": "user", "content": IMAGE_TOKEN * len(images) + row["prompt"]},
                    {"role": "assistant", "content": rendered.answer},
                ],
                "images": images,
            }
            report.measure(rendered, row, writer.sizes)
            record["weight"] = row["weight"]
            record["meta"] = {"uid": row["uid"], "category": row["category"], "query": row["query"]}
            split = row["split"]
            if split not in files:
                files[split] = (writer.root / f"{stem}_{split}.jsonl").open("w", encoding="utf-8")
            copies = max(1, round(row["weight"])) if weights == "repeat" else 1
            line = json.dumps(record, ensure_ascii=False) + "\n"
            files[split].write(line * copies)
            report.rows[split] += copies
            report.repeated += copies - 1
    finally:
        for f in files.values():
            f.close()
    if fmt == "sft-sharegpt":
        info = {
            f"{stem}_{split}": {
                "file_name": f"{stem}_{split}.jsonl",
                "formatting": "sharegpt",
                "columns": {"messages": "messages", "images": "images"},
                "tags": {
                    "role_tag": "role",
                    "content_tag": "content",
                    "user_tag": "user",
                    "assistant_tag": "assistant",
                    "system_tag": "system",
                },
            }
            for split in sorted(files)
        }
        (writer.root / "dataset_info.json").write_text(json.dumps(info, indent=2), encoding="utf-8")


# The share of train's queries moved to val when the version's val split has no action rows.
VAL_FROM_TRAIN = 0.05


def _val_from_train(train: pl.LazyFrame, report: ExportReport) -> dict[str, pl.LazyFrame]:
    """verl's trainer needs a val file with rows (its recipe passes data.val_files): when the
    version's val split holds no action rows, whole queries move from train to val (the
    lowest-hashed 5%, at least one), so no query is in both. One query alone stays in train."""
    query = pl.col("extra_info").struct.field("query")
    queries = sorted(train.select(query.unique()).collect().to_series().to_list(), key=_stable_hash)
    if len(queries) < 2:
        report.notes.append("no val.parquet: the val split has no action rows and train has one query")
        return {"train": train}
    moved = queries[: max(1, int(len(queries) * VAL_FROM_TRAIN))]
    in_val = query.is_in(moved)
    val = train.filter(in_val).with_columns(
        pl.col("extra_info").struct.with_fields(pl.lit("val").alias("split"))
    )
    report.rows["val"] = int(val.select(pl.len()).collect().item())
    report.rows["train"] -= report.rows["val"]
    report.notes.append(
        f"val.parquet: the val split had no action rows, so {len(moved)} of {len(queries)} train queries "
        f"({report.rows['val']} rows) moved to val"
    )
    return {"train": train.filter(~in_val), "val": val}


def _stable_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _export_parquet(
    man: Manifest,
    store: ObjectStore,
    writer: Writer,
    fmt: str,
    tolerance: int,
    render: Render,
    report: ExportReport,
) -> None:
    """A part per input shard (memory stays one shard); rl-verl's parts then stream into a file per split."""
    parts: dict[str, list[Path]] = {}
    folder = writer.root / ("data" if fmt == "hf" else ".parts")
    folder.mkdir(parents=True, exist_ok=True)
    for n, shard in enumerate(counted(man.shards, "export: shards", len(man.shards))):
        out = []
        split = shard.split
        for row in read_shard(store, shard).iter_rows(named=True):
            if fmt == "rl-verl" and not has_action(row):  # skipped before its images are read
                report.skipped["no_action_ground_truth"] += 1
                continue
            writer.embed(row["images"][-1])  # its exported size sets the answer's coordinates
            rendered = render(row, size=writer.sizes[row["images"][-1]])
            if rendered is None:
                continue
            images = [writer.embed(sha) for sha in rendered.shown(row)]
            if fmt == "hf":
                out.append(hf_row(row, images, rendered))
            else:
                out.append(verl_row(man, row, images, rendered, tolerance, report.rows[split] + len(out)))
            report.measure(rendered, row, writer.sizes)
        if out:
            path = folder / f"{split}-{n:05d}.parquet"
            if fmt == "hf":
                write_hf_parquet(out, path)
            else:
                pl.DataFrame(out).write_parquet(path)
            parts.setdefault(split, []).append(path)
            report.rows[split] += len(out)
    if fmt == "rl-verl":
        frames = {split: pl.scan_parquet(paths) for split, paths in parts.items()}
        if "val" not in frames and "train" in frames:
            frames = _val_from_train(frames["train"], report)
        for split, frame in frames.items():
            frame.sink_parquet(writer.root / f"{split}.parquet")
        shutil.rmtree(folder)
