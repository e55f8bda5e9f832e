"""Group-wise trajectory dedup (AgentCPM-GUI §3.4) with faiss.

A trajectory's embedding is the mean of its screenshots' feature vectors, L2-normalised.
Within each group of trajectories that share a query (and, by default, an outcome:
successful with successful, failed with failed), trajectories are visited in order
(successful ones first, then shorter, then older) and one is dropped when its
cosine similarity to an already retained one exceeds the threshold. Trajectories
retained earlier (the previous dataset version) seed the group, so a new version does
not re-add what is already there. Small groups use an exact `IndexFlatIP`; a group of
`ivf_min_group` or more uses an `IndexIVFFlat` trained on the group.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import faiss
import numpy as np

from curation.overlays import K, settled
from trajforge.logs import counts

NEAR_DUPLICATE = "near_duplicate"
EXACT_DUPLICATE = "exact_duplicate"
DUPLICATE_OF_PREVIOUS = "duplicate_of_previous_version"


@dataclass(frozen=True)
class Trajectory:
    uid: str
    group: str  # the query uid
    frames: tuple[str, ...]  # screenshot hashes in order
    embedding: np.ndarray
    success: bool = False
    prior: bool = False  # already retained in an earlier version: seeds the group, never dropped


@dataclass(frozen=True)
class Decision:
    uid: str
    group: str
    kept: bool
    duplicate_of: str | None = None
    similarity: float | None = None
    reason: str | None = None


@dataclass
class DedupReport:
    groups: dict[str, tuple[int, int]] = field(default_factory=dict)  # group -> (kept, total)
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def kept(self) -> int:
        return sum(k for k, _ in self.groups.values())

    @property
    def total(self) -> int:
        return sum(n for _, n in self.groups.values())

    @property
    def retention(self) -> float:
        return self.kept / self.total if self.total else 1.0

    def render(self) -> str:
        drops = counts(self.reasons)
        return (
            f"dedup: kept {self.kept}/{self.total} trajectories ({self.retention:.0%}) "
            f"in {len(self.groups)} query groups; dropped: {drops}"
        )


def trajectory_embedding(vectors: Iterable[np.ndarray]) -> np.ndarray:
    mean = np.mean(np.stack(list(vectors)), axis=0).astype(np.float32)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm > 1e-8 else mean


COLLAPSE = 0.95  # curate.dedup_collapse


def embed_frames(
    frames: Sequence[K],
    vectors: Mapping[K, np.ndarray],
    thumbs: Mapping[K, np.ndarray] | None,
    collapse: float = COLLAPSE,
) -> np.ndarray:
    """A trajectory's embedding from its frames' vectors. With `thumbs` (grey thumbnails, see
    `curation.overlays`) the frames a dismissed dialog covered are left out first. Then a run
    of consecutive frames whose vectors' cosine exceeds `collapse` counts once: scrolling,
    typing or waiting on one screen does not make another trajectory (1 keeps every frame)."""
    kept = list(frames if thumbs is None else settled(frames, thumbs))
    runs = kept[:1]
    for f in kept[1:]:
        if float(vectors[f] @ vectors[runs[-1]]) <= collapse:
            runs.append(f)
    return trajectory_embedding(vectors[f] for f in runs)


def make_index(dim: int, train: np.ndarray, ivf_min_group: int) -> faiss.Index:
    """Exact inner product for small groups; IVF (trained on `train`) for large ones."""
    if len(train) < ivf_min_group:
        return faiss.IndexFlatIP(dim)
    nlist = max(1, int(math.sqrt(len(train))))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.train(np.ascontiguousarray(train, dtype=np.float32))
    index.nprobe = min(nlist, 16)
    return index


def dedup_group(
    trajectories: list[Trajectory], threshold: float, ivf_min_group: int = 2048
) -> list[Decision]:
    """Decisions for one query group's new trajectories; priors only seed the retained set."""
    if not trajectories:
        return []
    dim = trajectories[0].embedding.shape[0]
    priors = [t for t in trajectories if t.prior]
    fresh = sorted(
        (t for t in trajectories if not t.prior), key=lambda t: (not t.success, len(t.frames), t.uid)
    )
    index = make_index(dim, np.stack([t.embedding for t in trajectories]), ivf_min_group)
    retained: list[Trajectory] = []

    def keep(t: Trajectory) -> None:
        index.add(t.embedding.reshape(1, -1).astype(np.float32))
        retained.append(t)

    for t in priors:
        keep(t)
    out = []
    for t in fresh:
        if retained:
            sims, ids = index.search(t.embedding.reshape(1, -1).astype(np.float32), 1)
            sim, hit = float(sims[0, 0]), int(ids[0, 0])
            if hit >= 0 and sim > threshold:
                other = retained[hit]
                reason = (
                    DUPLICATE_OF_PREVIOUS
                    if other.prior
                    else EXACT_DUPLICATE
                    if other.frames == t.frames
                    else NEAR_DUPLICATE
                )
                out.append(Decision(t.uid, t.group, False, other.uid, round(sim, 6), reason))
                continue
        keep(t)
        out.append(Decision(t.uid, t.group, True))
    return out


def dedup(
    trajectories: list[Trajectory],
    threshold: float,
    ivf_min_group: int = 2048,
    within_outcome: bool = True,
) -> tuple[list[Decision], DedupReport]:
    """Decisions for every query group; `within_outcome` compares successful trajectories only
    with successful ones and failed with failed, so a failure is never dropped as a duplicate of
    a success (critics and CSRS need the negatives)."""
    groups: dict[tuple[str, bool | None], list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault((t.group, t.success if within_outcome else None), []).append(t)
    decisions: list[Decision] = []
    report = DedupReport()
    for (group, _), members in groups.items():
        made = dedup_group(members, threshold, ivf_min_group)
        decisions += made
        if made:
            kept, total = report.groups.get(group, (0, 0))
            report.groups[group] = (kept + sum(d.kept for d in made), total + len(made))
        report.reasons.update(d.reason for d in made if d.reason)
    return decisions, report
