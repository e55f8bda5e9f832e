"""The consensus that decides: the configured trajectory channels of each episode, combined.

`compose_round` reads every stored episode verdict of the channels in `critics.channels` (the
learned critic, the visual channel, the model critics), and writes one consensus judgment per
episode under `trajforge.verdicts.CONSENSUS` by `critics.rule` (AND, majority or weighted).
It rewrites the round's consensus rows, so running it again after the model critics have
judged folds their votes in. An abstaining or unparsed channel does not vote; with no vote the
episode is undecided. Whether the consensus may decide an outcome is `critics.outcomes`'s
trust gate: its measured accuracy on the app's anchored episodes.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from critics.heuristic import ChannelVerdict, consensus
from storage.db import transaction
from storage.models import Episode, Judgment
from trajforge.settings import CriticSettings
from trajforge.verdicts import CONSENSUS

SUMMARY = {
    "correct": "the voting channels agree",
    "incorrect": "a channel says incorrect",
    "undecided": "every channel abstained",
}


def label(success: bool | None, silent: str = "abstain") -> str:
    if success is None:
        return silent
    return "correct" if success else "incorrect"


def compose_round(sessions: sessionmaker[Session], round_id: int, settings: CriticSettings) -> int:
    """Consensus rows for every episode of the round; the number judged correct."""
    with transaction(sessions) as s:
        episodes = s.scalars(select(Episode.id).where(Episode.round_id == round_id)).all()
        votes: dict[int, dict[str, Judgment]] = {e: {} for e in episodes}
        for j in s.scalars(
            select(Judgment)
            .where(
                Judgment.target == "episode",
                Judgment.target_id.in_(episodes),
                Judgment.critic.in_(settings.channels),
            )
            .order_by(Judgment.id)
        ):
            votes[j.target_id][j.critic] = j  # a channel's latest version wins
        s.execute(
            delete(Judgment).where(
                Judgment.target == "episode",
                Judgment.target_id.in_(episodes),
                Judgment.critic == CONSENSUS[0],
                Judgment.critic_version == CONSENSUS[1],
            )
        )
        correct = 0
        for episode_id, channels in votes.items():
            verdicts = [
                ChannelVerdict(c, j.label == "correct" if j.label in ("correct", "incorrect") else None, "")
                for c, j in sorted(channels.items())
            ]
            agreed = consensus(verdicts, settings.rule, settings.weights)
            correct += bool(agreed)
            s.add(
                Judgment(
                    critic=CONSENSUS[0],
                    critic_version=CONSENSUS[1],
                    target="episode",
                    target_id=episode_id,
                    label=label(agreed, "undecided"),
                    summary=SUMMARY[label(agreed, "undecided")],
                    analysis=" ".join(
                        f"{c}:{j.critic_version}={j.label}" for c, j in sorted(channels.items())
                    ),
                )
            )
    return correct
