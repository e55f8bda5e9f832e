"""The trainers' own code run on our exports, each in its own virtualenv (`.ci/run` builds them).

Shared by `tests/publish/test_trainer_recipes.py` and `bench/bench_trainer_recipes.py`:
`tap_check` exports a dataset version for a trainer in each action format, hands every
screenshot to the trainer's own image loading and Qwen2.5-VL's processor, and reads every tap
on the image as fed against its target element's box.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from sqlalchemy.orm import Session, sessionmaker

from publish.export_rows import ExportReport
from publish.exports import export
from storage.datasets import iter_rows, manifest
from storage.objectstore import ObjectStore
from trajforge.actions import ActionKind, Screen, get_codec
from trajforge.errors import ParseError

from .trainer_recipes import TRAINERS

TAPS = (ActionKind.CLICK, ActionKind.LONG_PRESS)  # the actions whose point must land in a target box
# The image as each trainer feeds it: its own loading and resize, then Qwen2.5-VL's processor
# (its published preprocessor_config: 56*56 to 28*28*16384 pixels); prints [width, height] per image.
FED = """
import io, json, sys
from transformers import Qwen2VLImageProcessor
trainer, images = sys.argv[1], json.load(open(sys.argv[2]))
processor = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=28 * 28 * 16384)
def load(path):
    if trainer == "llamafactory":
        from llamafactory.data.mm_plugin import get_mm_plugin
        plugin = get_mm_plugin("qwen2_vl", image_token="<|image_pad|>")
        return plugin._regularize_images([path], image_max_pixels=768 * 768, image_min_pixels=32 * 32)["images"][0]
    if trainer == "swift":
        from qwen_vl_utils import fetch_image
        return fetch_image({"image": path})
    from verl.utils.dataset.vision_utils import process_image
    return process_image({"bytes": open(path, "rb").read()})
sizes = {}
for path in images:
    _, h, w = processor(images=[load(path)], return_tensors="np")["image_grid_thw"][0]
    sizes[path] = [int(w) * 14, int(h) * 14]
print(json.dumps(sizes))
"""


def trainer_python(trainer: str) -> Path:
    """The trainer's virtualenv Python (it may not exist: callers say what to install)."""
    root = Path(os.environ.get("TRAJFORGE_TEST_TRAINERS", Path.home() / ".cache/trajforge"))
    return root / TRAINERS[trainer][0] / "bin/python"


def run_script(python: str, script: str, *args: str) -> object:
    """Run `script` in a trainer's Python (without our PYTHONPATH); the JSON of its last line."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [python, "-c", script, *args], capture_output=True, text=True, timeout=600, env=env, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


@dataclass
class TapCheck:
    report: ExportReport
    taps: int
    inside: int
    misses: list[tuple[str, tuple[int, int], list[float]]]  # answer, image as fed, target bbox


def tap_check(
    sessions: sessionmaker[Session],
    store: ObjectStore,
    dataset: str,
    version: int,
    trainer: str,
    formats: list[str],
    out: Path,
    preset: str = "auto",
) -> dict[str, TapCheck]:
    """Export `dataset` v`version` for `trainer` (images sized by `preset`) in each format and read
    every tap with a target box on the image as the trainer feeds it."""
    fmt = TRAINERS[trainer][1]
    targets = {}
    for row in iter_rows(store, manifest(sessions, store, dataset, version)):
        payload = json.loads(row["payload"])
        if payload.get("action") and payload.get("bbox") and payload["action"]["kind"] in TAPS:
            targets[row["uid"]] = payload["bbox"]
    found, reports = {}, {}
    for action_format in formats:
        folder = out / action_format
        reports[action_format] = export(
            sessions, store, dataset, version, fmt, str(folder), action_format, weights="keep", trainer=preset
        )
        found[action_format] = _taps(folder, fmt, targets)
    images = sorted({path for taps in found.values() for path, _, _ in taps})
    (out / "images.json").write_text(json.dumps(images))
    fed = run_script(str(trainer_python(trainer)), FED, trainer, str(out / "images.json"))
    assert isinstance(fed, dict)
    checks = {}
    for action_format, taps in found.items():
        codec, misses = get_codec(action_format), []
        for path, answer, bbox in taps:
            width, height = fed[path]
            try:  # 0-1000 of the image as fed
                point = codec.parse(answer, Screen(width, height)).point
            except ParseError:  # a pixel outside the image as fed
                point = None
            slack = 1000 / min(width, height)  # a pixel's rounding
            x1, y1, x2, y2 = bbox
            if point is None or not (
                x1 - slack <= point[0] <= x2 + slack and y1 - slack <= point[1] <= y2 + slack
            ):
                misses.append((answer, (width, height), bbox))
        checks[action_format] = TapCheck(reports[action_format], len(taps), len(taps) - len(misses), misses)
    return checks


def _taps(out: Path, fmt: str, targets: dict[str, list[float]]) -> list[tuple[str, str, list[float]]]:
    """(current screenshot's path, answer, target bbox 0-1000) of every tap row of an export."""
    found = []
    if fmt == "rl-verl":
        for split in ("train", "val"):
            for row in pl.read_parquet(out / f"{split}.parquet").to_dicts():
                uid = row["extra_info"]["uid"]
                if uid in targets:
                    data = row["images"][-1]["bytes"]
                    path = out.parent / f"{hashlib.sha256(data).hexdigest()}.png"  # each image once
                    if not path.exists():
                        path.write_bytes(data)
                    found.append(
                        (str(path), json.loads(row["reward_model"]["ground_truth"])["formatted"], uid)
                    )
    else:
        for file in out.glob("*.jsonl"):
            for line in file.read_text().splitlines():
                record = json.loads(line)
                if record["meta"]["uid"] in targets:
                    found.append(
                        (
                            str(out / record["images"][-1]),
                            record["messages"][-1]["content"],
                            record["meta"]["uid"],
                        )
                    )
    return [(path, answer, targets[uid]) for path, answer, uid in found]
