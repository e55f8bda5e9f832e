"""Group-wise trajectory dedup (AgentCPM-GUI §3.4): semantics, priors, flat vs IVF."""

from __future__ import annotations

import numpy as np

from curation.dedup import Trajectory, dedup, dedup_group, embed_frames, make_index


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def traj(uid: str, v: np.ndarray, group: str = "q", success: bool = False, prior: bool = False, n: int = 3):
    return Trajectory(uid, group, tuple(f"{uid}-{i}" for i in range(n)), v, success, prior)


def test_a_trajectory_is_dropped_only_for_a_retained_near_duplicate_in_its_own_group() -> None:
    a = unit(1, 0, 0)
    b = unit(1, 0.2, 0)  # cos(a, b) ~ 0.98
    c = unit(1, 0.45, 0)  # cos(b, c) ~ 0.98 but cos(a, c) ~ 0.91
    decisions, report = dedup(
        [traj("a", a), traj("b", b), traj("c", c), traj("other", a, group="q2")], threshold=0.95
    )
    by = {d.uid: d for d in decisions}
    assert by["a"].kept and by["other"].kept  # the same embedding in another query group stays
    assert not by["b"].kept and by["b"].duplicate_of == "a" and (by["b"].similarity or 0) > 0.95
    assert by["b"].reason == "near_duplicate"
    assert by["c"].kept  # compared with what was retained (a), not with the dropped b
    assert report.groups == {"q": (2, 3), "q2": (1, 1)} and report.retention == 0.75
    assert report.reasons == {"near_duplicate": 1}


def test_successful_trajectories_are_retained_first_and_exact_copies_are_named() -> None:
    v = unit(0, 1, 1)
    failed = traj("a-failed", v)
    won = traj("z-won", v, success=True)
    copy = Trajectory("copy", "q", won.frames, v)
    decisions = {d.uid: d for d in dedup_group([failed, won, copy], threshold=0.9)}
    assert decisions["z-won"].kept
    assert decisions["a-failed"].reason == "near_duplicate"  # same embedding, other frames
    assert decisions["copy"].reason == "exact_duplicate" and decisions["copy"].duplicate_of == "z-won"


def test_by_default_a_failure_is_never_dropped_as_a_duplicate_of_a_success() -> None:
    v = unit(0, 1, 1)
    rows = [
        traj("won", v, success=True),
        traj("lost", v),
        traj("lost-again", v),
        traj("won-again", v, success=True),
    ]
    within, report = dedup(rows, threshold=0.9)
    assert {d.uid: (d.kept, d.duplicate_of) for d in within} == {
        "won": (True, None),
        "won-again": (False, "won"),
        "lost": (True, None),  # the negative example stays for the critics and CSRS
        "lost-again": (False, "lost"),
    }
    assert report.groups == {"q": (2, 4)} and report.reasons == {"near_duplicate": 2}
    across, _ = dedup(rows, threshold=0.9, within_outcome=False)
    assert [d.uid for d in across if d.kept] == ["won"]


def test_priors_from_the_previous_version_seed_the_group_and_are_never_redecided() -> None:
    v = unit(1, 1, 0)
    decisions = dedup_group([traj("old", v, prior=True), traj("new", v), traj("fresh", unit(0, 0, 1))], 0.95)
    assert sorted((d.uid, d.kept, d.reason) for d in decisions) == [
        ("fresh", True, None),
        ("new", False, "duplicate_of_previous_version"),
    ]


def test_large_groups_use_ivf_and_decide_like_the_exact_index() -> None:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(40, 64)).astype(np.float32)
    rows = []
    for i in range(3000):  # 40 clusters of near-duplicates
        v = centres[i % 40] + 0.01 * rng.normal(size=64).astype(np.float32)
        rows.append(traj(f"t{i:04d}", v / np.linalg.norm(v)))
    assert type(make_index(64, np.stack([t.embedding for t in rows]), ivf_min_group=2048)).__name__ == (
        "IndexIVFFlat"
    )
    flat = dedup_group(rows, 0.95, ivf_min_group=10_000)
    ivf = dedup_group(rows, 0.95, ivf_min_group=2048)
    assert sum(d.kept for d in flat) == 40
    assert [d.kept for d in ivf] == [d.kept for d in flat]


def test_a_run_of_frames_on_one_screen_counts_once_in_the_embedding() -> None:
    rng = np.random.default_rng(0)
    a, b, c = (v / np.linalg.norm(v) for v in rng.normal(size=(3, 16)).astype(np.float32))
    scrolled = (a + 0.05 * b) / np.linalg.norm(a + 0.05 * b)  # screen a, scrolled: cosine > 0.95
    vectors = {"a": a, "a2": scrolled, "b": b, "c": c}
    direct = embed_frames(["a", "b", "c"], vectors, None)
    dwelt = embed_frames(["a", "a2", "a", "b", "c"], vectors, None)
    assert float(direct @ dwelt) > 0.9999
    assert float(direct @ embed_frames(["a", "a2", "a", "b", "c"], vectors, None, collapse=1.0)) < 0.97
    looped = embed_frames(["a", "b", "a", "c"], vectors, None)  # a revisit is not a run: it counts
    assert float(direct @ looped) < 0.99
