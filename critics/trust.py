"""How far the critics are trusted, per task, every round: what they decide and how often they are right.

For each task (app or suite task) of a round, and over all of them:

- `n`: the round's episodes with a deciding anchor (a human's, else the verifier's verdict);
- of those, the ones the critic would have decided had they no anchor (`critics.outcomes.CriticTrust`,
  the episode's own anchor left out): `precision` (right among its "success" verdicts), `npv`
  (right among its "failure" verdicts) and `accuracy`; "undefined" (None) where it gave no verdict
  of that class;
- `coverage`: of the round's episodes with no anchor, the share the critic decided;
- `labels`: the task's anchored episodes up to the round, and `labels_needed`, how many more it
  needs before the critic decides its episodes (`trust: precision`: agreeing labels that lift the
  task's estimated precision to the target; `gate`: anchors short of `trust_min_anchored`, None
  where it has them and its accuracy is under the bar; `error`: 0 where some of the task's cells are
  decided, else 1, the next label of its most promising cell);
- in OVERALL under `trust: error`: `claimed_error`, the upper bound of the error of what the critics
  decided this round (None when nothing), beside `max_label_error`.

Every rate comes with its Wilson 95% interval. The episode's own anchor is left out of what decides
it, but the other anchors of the round both set the trust and are scored here: the figures are
in-sample for the rule's settings (the report says so); `bench_critics` replays rounds with the
verifier hidden.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy.orm import Session

from critics.audit import audit_record, summary
from critics.outcomes import CriticTrust
from storage.anchors import anchors_by_episode, deciding_anchor, episode_apps
from storage.models import Episode
from trajforge.metrics import ChannelStats, wilson
from trajforge.settings import CriticSettings
from trajforge.verdicts import Outcome

OVERALL = "overall"
TRUST = "trust"  # the round stats' key the table is kept under (`critics.csrs.extract_round`)


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
    critic = CriticTrust.of(s, round_id, settings)
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
        would = critic.decide(episode_id, app) if deciding is not None else None
        for key in (app, OVERALL):
            if deciding is None:
                counts[key]["unlabelled"] += 1
                counts[key]["covered"] += decided[episode_id].source == "critic"
                continue
            counts[key]["n"] += 1
            if would is not None and would.success is not None:
                stats[key].add(would.success, deciding.label == "success")
    table = {key: _row(stats[key], counts[key], labelled, key, critic) for key in sorted(stats, key=_order)}
    if OVERALL in table:  # the realised error of what was published, from the people's audit so far
        table[OVERALL]["audit"] = summary(audit_record(s, round_id), settings.max_label_error)
    return table


def _order(key: str) -> tuple[bool, str]:
    return (key != OVERALL, key)


def _row(
    st: ChannelStats, counts: Counter[str], labelled: Counter[str], key: str, critic: CriticTrust
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
        row["labels"] = sum(labelled.values())
        if critic.error is not None:  # the error the rule claimed for what it decided, and its target
            claimed = critic.error.decision.claimed
            row["claimed_error"] = None if claimed is None else round(claimed, 4)
            row["max_label_error"] = critic.settings.max_label_error
        return row
    return row | {"labels": labelled[key], "labels_needed": _needed(critic, key, labelled[key])}


def _needed(critic: CriticTrust, app: str, labels: int) -> int | None:
    """More labels the task needs before the critic decides its episodes: by `trust: precision`, the
    agreeing labels that lift its estimated precision to the target; by `gate`, the anchors short of
    `trust_min_anchored` (None where it has them and is under the bar)."""
    settings = critic.settings
    if critic.error is not None:  # the task's cells decided: 0; else a label of its most promising cell
        return 0 if any(c[0] == app for c in critic.error.decision.chosen) else 1
    if critic.precision is not None:
        return critic.precision.labels_needed(app, settings.target_precision)
    measured = critic.gate.get(app)
    needed = max(0, settings.trust_min_anchored - labels)
    passed = measured is not None and measured.accuracy >= settings.trust_accuracy
    return needed if needed or passed else None


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
    if said := claimed_text(table.get(OVERALL, {})):
        lines.append(said)
    return lines


def claimed_text(overall: dict[str, Any]) -> str:
    """The error rule's claim for a round (`critics.error_control`) and the people's audit of it, in
    words ("" under another rule)."""
    if "max_label_error" not in overall:
        return ""
    claimed = overall.get("claimed_error")
    said = "nothing decided" if claimed is None else f"claimed error {claimed:.1%}"
    out = f"published without a person: {said} (target {overall['max_label_error']:.1%})"
    audit = overall.get("audit") or {}
    if audit.get("judged"):
        lo, hi = audit["interval"]
        out += (
            f"; audit: {audit['reversed']} of {audit['judged']} reversed by people, {audit['error']:.1%} "
            f"[{lo:.1%}, {hi:.1%}], next target {audit['target_used']:.1%}"
        )
    return out
