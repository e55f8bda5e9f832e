"""Judging a round with the offline critics (and the model critics, `judge_round_llm`).

`judge_round` writes one judgment per step and per channel and the consensus per episode;
it is idempotent (a judgment is keyed by critic, version and target). Scoring the verdicts
against the anchors is `critics.calibration`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from critics.consensus import SUMMARY, compose_round, label
from critics.heuristic import ChannelVerdict, VisualTrajectoryCritic, consensus
from critics.learned import NAME as LEARNED
from critics.learned import VERSION as LEARNED_VERSION
from critics.learned import Prediction
from critics.learned_steps import NAME as LEARNED_STEP
from critics.learned_steps import VERSION as LEARNED_STEP_VERSION
from critics.learned_steps import step_verdicts
from critics.llm import LLMEpisodeJudge, LLMJudgment
from critics.outcomes import success_references
from critics.trained import learned_round
from critics.view import critic_view
from storage.db import insert_ignore, record_exclusions, transaction
from storage.episodes import round_episodes
from storage.models import Episode, Exclusion, Judgment
from storage.objectstore import ObjectStore, frame_reader
from trajforge.appspec import AppSpec
from trajforge.domain import Query, StepVerdict, backend_of
from trajforge.episode import Step
from trajforge.errors import LLMError, LLMRefused
from trajforge.gateway import LLMGateway
from trajforge.logs import counts
from trajforge.progress import gather, track
from trajforge.settings import CriticSettings
from trajforge.world.route_check import RouteStepCheck

PENDING_STAGE = "critic_pending"  # exclusion stage of episodes the model critics could not judge yet


@dataclass
class JudgeReport:
    episodes: int = 0
    steps: Counter[str] = field(default_factory=Counter)
    correct: int = 0
    pending: Counter[str] = field(default_factory=Counter)  # episodes left unjudged, by reason

    def render(self) -> str:
        labels = ", ".join(f"{k}={v}" for k, v in sorted(self.steps.items()))
        line = f"judged {self.episodes} episodes: {self.correct} correct by consensus; step labels: {labels}"
        if self.pending:
            retry = sum(n for reason, n in self.pending.items() if reason != LLMRefused.reason)
            line += f"; {sum(self.pending.values())} episodes pending ({counts(self.pending)})"
            line += ": run again to retry only those" if retry else ""
            if self.pending[LLMRefused.reason]:
                line += (
                    f"; the endpoint refused {self.pending[LLMRefused.reason]} requests (4xx), which "
                    "fail again until the request or the endpoint changes (its image limit, the model name)"
                )
        return line


def judge_round(
    sessions: sessionmaker[Session],
    round_id: int,
    apps: list[AppSpec],
    store: ObjectStore | None = None,
    settings: CriticSettings | None = None,
) -> JudgeReport:
    """The offline critics on every step and episode of a round, then the consensus (idempotent).

    Trajectory channels: the learned critic (`critics.trained`: fitted on the anchors so far,
    each episode judged by a model that never saw its query; its checkpoint goes to `store`) and
    the visual channel (end frames of other queries' anchored successes; near-equal frames
    count when `store` can show them). Step labels: the learned step critic on every step (the
    change of the learned critic's value, `critics.learned_steps`), and the route check on the
    app's spec where it has a map; curation prefers the route check's.
    """
    settings = settings or CriticSettings()
    step_critic = RouteStepCheck(apps)
    frames = frame_reader(store) if store is not None else None
    report = JudgeReport()
    with transaction(sessions) as s:
        learned = learned_round(s, round_id, store)
        visual = VisualTrajectoryCritic(success_references(s, round_id), frames)
        episodes = round_episodes(s, round_id)
        with track("judging episodes", len(episodes)) as advance:
            for episode, query, steps in episodes:
                views = [st.view() for st in steps]
                trace = step_critic.follow(query, views)
                judged = learned[episode.id]
                by_value = step_verdicts(judged.checkpoint, critic_view(query.instruction, steps), query.app)
                # the route check's step labels where the app has a map
                used = trace.verdicts if trace.end is not None else by_value
                rows = _step_rows(LEARNED_STEP, LEARNED_STEP_VERSION, steps, by_value)
                if trace.end is not None:
                    rows += _step_rows(step_critic.name, step_critic.version, steps, trace.verdicts)
                seen = visual.judge(query, views, backend_of(episode.device))
                why = seen.reason
                rows.append(
                    _judgment(
                        visual.name, visual.version, "episode", episode.id, label(seen.success), why, why
                    )
                )
                rows.append(_learned(episode.id, judged))
                insert_ignore(s, Judgment, rows, ["critic", "critic_version", "target", "target_id"])
                report.episodes += 1
                report.steps.update(v.label for v in used)
                advance()
    report.correct = compose_round(sessions, round_id, settings)
    return report


def _judgment(
    critic: str,
    version: str,
    target: str,
    target_id: int,
    verdict: str,
    summary: str,
    analysis: str,
    score: float | None = None,
) -> dict[str, Any]:
    return {
        "critic": critic,
        "critic_version": version,
        "target": target,
        "target_id": target_id,
        "label": verdict,
        "summary": summary,
        "analysis": analysis,
        "score": score,
    }


def _step_rows(
    critic: str, version: str, steps: list[Step], verdicts: list[StepVerdict]
) -> list[dict[str, Any]]:
    return [
        _judgment(critic, version, "step", st.id, v.label, v.summary, v.reason)
        for st, v in zip(steps, verdicts, strict=True)
    ]


def _learned(episode_id: int, p: Prediction) -> dict[str, Any]:
    if p.probability is None:
        why = "untrained: too few anchored episodes of other queries, of both outcomes"
        return _judgment(LEARNED, LEARNED_VERSION, "episode", episode_id, "abstain", why, "untrained")
    summary = f"success probability {p.probability:.2f} by model {p.model} (fitted without this query)"
    confidence = max(p.probability, 1 - p.probability)  # the score of a verdict, as every critic's
    return _judgment(
        LEARNED,
        LEARNED_VERSION,
        "episode",
        episode_id,
        label(p.success),
        summary,
        f"model {p.model}",
        confidence,
    )


async def judge_round_llm(
    sessions: sessionmaker[Session],
    round_id: int,
    gateway: LLMGateway,
    frames: Callable[[str], bytes],
    model: str | None = None,
    settings: CriticSettings | None = None,
) -> JudgeReport:
    """The model critics on every step and episode of a round (`critics.llm.LLMEpisodeJudge`: one
    request per episode, or per window of `critics.judge_window` steps), in parallel within the
    gateway's bounds.

    Idempotent: judgments are keyed by critic, version and target, and the gateway's cache
    answers every request it has already paid for, so a rerun costs no model calls. The round's
    consensus is composed again afterwards, with the model channel's vote.
    """
    settings = settings or CriticSettings()
    judges = _ModelJudges(LLMEpisodeJudge(gateway, frames, model, settings.judge_window))
    with sessions() as s:
        episodes = round_episodes(s, round_id)
    results = await gather("model critics", (judges.rows(e, q, st) for e, q, st in episodes))
    with transaction(sessions) as s:
        for rows in results:
            insert_ignore(s, Judgment, rows, ["critic", "critic_version", "target", "target_id"])
        # pending episodes are kept with their reason; a later run that judges them clears it
        s.execute(
            delete(Exclusion).where(
                Exclusion.round_id == round_id,
                Exclusion.stage == PENDING_STAGE,
                Exclusion.item_key.not_in(list(judges.failed)),
            )
        )
        failed = [(uid, r, d) for uid, (r, d) in judges.failed.items()]
        record_exclusions(s, round_id, PENDING_STAGE, "episode", failed)
    compose_round(sessions, round_id, settings)  # the model channel votes too
    return judges.report


@dataclass
class _ModelJudges:
    """The model critics of one round: the episode judge (step labels and the episode's verdict)."""

    judge: LLMEpisodeJudge
    report: JudgeReport = field(default_factory=JudgeReport)
    failed: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # episode uid -> why

    async def rows(self, episode: Episode, query: Query, steps: list[Step]) -> list[dict[str, Any]]:
        """The episode's judgment rows; none when the endpoint failed (the episode is left pending
        with the endpoint's answer, and the rest of the round goes on)."""
        try:
            return await self._judged(episode, query, steps)
        except LLMError as exc:
            self.report.pending[exc.reason] += 1
            self.failed[episode.uid] = (exc.reason, exc.detail())
            return []

    async def _judged(self, episode: Episode, query: Query, steps: list[Step]) -> list[dict[str, Any]]:
        judge = self.judge
        judged = await judge.judge(query, [st.view() for st in steps])
        verdict = judged.verdict
        # an answer that did not parse abstains, as an offline channel does: undecided
        vote = None if verdict.label is None else verdict.label == "correct"
        agreed = consensus([ChannelVerdict(judge.channel, vote, verdict.parse_error or "")])
        rows = [
            _row(judge.name, judge.version, "step", st.id, j)
            for st, j in zip(steps, judged.steps, strict=True)
        ]
        rows.append(_row(judge.channel, judge.version, "episode", episode.id, verdict))
        rows.append(_and_row(judge.version, episode.id, agreed))
        self.report.episodes += 1
        self.report.correct += bool(agreed)
        self.report.steps.update(j.label or "unparsed" for j in judged.steps)
        return rows


def _and_row(version: str, episode_id: int, agreed: bool | None) -> dict[str, Any]:
    """The model channels combined by AND: correct only when every channel that answered says so."""
    return {
        "critic": "llm_consensus_and",
        "critic_version": version,
        "target": "episode",
        "target_id": episode_id,
        "label": label(agreed, "undecided"),
        "summary": SUMMARY[label(agreed, "undecided")],
        "analysis": "",
        "raw_output": "",
        "parse_error": None,
        "prompt_tokens": 0,
        "completion_tokens": 0,
    }


def _row(critic: str, version: str, target: str, target_id: int, j: LLMJudgment) -> dict[str, Any]:
    label = j.label if j.label is not None else "unparsed"
    return {
        "critic": critic,
        "critic_version": version,
        "target": target,
        "target_id": target_id,
        "label": label,
        "summary": j.summary,
        "analysis": j.analysis,
        "raw_output": j.raw,
        "parse_error": j.parse_error,
        "prompt_tokens": j.prompt_tokens,
        "completion_tokens": j.completion_tokens,
    }
