"""Agreement figures: critics vs humans, humans vs the verifier, annotators vs each other.

Critics are measured only against what annotators decided themselves: a verdict or step label
equal to the critics' pre-fill may have been accepted unread (see `pull.independence`), so it
is counted and flagged, not used as agreement.

All figures come from what `pull` stored, so `trajforge annotate stats` needs no Label
Studio connection.
"""

from __future__ import annotations

import statistics
from collections import Counter
from itertools import combinations
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.models import Anchor, HumanAnnotation, Judgment, Step
from trajforge.logs import counts
from trajforge.metrics import ChannelStats, channel_row, kappa_text


def inter_annotator(votes_by_task: dict[int, list[str]]) -> dict[str, Any]:
    """Pairwise agreement over tasks with two or more verdicts, and a Fleiss-style kappa
    (chance agreement from the pooled label distribution), which allows any number of
    raters per task."""
    pairs = agree = 0
    pooled: Counter[str] = Counter()
    for votes in votes_by_task.values():
        if len(votes) < 2:
            continue
        pooled.update(votes)
        for a, b in combinations(votes, 2):
            pairs += 1
            agree += a == b
    total = sum(pooled.values())
    expected = sum((n / total) ** 2 for n in pooled.values()) if total else 0.0
    observed = agree / pairs if pairs else 0.0
    # undefined (None) when every verdict is one label: chance alone would agree as much
    kappa = (observed - expected) / (1 - expected) if pairs and expected < 1 else None
    tasks = sum(1 for v in votes_by_task.values() if len(v) >= 2)
    return {"tasks": tasks, "pairs": pairs, "agreement": observed, "kappa": kappa}


def annotation_stats(sessions: sessionmaker[Session]) -> dict[str, Any]:
    with sessions() as s:
        annotations = list(s.scalars(select(HumanAnnotation).where(HumanAnnotation.withdrawn.is_(False))))
        anchors: dict[int, dict[str, str]] = {}
        for a in s.scalars(select(Anchor)):
            anchors.setdefault(a.episode_id, {})[a.source] = a.label
        # only verdicts someone reached themselves measure the critics; an accepted pre-fill echoes them
        independent = {a.episode_id for a in annotations if a.independent_verdict and a.verdict is not None}
        human = {e: by["human"] for e, by in anchors.items() if "human" in by and e in independent}
        return {
            "independence": _independence(annotations),
            "critics_vs_human": _critics_vs_human(s, human),
            "steps_vs_human": _steps_vs_human(s, annotations),
            "human_vs_verifier": _human_vs_verifier(anchors),
            "inter_annotator": inter_annotator(_votes(annotations)),
            "throughput": _throughput(annotations),
        }


def _votes(annotations: list[HumanAnnotation]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for a in annotations:
        if not a.skipped and a.verdict is not None:
            out.setdefault(a.task_id, []).append(a.verdict)
    return out


def _critics_vs_human(s: Session, human: dict[int, str]) -> dict[str, dict[str, float | int]]:
    channels: dict[str, ChannelStats] = {}
    if human:
        for j in s.scalars(
            select(Judgment).where(Judgment.target == "episode", Judgment.target_id.in_(list(human)))
        ):
            if j.label in ("correct", "incorrect"):
                key = f"{j.critic}:{j.critic_version}"
                channels.setdefault(key, ChannelStats()).add(
                    j.label == "correct", human[j.target_id] == "success"
                )
    return {k: v.summary() for k, v in sorted(channels.items())}


def _steps_vs_human(s: Session, annotations: list[HumanAnnotation]) -> dict[str, dict[str, Any]]:
    """Per step critic: agreement with the humans' step labels, and the confusion pairs."""
    labelled = [
        (a.episode_id, int(i), label)
        for a in annotations
        for i, label in a.step_labels.items()
        if int(i) in a.independent_steps
    ]
    if not labelled:
        return {}
    episodes = {e for e, _, _ in labelled}
    step_ids = {
        (e, i): sid
        for sid, e, i in s.execute(
            select(Step.id, Step.episode_id, Step.index).where(Step.episode_id.in_(episodes))
        )
    }
    critic: dict[int, dict[str, str]] = {}
    for j in s.scalars(
        select(Judgment).where(Judgment.target == "step", Judgment.target_id.in_(list(step_ids.values())))
    ):
        critic.setdefault(j.target_id, {})[f"{j.critic}:{j.critic_version}"] = j.label
    out: dict[str, dict[str, Any]] = {}
    for e, i, label in labelled:
        for name, predicted in critic.get(step_ids.get((e, i), -1), {}).items():
            entry = out.setdefault(name, {"n": 0, "agree": 0, "confusion": Counter()})
            entry["n"] += 1
            entry["agree"] += predicted == label
            if predicted != label:
                entry["confusion"][f"critic {predicted} / human {label}"] += 1
    return {
        k: {"n": v["n"], "agreement": v["agree"] / v["n"], "confusion": dict(v["confusion"])}
        for k, v in sorted(out.items())
    }


def _independence(annotations: list[HumanAnnotation]) -> dict[str, int]:
    """How much of what annotators submitted they decided themselves."""
    done = [a for a in annotations if not a.skipped]
    labels = sum(len(a.step_labels) for a in done)
    independent = sum(len(a.independent_steps) for a in done)
    return {
        "annotations": len(done),
        "accepted_as_is": sum(a.accepted_as_is for a in done),
        "verdicts_independent": sum(a.independent_verdict and a.verdict is not None for a in done),
        "step_labels": labels,
        "step_labels_independent": independent,
        "step_labels_accepted": labels - independent,
    }


def _human_vs_verifier(anchors: dict[int, dict[str, str]]) -> dict[str, Any]:
    both = [(by["human"], by["verifier"]) for by in anchors.values() if "human" in by and "verifier" in by]
    agree = sum(h == v for h, v in both)
    overridden = Counter(f"verifier {v} -> human {h}" for h, v in both if h != v)
    return {"n": len(both), "agreement": agree / len(both) if both else 0.0, "overrides": dict(overridden)}


def _throughput(annotations: list[HumanAnnotation]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for who in sorted({a.annotator for a in annotations}):
        mine = [a for a in annotations if a.annotator == who]
        times = [a.lead_time_s for a in mine if a.lead_time_s is not None]
        stamps = sorted(a.ls_updated_at for a in mine)
        span_h = (stamps[-1] - stamps[0]).total_seconds() / 3600 if len(stamps) > 1 else 0.0
        out[who] = {
            "annotations": sum(1 for a in mine if not a.skipped),
            "accepted_as_is": sum(1 for a in mine if a.accepted_as_is),
            "skipped": sum(1 for a in mine if a.skipped),
            "median_lead_time_s": statistics.median(times) if times else None,
            "per_hour": round(len(mine) / span_h, 1) if span_h > 0 else None,
        }
    return out


def render_stats(stats: dict[str, Any]) -> str:
    ind = stats["independence"]
    lines = [
        f"independence: {ind['annotations']} annotations, {ind['accepted_as_is']} submitted the critics' "
        f"pre-fill unchanged (flagged); {ind['verdicts_independent']} verdicts and "
        f"{ind['step_labels_independent']} of {ind['step_labels']} step labels set by the annotator "
        "(agreement below counts only these)",
        "critic vs human (independent trajectory verdicts)  n  accuracy  precision  recall",
    ]
    for name, st in stats["critics_vs_human"].items():
        lines.append("  " + channel_row(name, st, width=38))
    if not stats["critics_vs_human"]:
        lines.append("  (no human anchors yet: run `trajforge annotate pull`)")
    lines.append("step critic vs human step labels")
    for name, st in stats["steps_vs_human"].items():
        lines.append(
            f"  {name:38} {st['n']:4}  {st['agreement']:8.1%}  disagreements: {counts(st['confusion'])}"
        )
    hv = stats["human_vs_verifier"]
    lines.append(
        f"human vs verifier: {hv['n']} episodes, agreement {hv['agreement']:.1%}; "
        f"overrides: {counts(hv['overrides'])}"
    )
    ia = stats["inter_annotator"]
    lines.append(
        f"inter-annotator: {ia['tasks']} tasks with 2+ verdicts, {ia['pairs']} pairs, "
        f"agreement {ia['agreement']:.1%}, kappa {kappa_text(ia['kappa'])}"
    )
    lines.append("annotator                      done  as-is  skipped  median lead time  per hour")
    for who, t in stats["throughput"].items():
        lead = f"{t['median_lead_time_s']:.1f} s" if t["median_lead_time_s"] is not None else "-"
        rate = t["per_hour"] if t["per_hour"] is not None else "-"
        lines.append(
            f"  {who:28} {t['annotations']:4}  {t['accepted_as_is']:5}  {t['skipped']:7}  "
            f"{lead:>16}  {rate:>8}"
        )
    return "\n".join(lines)
