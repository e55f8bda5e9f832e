"""The knn policy's memory: what training on an exported dataset version produced.

One row per demonstrated step of the `rl-verl` export (screenshot features, the task's
instruction, the ground-truth action and its target bbox), plus the reference steps of
guidance added at rollout time. The checkpoint is one `.npz` (vectors, weights) plus one
JSON (actions, instructions).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from rollout.policies.knn_text import TASK_PREFIX, instruction_of
from trajforge.errors import ConfigError
from trajforge.features import ThumbFeaturizer

CHECKPOINT_FORMAT = "trajforge-knn/1"


@dataclass
class Memory:
    """What training produced: one row per demonstrated step."""

    vectors: np.ndarray  # (n, dim) float32, L2-normalised screenshot features
    weights: np.ndarray  # (n,) sample weights from the dataset
    instructions: list[str]
    actions: list[dict[str, Any]]
    bboxes: list[list[int] | None]  # 0-1000, the target element
    steps: list[int]  # the step's index in its episode
    previous: list[dict[str, Any] | None]  # the episode's action before it, when that step is in the data
    featurizer: str = ThumbFeaturizer.key

    def __len__(self) -> int:
        return len(self.actions)

    def save(self, folder: Path, meta: dict[str, Any]) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(folder / "memory.npz", vectors=self.vectors, weights=self.weights)
        card = {
            "format": CHECKPOINT_FORMAT,
            "featurizer": self.featurizer,
            "instructions": self.instructions,
            "actions": self.actions,
            "bboxes": self.bboxes,
            "steps": self.steps,
            "previous": self.previous,
            **meta,
        }
        (folder / "policy.json").write_text(json.dumps(card, ensure_ascii=False), encoding="utf-8")
        return folder

    @classmethod
    def load(cls, folder: Path) -> Memory:
        card_path = folder / "policy.json"
        if not card_path.is_file():
            raise ConfigError(
                f"{folder} is not a knn checkpoint (no policy.json); train one with "
                "`python -m rollout.policies.knn --data EXPORT --out DIR`"
            )
        card = json.loads(card_path.read_text(encoding="utf-8"))
        if card.get("format") != CHECKPOINT_FORMAT:
            raise ConfigError(
                f"{folder}: checkpoint format {card.get('format')!r}, expected {CHECKPOINT_FORMAT}"
            )
        arrays = np.load(folder / "memory.npz")
        return cls(
            arrays["vectors"],
            arrays["weights"],
            card["instructions"],
            card["actions"],
            card["bboxes"],
            card["steps"],
            card["previous"],
        )


def train(rows: Iterable[dict[str, Any]]) -> Memory:
    """Build the memory from `rl-verl` rows (prompt, images, reward_model.ground_truth, extra_info)."""
    featurizer = ThumbFeaturizer()
    pngs: list[bytes] = []
    kept: list[dict[str, Any]] = []
    by_step: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        prompt = next(m["content"] for m in row["prompt"] if m["role"] == "user").replace("<image>", "")
        if not prompt.startswith(TASK_PREFIX) or not row["images"]:
            continue  # low-level instructions ("tap X") teach grounding, not the task
        truth = json.loads(row["reward_model"]["ground_truth"])
        info = row.get("extra_info") or {}
        step = int(info.get("step") or 0)
        item = {
            "weight": float(info.get("weight") or 1.0),
            "instruction": instruction_of(prompt),
            "action": truth["action"],
            "bbox": truth.get("bbox"),
            "step": step,
            "episode": str(info.get("episode") or ""),
        }
        pngs.append(row["images"][0]["bytes"])
        kept.append(item)
        by_step.setdefault((item["episode"], step), item)
    vectors = featurizer.embed(pngs) if pngs else np.zeros((0, featurizer.dim), np.float32)
    before = [by_step.get((k["episode"], k["step"] - 1)) for k in kept]
    return Memory(
        vectors,
        np.asarray([k["weight"] for k in kept], np.float32),
        [k["instruction"] for k in kept],
        [k["action"] for k in kept],
        [k["bbox"] for k in kept],
        [k["step"] for k in kept],
        [b["action"] if b else None for b in before],
    )


def demonstrated(memory: Memory, demos: list[dict[str, Any]], frames: Callable[[str], bytes]) -> Memory:
    """The memory plus reference demonstrations (guidance's reference trajectories, GUI-Owl §6.4).

    Each demo is one step: `instruction`, `screenshot` (a hash `frames` reads), `action`,
    `bbox`, `step` and `previous` (the action before it, or None); it weighs like a training row.
    """
    if not demos:
        return memory
    featurizer = ThumbFeaturizer()
    vectors = featurizer.embed([frames(d["screenshot"]) for d in demos])
    return Memory(
        np.concatenate([memory.vectors, vectors.astype(memory.vectors.dtype)]),
        np.concatenate([memory.weights, np.ones(len(demos), np.float32)]),
        memory.instructions + [d["instruction"] for d in demos],
        memory.actions + [d["action"] for d in demos],
        memory.bboxes + [d["bbox"] for d in demos],
        memory.steps + [int(d["step"]) for d in demos],
        memory.previous + [d["previous"] for d in demos],
        memory.featurizer,
    )


def train_from_export(data: Path, out: Path, split: str = "train") -> Memory:
    """Train from an `rl-verl` export directory (its `<split>.parquet`) into `out`."""
    files = sorted(data.glob(f"{split}*.parquet"))
    if not files:
        raise ConfigError(
            f"{data} holds no {split}.parquet; export the version with "
            "`trajforge datasets export VERSION --format rl-verl --out DIR`"
        )
    rows = (row for f in files for row in pl.read_parquet(f).iter_rows(named=True))
    memory = train(rows)
    memory.save(out, {"trained_on": str(data), "rows": len(memory)})
    return memory
