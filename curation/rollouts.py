"""A round's rollouts as curation sees them: per query group, with outcomes and step labels.

An episode's outcome is handed in, as `critics.outcomes` decided it (an anchor, else the
calibrated critics' consensus; None when a human must decide). Step labels are the stored step-critic
judgments (a model critic's when present).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from sqlalchemy.orm import Session, sessionmaker

from storage.episodes import round_episodes, round_step_judgments, stored_step_verdicts
from trajforge.domain import Query, StepView, describe
from trajforge.verdicts import Outcome


@dataclass
class Rollout:
    episode_id: int
    uid: str
    query: Query
    steps: list[StepView]
    labels: list[str]  # GOOD | NEUTRAL | HARMFUL per step
    success: bool | None  # None: no anchor and no verifier verdict

    @cached_property
    def said(self) -> list[str]:
        """Every step in words, described once per rollout (each of its steps' histories reads them)."""
        return [describe(v.act, v) if v.act else "(unparsed output)" for v in self.steps]

    def words(self, upto: int) -> list[str]:
        """The steps before `upto` in words (the history a policy is shown)."""
        return self.said[:upto]


def load_rollouts(
    sessions: sessionmaker[Session], round_id: int, outcomes: Mapping[int, Outcome]
) -> list[Rollout]:
    """The judged round's rollouts, with their decided outcomes (by episode id) and stored step labels.

    Raises:
        StageError: the round has steps without a step-critic label (not judged yet).
    """
    out = []
    with sessions() as s:
        judged = round_step_judgments(s, round_id)
        for episode, query, steps in round_episodes(s, round_id):
            verdicts = stored_step_verdicts(judged, round_id, steps)
            views = [st.view() for st in steps]
            labels: list[str] = [v.label for v in verdicts]
            out.append(Rollout(episode.id, episode.uid, query, views, labels, outcomes[episode.id].success))
    return out


def by_query(rollouts: list[Rollout]) -> dict[str, list[Rollout]]:
    groups: dict[str, list[Rollout]] = {}
    for r in rollouts:
        groups.setdefault(r.query.uid, []).append(r)
    return groups


def pass_rate(group: list[Rollout]) -> float:
    judged = [r.success for r in group if r.success is not None]
    return sum(judged) / len(judged) if judged else 0.0
