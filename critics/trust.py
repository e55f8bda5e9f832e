"""How far the critics are trusted, per task, every round: what they decide and how often they are right.

For each task (app or suite task) of a round, and over all of them:

- `n`: the round's episodes with a deciding anchor (a human's, else the verifier's verdict);
- of those, the ones the critic would have decided had they no anchor (a consensus verdict in a
  trusted task, `critics.outcomes`): `precision` (right among its "success" verdicts), `npv`
  (right among its "failure" verdicts) and `accuracy`; "undefined" (None) where it gave no verdict
  of that class;
- `coverage`: of the round's episodes with no anchor, the share the critic decided;
- `labels`: the task's anchored episodes up to the round, and `labels_needed`, how many more the
  trust gate asks before it lets the critic decide (0 once trusted; None where the task has the
  anchors but the critic's accuracy on them is below the bar, so labels alone do not make it trusted).

Every rate comes with its Wilson 95% interval. The gate measures its accuracy on the same anchored
episodes (this round's and earlier), so precision and NPV here are in-sample for the gate; the
report says so. `bench_critics` measures them out of sample.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from sqlalchemy.orm import Session

from critics.outcomes import deciding_anchor, measure_trust
from storage.anchors import anchors_by_episode, consensus_labels, episode_apps
from storage.models import Episode
from trajforge.metrics import ChannelStats
from trajforge.settings import CriticSettings
from trajforge.verdicts import Outcome

OVERALL = "overall"
TRUST = "trust"  # the round stats' key the table is kept under (`critics.csrs.extract_round`)
Z95 = 1.959964


def wilson(right: int, n: int, z: float = Z95) -> list[float] | None:
    """The Wilson score interval of `right` of `n` (None when n is 0)."""
    if n <= 0:
        return None
    p = right / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def rate(right: int, n: int) -> dict[str, Any]:
    """A rate with its count and interval; `value` None (undefined) when there is nothing to count."""
    return {
        "value": round(right / n, 4) if n else None,
        "right": right,
        "of": n,
        "interval": wilson(right, n),
    }


def trust_table(
    s: Session, round_id: int, settings: CriticSettings, decided: dict[int, Outcome]
) -> dict[str, dict[str, Any]]:
    """The per-task table of the module docstring, with OVERALL; `decided` is the round's
    `decide_outcomes`."""
    apps = episode_apps(s, Episode.round_id == round_id)
    anchors = anchors_by_episode(s, Episode.round_id == round_id)
    consensus = consensus_labels(s, Episode.round_id == round_id)
    trust = measure_trust(s, round_id)
    up_to = Episode.round_id <= round_id
    apps_up_to = episode_apps(s, up_to)
    labelled = Counter(
        apps_up_to[e]
        for e, found in anchors_by_episode(s, up_to).items()
        if deciding_anchor(found) is not None
    )
    stats: dict[str, ChannelStats] = {}
    counts: dict[str, Counter[str]] = {}
    for episode_id, app in apps.items():
        for key in (app, OVERALL):
            stats.setdefault(key, ChannelStats())
            counts.setdefault(key, Counter())
        deciding = deciding_anchor(anchors.get(episode_id, []))
        trusted = _trusted(trust.get(app), settings)
        label = consensus.get(episode_id)
        for key in (app, OVERALL):
            if deciding is None:
                counts[key]["unlabelled"] += 1
                counts[key]["covered"] += decided[episode_id].source == "critic"
                continue
            counts[key]["n"] += 1
            if trusted and label in ("correct", "incorrect"):
                stats[key].add(label == "correct", deciding.label == "success")
    return {
        key: _row(stats[key], counts[key], labelled, key, trust, settings)
        for key in sorted(stats, key=_order)
    }


def _order(key: str) -> tuple[bool, str]:
    return (key != OVERALL, key)


def _trusted(measured: Any, settings: CriticSettings) -> bool:
    return (
        measured is not None
        and measured.anchored >= settings.trust_min_anchored
        and measured.accuracy >= settings.trust_accuracy
    )


def _row(
    st: ChannelStats,
    counts: Counter[str],
    labelled: Counter[str],
    key: str,
    trust: dict[str, Any],
    settings: CriticSettings,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "n": counts["n"],
        "decided": st.n,
        "precision": rate(st.tp, st.tp + st.fp),
        "npv": rate(st.tn, st.tn + st.fn),
        "accuracy": rate(st.tp + st.tn, st.n),
        "coverage": rate(counts["covered"], counts["unlabelled"]),
    }
    if key == OVERALL:
        return row | {"labels": sum(labelled.values())}
    measured = trust.get(key)
    needed: int | None = max(0, settings.trust_min_anchored - labelled[key])
    if needed == 0 and not _trusted(measured, settings):
        needed = None  # enough labels, and still below the bar
    return row | {"labels": labelled[key], "labels_needed": needed}


def render_trust(table: dict[str, dict[str, Any]]) -> list[str]:
    """The table as text lines (the CLI's and bench's)."""

    def shown(r: dict[str, Any]) -> str:
        if r["value"] is None:
            return "undefined"
        lo, hi = r["interval"]
        return f"{r['value']:.0%} [{lo:.0%}, {hi:.0%}]"

    lines = [f"{'task':28} {'n':>4} {'precision':>18} {'npv':>18} {'accuracy':>18} {'coverage':>18} labels"]
    for key, row in table.items():
        need = row.get("labels_needed")
        more = "" if key == OVERALL or need == 0 else " (below the bar)" if need is None else f" (+{need})"
        lines.append(
            f"{key[:28]:28} {row['n']:>4} {shown(row['precision']):>18} {shown(row['npv']):>18} "
            f"{shown(row['accuracy']):>18} {shown(row['coverage']):>18} {row['labels']}{more}"
        )
    return lines
