"""Exports of a sealed dataset version for the trainers users already run.

- `sft-sharegpt`: LLaMA-Factory's multimodal sharegpt layout (`messages` with roles, an
  `images` list as long as the `<image>` tokens), one JSONL per split, the screenshots
  as files beside it, and the `dataset_info.json` entries LLaMA-Factory reads.
- `sft-messages`: ms-swift / OpenAI-style messages whose user turn holds image parts.
- `rl-verl`: verl-style Parquet rows: `prompt` (chat), `images` (PNG bytes), `ability`,
  `reward_model` with the ground-truth action, the target element's bbox and the
  tolerance (point/bbox rewards), and `extra_info` with provenance. Only samples whose
  answer is an action become RL prompts; the rest are counted as skipped.
- `hf`: Parquet files that `datasets.load_dataset("parquet", data_files=...)` reads, with
  a dataset card (README.md) written from the manifest.

Every export renders actions in the chosen format through the codecs (`--action-format`);
an action a format cannot express is skipped with a reason. Rows stream shard by shard,
so memory is bounded by the shard size. `out` is a directory or `s3://bucket/prefix`
(written locally, then uploaded file by file).
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import polars as pl
from PIL import Image
from sqlalchemy.orm import Session, sessionmaker

from storage.datasets import iter_rows, manifest, read_shard
from storage.keys import blob_key
from storage.objectstore import ObjectStore, S3ObjectStore
from trajforge.actions import Action, Screen, get_codec
from trajforge.actions.compare import DEFAULT_TOLERANCE
from trajforge.errors import ActionError, ConfigError, StorageError
from trajforge.logs import counts
from trajforge.settings import Settings

FORMATS = ("sft-sharegpt", "sft-messages", "rl-verl", "hf")
ACTION_FORMATS = ("canonical", "agentcpm", "qwen", "uitars", "mobiler1")
IMAGE_TOKEN = "<image>"


@dataclass
class ExportReport:
    format: str
    out: str
    rows: Counter[str] = field(default_factory=Counter)  # by split
    images: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # by reason
    files: list[str] = field(default_factory=list)

    def render(self) -> str:
        rows = counts(self.rows)
        skipped = counts(self.skipped)
        return (
            f"exported {sum(self.rows.values())} rows ({rows}) as {self.format} to {self.out}; "
            f"{self.images} images; skipped: {skipped}"
        )


class Writer:
    """Files of one export under a local root; images written once each, optionally downscaled."""

    def __init__(self, root: Path, store: ObjectStore, max_side: int | None) -> None:
        self.root, self.store, self.max_side = root, store, max_side
        self.images: set[str] = set()  # written as files
        self.embedded: set[str] = set()  # written into rows as bytes

    def image(self, sha: str) -> str:
        rel = f"images/{sha[:2]}/{sha}.png"
        if sha not in self.images:
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.image_bytes(sha))
            self.images.add(sha)
        return rel

    def embed(self, sha: str) -> dict[str, Any]:
        self.embedded.add(sha)
        return {"bytes": self.image_bytes(sha), "path": f"{sha}.png"}

    def image_bytes(self, sha: str) -> bytes:
        data = self.store.get(blob_key(sha))
        if self.max_side is None:
            return data
        img = Image.open(io.BytesIO(data))
        if max(img.size) <= self.max_side:
            return data
        img.thumbnail((self.max_side, self.max_side))
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        return buf.getvalue()


def render_action(row: dict[str, Any], action_format: str) -> tuple[str | None, dict[str, Any] | None]:
    """(the row's answer in `action_format`, its grounding) or (None, None) when the row has no action.

    Raises:
        ActionError: the format cannot express the action.
    """
    payload = json.loads(row["payload"])
    target = payload.get("action")
    if target is None:
        return None, None
    action = Action.model_validate(target)
    width, height = payload.get("screen") or (1080, 2400)
    text = get_codec(action_format).format(action, Screen(width, height))
    thought = payload.get("thought")
    answer = f"<think>{thought}</think>\n{text}" if thought else text
    return answer, {
        "action": target,
        "bbox": payload.get("bbox"),
        "screen": [width, height],
        "formatted": text,
    }


@contextmanager
def _target(out: str, settings: Settings | None) -> Iterator[tuple[Path, Callable[[], list[str]]]]:
    """A local directory to write into, and a finisher that lists (or uploads) what was written.

    A local export is written into a hidden sibling folder and renamed into place once complete,
    so a failure leaves nothing behind; an s3:// export is written to a temporary folder and
    uploaded file by file.
    """
    if not out.startswith("s3://"):
        yield from _local_target(Path(out))
        return
    bucket, _, prefix = out.removeprefix("s3://").partition("/")
    if not bucket or settings is None:
        raise ConfigError(
            f"export target {out!r}: give s3://BUCKET/PREFIX and the S3 settings (TRAJFORGE_S3_*)"
        )
    remote = S3ObjectStore.connect(settings.s3.model_copy(update={"bucket": bucket}))
    tmp = Path(tempfile.mkdtemp(prefix="trajforge-export-"))
    try:

        def upload() -> list[str]:
            names = []
            for path in sorted(tmp.rglob("*")):
                if path.is_file():
                    key = f"{prefix.rstrip('/')}/{path.relative_to(tmp)}".lstrip("/")
                    remote.put(key, path.read_bytes())
                    path.unlink()  # bounded disk as well: each file leaves once it is sent
                    names.append(key)
            return names

        yield tmp, upload
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _local_target(final: Path) -> Iterator[tuple[Path, Callable[[], list[str]]]]:
    if final.exists() and not final.is_dir():
        raise ConfigError(f"export target {final} is a file; give a folder path")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
    except OSError as exc:
        raise StorageError(
            f"cannot write the export to {final}: {exc.strerror or exc}; give a folder you can write to"
        ) from exc
    try:
        yield tmp, lambda: [str(p.relative_to(tmp)) for p in sorted(tmp.rglob("*")) if p.is_file()]
        if not final.exists():
            tmp.rename(final)
        else:  # an existing folder: the finished files move in (a rename each, same file system)
            for path in sorted(tmp.rglob("*")):
                if path.is_file():
                    dest = final / path.relative_to(tmp)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    path.replace(dest)
    except OSError as exc:
        raise StorageError(
            f"writing the export to {final} failed: {exc.strerror or exc}; nothing was left there"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
) -> ExportReport:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    if action_format not in ACTION_FORMATS:
        raise ConfigError(f"unknown action format {action_format!r}; known: {', '.join(ACTION_FORMATS)}")
    if max_side is not None and max_side < 1:
        raise ConfigError(f"--max-side must be a positive number of pixels, not {max_side}")
    man = manifest(sessions, store, name, version)
    report = ExportReport(fmt, out)
    with _target(out, settings) as (root, finish):
        writer = Writer(root, store, max_side)
        if fmt in ("sft-sharegpt", "sft-messages"):
            _export_sft(man, store, writer, fmt, action_format, report)
        else:
            _export_parquet(man, store, writer, fmt, action_format, tolerance, report)
        if fmt == "hf":
            (root / "README.md").write_text(dataset_card(man, action_format), encoding="utf-8")
        report.files = finish()
    report.images = len(writer.images | writer.embedded)
    return report


def _answer(row: dict[str, Any], action_format: str, report: ExportReport) -> tuple[str, dict | None] | None:
    try:
        rendered, grounding = render_action(row, action_format)
    except ActionError as exc:
        report.skipped[f"action_not_representable:{action_format}:{exc.reason}"] += 1
        return None
    return (rendered if rendered is not None else row["response"]), grounding


def _export_sft(
    man: dict[str, Any],
    store: ObjectStore,
    writer: Writer,
    fmt: str,
    action_format: str,
    report: ExportReport,
) -> None:
    files: dict[str, TextIO] = {}
    stem = f"{man['dataset']}_v{man['version']}"
    try:
        for row in iter_rows(store, man):
            answer = _answer(row, action_format, report)
            if answer is None:
                continue
            images = [writer.image(sha) for sha in row["images"]]
            if fmt == "sft-sharegpt":
                record: dict[str, Any] = {
                    "messages": [
                        {"role": "user", "content": IMAGE_TOKEN * len(images) + row["prompt"]},
                        {"role": "assistant", "content": answer[0]},
                    ],
                    "images": images,
                }
            else:
                parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": p}} for p in images]
                record = {
                    "messages": [
                        {"role": "user", "content": [*parts, {"type": "text", "text": row["prompt"]}]},
                        {"role": "assistant", "content": answer[0]},
                    ]
                }
            record["weight"] = row["weight"]
            record["meta"] = {"uid": row["uid"], "category": row["category"], "query": row["query"]}
            split = row["split"]
            if split not in files:
                files[split] = (writer.root / f"{stem}_{split}.jsonl").open("w", encoding="utf-8")
            files[split].write(json.dumps(record, ensure_ascii=False) + "\n")
            report.rows[split] += 1
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
                },
            }
            for split in sorted(files)
        }
        (writer.root / "dataset_info.json").write_text(json.dumps(info, indent=2), encoding="utf-8")


def _export_parquet(
    man: dict[str, Any],
    store: ObjectStore,
    writer: Writer,
    fmt: str,
    action_format: str,
    tolerance: int,
    report: ExportReport,
) -> None:
    """One output file per input shard, so memory stays one shard."""
    for n, shard in enumerate(man["shards"]):
        out = []
        for row in read_shard(store, shard).iter_rows(named=True):
            answer = _answer(row, action_format, report)
            if answer is None:
                continue
            if fmt == "hf":
                out.append(
                    {
                        "uid": row["uid"],
                        "category": row["category"],
                        "query": row["query"],
                        "round": row["round"],
                        "images": [writer.image(sha) for sha in row["images"]],
                        "prompt": row["prompt"],
                        "response": answer[0],
                        "weight": row["weight"],
                        "provenance": row["provenance"],
                    }
                )
                continue
            _, grounding = answer
            if grounding is None:
                report.skipped["no_action_ground_truth"] += 1
                continue
            images = [writer.embed(sha) for sha in row["images"]]
            out.append(
                {
                    "data_source": f"trajforge/{man['dataset']}",
                    "prompt": [{"role": "user", "content": IMAGE_TOKEN * len(images) + row["prompt"]}],
                    "images": images,
                    "ability": "gui_agent",
                    "reward_model": {
                        "style": "rule",
                        "ground_truth": json.dumps(
                            {**grounding, "tolerance": tolerance, "action_format": action_format},
                            ensure_ascii=False,
                        ),
                    },
                    "extra_info": {
                        "uid": row["uid"],
                        "split": row["split"],
                        "category": row["category"],
                        "query": row["query"],
                        "episode": row["episode"],
                        "step": row["step"],
                        "weight": row["weight"],
                        "provenance": row["provenance"],
                    },
                }
            )
        if out:
            split = shard["split"]
            folder = writer.root / ("data" if fmt == "hf" else "")
            folder.mkdir(parents=True, exist_ok=True)
            pl.DataFrame(out).write_parquet(folder / f"{split}-{n:05d}.parquet")
            report.rows[split] += len(out)


def dataset_card(man: dict[str, Any], action_format: str) -> str:
    """A Hugging Face dataset card from the manifest: sizes, composition, lineage, filters."""
    lineage = man["lineage"]
    lines = [
        "---",
        "configs:",
        "- config_name: default",
        "  data_files:",
        *(f"  - split: {s}\n    path: data/{s}-*.parquet" for s in sorted(man["splits"])),
        "tags: [gui-agent, trajforge]",
        "---",
        f"# {man['dataset']} v{man['version']}",
        "",
        f"Published by trajforge. Manifest format `{man['format']}`, "
        f"config hash `{man['config_hash'][:16]}`; actions rendered as `{action_format}`.",
        "",
        "## Size",
        *(f"- {split}: {n} samples" for split, n in sorted(man["splits"].items())),
        "",
        "## Composition",
        *(f"- {cat}: {n}" for cat, n in sorted(man["categories"].items())),
        "",
        "## Lineage",
        f"- rounds: {', '.join(map(str, lineage['rounds'])) or 'none'}",
        *(f"- round {p['round']}: policy {p['policy']} v{p['version']}" for p in lineage["policies"]),
        f"- critics: {', '.join(lineage['critics']) or 'none'}",
        f"- parent: {('v' + str(man['parent']['version'])) if man['parent'] else 'none'}",
        "",
        "## Filters",
        "```json",
        json.dumps(man["config"], indent=2, sort_keys=True),
        "```",
        "",
    ]
    return "\n".join(lines)
