"""A round's rollouts as curation sees them: per query group, with outcomes and step labels.

An episode's outcome is its anchor (a human anchor overrides the verifier's), else the
verifier's verdict. Step labels are the stored step-critic judgments (a model critic's
when present), else the offline step critic's, computed the same way judging does.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from critics.heuristic import HeuristicStepCritic, StepView, describe
from critics.judge import deciding_anchor, round_episodes, step_view
from storage.models import Anchor, Judgment
from trajforge.actions import Action
from trajforge.domain import Query

STEP_CRITICS = ("llm_step", "heuristic_step")  # preference order of stored step labels


@dataclass
class Rollout:
    episode_id: int
    uid: str
    query: Query
    steps: list[StepView]
    labels: list[str]  # GOOD | NEUTRAL | HARMFUL per step
    success: bool | None  # None: no anchor and no verifier verdict

    def words(self, upto: int) -> list[str]:
        """The steps before `upto` in words (the history a policy is shown)."""
        return [
            describe(Action.model_validate(v.action), v) if v.action else "(unparsed output)"
            for v in self.steps[:upto]
        ]


def load_rollouts(sessions: sessionmaker[Session], round_id: int) -> list[Rollout]:
    critic = HeuristicStepCritic()
    out = []
    with sessions() as s:
        for episode, query, steps in round_episodes(s, round_id):
            anchor = deciding_anchor(s.scalars(select(Anchor).where(Anchor.episode_id == episode.id)).all())
            success = anchor.label == "success" if anchor is not None else episode.verifier_success
            views = [step_view(st) for st in steps]
            stored: dict[int, dict[str, str]] = {}
            for j in s.scalars(
                select(Judgment).where(
                    Judgment.target == "step",
                    Judgment.target_id.in_([st.id for st in steps]),
                    Judgment.critic.in_(STEP_CRITICS),
                )
            ):
                stored.setdefault(j.target_id, {})[j.critic] = j.label
            if steps and all(st.id in stored for st in steps):
                labels = [next(stored[st.id][c] for c in STEP_CRITICS if c in stored[st.id]) for st in steps]
            else:
                labels = [v.label for v in critic.judge(query, views)]
            out.append(Rollout(episode.id, episode.uid, query, views, labels, success))
    return out


def by_query(rollouts: list[Rollout]) -> dict[str, list[Rollout]]:
    groups: dict[str, list[Rollout]] = {}
    for r in rollouts:
        groups.setdefault(r.query.uid, []).append(r)
    return groups


def pass_rate(group: list[Rollout]) -> float:
    judged = [r.success for r in group if r.success is not None]
    return sum(judged) / len(judged) if judged else 0.0
