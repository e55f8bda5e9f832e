"""Calibration: the critics' verdicts scored against the deciding anchors (Step-GUI's CSRS).

Per critic channel, overall and per app, accuracy, precision, recall and Cohen's kappa of "the
trajectory succeeded" against the anchor that decides each episode (a human, else the
verifier); out of sample for the learned critic, whose verdict on an episode comes from a model
that never saw its query (`critics.learned.cross_judge`); the step labels seen in
successful and failed episodes; and the disagreements, which go to human review.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from critics.learned import NAME
from critics.trained import leave_one_app_out
from storage.anchors import deciding_anchor, episode_apps, reversed_verifier
from storage.db import transaction
from storage.models import Anchor, Episode, Judgment, Round, Step
from trajforge.logs import counts
from trajforge.metrics import ChannelStats, channel_row
from trajforge.verdicts import CONSENSUS, SILENT


@dataclass
class _Calibration:
    channels: dict[str, ChannelStats] = field(default_factory=dict)
    by_app: dict[str, dict[str, ChannelStats]] = field(default_factory=dict)
    by_outcome: dict[str, Counter[str]] = field(
        default_factory=lambda: {"success": Counter(), "failure": Counter()}
    )
    review: list[dict[str, Any]] = field(default_factory=list)
    sources: Counter[str] = field(default_factory=Counter)

    def add(self, s: Session, episode: Episode, app: str) -> None:
        """One episode's critic verdicts and step labels against its deciding anchor (if any)."""
        anchors = s.scalars(select(Anchor).where(Anchor.episode_id == episode.id)).all()
        anchor = deciding_anchor(anchors)
        if anchor is None:
            return
        self.sources[anchor.source] += 1
        if reversed_verifier(anchors, anchor) is not None:
            self.sources["human_overrode_verifier"] += 1
        actual = anchor.label == "success"
        judged = s.scalars(
            select(Judgment).where(Judgment.target == "episode", Judgment.target_id == episode.id)
        ).all()
        verdicts = {
            f"{j.critic}:{j.critic_version}": j.label == "correct" for j in judged if j.label not in SILENT
        }
        unsure = [f"{j.critic}:{j.critic_version}" for j in judged if j.label == "unparsed"]
        for key, predicted in verdicts.items():
            self.channels.setdefault(key, ChannelStats()).add(predicted, actual)
            self.by_app.setdefault(app, {}).setdefault(key, ChannelStats()).add(predicted, actual)
        consensus = verdicts.get(":".join(CONSENSUS))
        if len(set(verdicts.values())) > 1 or consensus not in (None, actual) or unsure:
            # disagreements and low-confidence cases go to human review
            self.review.append(
                {"episode": episode.uid, "anchor": anchor.label, "verdicts": verdicts, "unparsed": unsure}
            )
        step_ids = s.scalars(select(Step.id).where(Step.episode_id == episode.id)).all()
        labels = s.scalars(
            select(Judgment.label).where(Judgment.target == "step", Judgment.target_id.in_(step_ids))
        ).all()
        self.by_outcome["success" if actual else "failure"].update(labels)

    def as_dict(self) -> dict[str, Any]:
        return {
            "channels": {k: v.summary() for k, v in sorted(self.channels.items())},
            "by_app": {
                app: {k: v.summary() for k, v in sorted(stats.items())}
                for app, stats in sorted(self.by_app.items())
            },
            "step_labels_by_outcome": {k: dict(v) for k, v in self.by_outcome.items()},
            "review_queue": self.review,
            "anchors": dict(self.sources),
        }


def calibrate_round(sessions: sessionmaker[Session], round_id: int) -> dict[str, Any]:
    """Critic verdicts against anchors; stored in round.stats['calibration'] and returned."""
    found = _Calibration()
    with transaction(sessions) as s:
        apps = episode_apps(s, Episode.round_id == round_id)
        for episode in s.scalars(select(Episode).where(Episode.round_id == round_id)).all():
            found.add(s, episode, apps[episode.id])
        report = found.as_dict()
        report["leave_one_app_out"] = {NAME: leave_one_app_out(s, round_id)}
        rnd = s.get(Round, round_id)
        if rnd is not None:
            rnd.keep({"calibration": report})
    return report


def render_calibration(report: dict[str, Any]) -> str:
    lines = ["critic                     n    accuracy  precision  recall   tp  fp  tn  fn"]
    for name, st in report["channels"].items():
        lines.append(f"{channel_row(name, st)}  {st['tp']:3} {st['fp']:3} {st['tn']:3} {st['fn']:3}")
    for outcome, labels in report["step_labels_by_outcome"].items():
        lines.append(f"step labels in {outcome} episodes: {counts(labels)}")
    lines.append(f"review queue (disagreements and unparsed verdicts): {len(report['review_queue'])}")
    lines.append(f"anchors deciding the outcome: {counts(report.get('anchors', {}))}")
    for critic, apps in report.get("leave_one_app_out", {}).items():
        scored = ", ".join(f"{app} {st['accuracy']:.0%} of {st['n']}" for app, st in apps.items())
        lines.append(f"{critic} fitted on the other apps only: {scored or 'too few anchors'}")
    return "\n".join(lines)
