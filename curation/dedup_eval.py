"""How well a featuriser and threshold call duplicates, on labelled trajectory pairs.

A pair is two trajectories (lists of screenshots) and a label: duplicate or not. Each
trajectory is embedded as dedup embeds it (the mean of its frames' features, leaving out
frames a dismissed dialog covered; see `curation.dedup` and `curation.overlays`), and a pair
is called a duplicate when the cosine exceeds the threshold.
Users tune `curate.dedup_threshold` on their own pairs with `trajforge curate dedup-eval`.

The pairs file is JSON Lines, one pair per line:

    {"a": ["run1/0.png", "run1/1.png"], "b": ["run2/0.png", "run2/1.png"], "duplicate": true}

Relative paths are read from the pairs file's folder.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from curation.dedup import COLLAPSE, embed_frames
from curation.overlays import GreyThumbs
from trajforge.errors import ConfigError

Frames = Sequence[bytes]
# thresholds tried: every 0.005 up to 0.99, then every 0.001, where a trained encoder's pairs sit
SWEEP = tuple(round(float(t), 3) for t in (*np.arange(0.80, 0.99, 0.005), *np.arange(0.99, 0.9995, 0.001)))
SHOWN = (0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 0.993, 0.995, 0.997, 0.998, 0.999)  # dedup-eval's rows


@dataclass(frozen=True)
class Pair:
    a: tuple[bytes, ...]
    b: tuple[bytes, ...]
    duplicate: bool
    kind: str = ""  # an optional label for per-kind counts


@dataclass(frozen=True)
class Score:
    threshold: float
    precision: float
    recall: float

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def similarities(
    embed: Callable[[list[bytes]], np.ndarray],
    pairs: Sequence[Pair],
    skip_overlays: bool = True,
    collapse: float = COLLAPSE,
) -> list[float]:
    """The cosine of each pair's trajectory embeddings, as dedup embeds them (`skip_overlays`:
    `curate.dedup_skip_overlays`, `collapse`: `curate.dedup_collapse`); every distinct image
    embedded once."""
    distinct = list(dict.fromkeys(png for p in pairs for png in (*p.a, *p.b)))
    vectors = dict(zip(distinct, embed(distinct), strict=True)) if distinct else {}
    thumbs = dict(zip(distinct, GreyThumbs().embed(distinct), strict=True)) if skip_overlays else None
    return [
        float(embed_frames(p.a, vectors, thumbs, collapse) @ embed_frames(p.b, vectors, thumbs, collapse))
        for p in pairs
    ]


def score(sims: Sequence[float], labels: Sequence[bool], threshold: float) -> Score:
    called = [s > threshold for s in sims]
    hits = sum(c and y for c, y in zip(called, labels, strict=True))
    return Score(threshold, hits / max(sum(called), 1), hits / max(sum(labels), 1))


def choose(sims: Sequence[float], labels: Sequence[bool], grid: Sequence[float] = SWEEP) -> Score:
    """The threshold with the best F1; among ties the highest (fewest false duplicates)."""
    return max((score(sims, labels, t) for t in grid), key=lambda s: (round(s.f1, 9), s.threshold))


def read_pairs(path: Path) -> list[Pair]:
    """Pairs from a JSON Lines file; any bad line is one error naming it, before anything runs."""
    if not path.is_file():
        raise ConfigError(f"--pairs {path}: no such file; give a JSON Lines file of labelled pairs")
    pairs = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON ({exc.msg}); write one pair object per line") from exc
        if not isinstance(row, dict) or not isinstance(row.get("duplicate"), bool):
            raise ConfigError(
                f'{where}: a pair needs "a" and "b" (lists of screenshot paths) and "duplicate" '
                '(true or false), e.g. {"a": ["x/0.png"], "b": ["y/0.png"], "duplicate": true}'
            )
        sides = []
        for side in ("a", "b"):
            shots = row.get(side)
            if not isinstance(shots, list) or not shots or not all(isinstance(s, str) for s in shots):
                raise ConfigError(f'{where}: "{side}" must be a non-empty list of screenshot paths')
            files = [p if p.is_absolute() else path.parent / p for p in map(Path, shots)]
            missing = [str(f) for f in files if not f.is_file()]
            if missing:
                raise ConfigError(f'{where}: "{side}" names screenshots that do not exist: {missing[:3]}')
            sides.append(tuple(_image(f, where, side) for f in files))
        pairs.append(Pair(sides[0], sides[1], row["duplicate"], str(row.get("kind", ""))))
    if not pairs or all(p.duplicate for p in pairs) or not any(p.duplicate for p in pairs):
        raise ConfigError(
            f"{path}: precision and recall need both duplicate and distinct pairs; "
            f"found {sum(p.duplicate for p in pairs)} duplicate of {len(pairs)}"
        )
    return pairs


def write_pairs(pairs: Sequence[Pair], folder: Path) -> Path:
    """`pairs` as a folder `read_pairs` reads: each distinct screenshot once under frames/ (named
    by its hash) and pairs.jsonl beside it with paths relative to it; returns the JSONL's path."""
    frames = folder / "frames"
    frames.mkdir(parents=True, exist_ok=True)

    def paths(side: tuple[bytes, ...]) -> list[str]:
        out = []
        for png in side:
            name = f"frames/{hashlib.sha256(png).hexdigest()[:16]}.png"
            if not (folder / name).is_file():
                (folder / name).write_bytes(png)
            out.append(name)
        return out

    target = folder / "pairs.jsonl"
    rows = [{"a": paths(p.a), "b": paths(p.b), "duplicate": p.duplicate, "kind": p.kind} for p in pairs]
    target.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return target


def _image(file: Path, where: str, side: str) -> bytes:
    data = file.read_bytes()
    try:
        Image.open(io.BytesIO(data)).verify()
    except (OSError, SyntaxError) as exc:  # PIL raises both for a file that is not an image
        raise ConfigError(f'{where}: "{side}" names {file}, which is not an image ({exc})') from exc
    return data


def digest(pairs: Sequence[Pair]) -> str:
    """Names a pair set (so a report says which pairs it was measured on)."""
    h = hashlib.sha256()
    for p in pairs:
        for side in (p.a, p.b):
            for png in side:
                h.update(hashlib.sha256(png).digest())
            h.update(b"|")
        h.update(b"1" if p.duplicate else b"0")
    return h.hexdigest()[:12]
