"""The gateway's response cache and cost ledger, kept in the `llm_call` table."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import insert_ignore, transaction
from storage.models import Episode, LLMCall, LLMFailure, Step
from trajforge.gateway import CachedCall, FailedCall, LLMGateway, StageUsage
from trajforge.logs import redact
from trajforge.settings import LLMSettings


class SqlResponseCache:
    """`ResponseCache` over the database: a rerun never pays twice for the same request."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def get(self, request_hash: str) -> CachedCall | None:
        with self.sessions() as session:
            row = session.scalars(select(LLMCall).where(LLMCall.request_hash == request_hash)).first()
            if row is None:
                return None
            return CachedCall(
                row.request_hash,
                row.stage,
                row.model,
                row.response_text,
                row.prompt_tokens,
                row.completion_tokens,
                row.cost_usd,
                row.latency_ms,
                row.attempts,
                row.round_id,
            )

    def put(self, call: CachedCall) -> None:
        with transaction(self.sessions) as session:
            insert_ignore(session, LLMCall, [asdict(call)], ["request_hash"])
            session.execute(delete(LLMFailure).where(LLMFailure.request_hash == call.request_hash))

    def fail(self, call: FailedCall) -> None:
        fields = {**asdict(call), "detail": redact(call.detail)[:4000], "reason": call.reason[:64]}
        with transaction(self.sessions) as session:
            session.execute(delete(LLMFailure).where(LLMFailure.request_hash == call.request_hash))
            session.add(LLMFailure(**fields))


def failures_by_stage(session: Session, round_id: int | None = None) -> dict[str, Counter[str]]:
    """Requests still failing, per stage and reason (optionally for one round)."""
    stmt = select(LLMFailure.stage, LLMFailure.reason, func.count()).group_by(
        LLMFailure.stage, LLMFailure.reason
    )
    if round_id is not None:
        stmt = stmt.where(LLMFailure.round_id == round_id)
    out: dict[str, Counter[str]] = {}
    for stage, reason, n in session.execute(stmt):
        out.setdefault(stage, Counter())[reason] = n
    return out


def usage_by_stage(sessions: sessionmaker[Session], round_id: int | None = None) -> dict[str, StageUsage]:
    """Paid calls, tokens and cost per stage (optionally for one round), from the ledger."""
    with sessions() as session:
        return stage_usage(session, round_id)


def stage_usage(session: Session, round_id: int | None = None) -> dict[str, StageUsage]:
    """`usage_by_stage` in an open session."""
    stmt = select(
        LLMCall.stage,
        func.count(),
        func.sum(LLMCall.prompt_tokens),
        func.sum(LLMCall.completion_tokens),
        func.sum(LLMCall.cost_usd),
        func.sum(LLMCall.attempts - 1),
    ).group_by(LLMCall.stage)
    if round_id is not None:
        stmt = stmt.where(LLMCall.round_id == round_id)
    return {
        stage: StageUsage(
            calls=n,
            prompt_tokens=int(p or 0),
            completion_tokens=int(c or 0),
            cost_usd=float(cost or 0.0),
            retries=int(r or 0),
        )
        for stage, n, p, c, cost, r in session.execute(stmt.order_by(LLMCall.stage))
    }


def calls_per_step(session: Session, round_id: int) -> dict[str, float]:
    """The round's paid model calls per rolled-out step, by stage and in all (`all`); empty when the
    round rolled out no step or paid for no call."""
    steps = session.scalar(
        select(func.count())
        .select_from(Step)
        .join(Episode, Episode.id == Step.episode_id)
        .where(Episode.round_id == round_id)
    )
    usage = {stage: u.calls for stage, u in stage_usage(session, round_id).items() if u.calls}
    if not steps or not usage:
        return {}
    out = {stage: round(n / steps, 3) for stage, n in sorted(usage.items())}
    return out | {"all": round(sum(usage.values()) / steps, 3)}


def per_step_line(per_step: dict[str, float]) -> str:
    """`calls_per_step` in words: the total, then each stage's share, largest first."""
    stages = sorted(((n, stage) for stage, n in per_step.items() if stage != "all"), reverse=True)
    return f"{per_step['all']:.2f} ({', '.join(f'{stage} {n:.2f}' for n, stage in stages)})"


def build_gateway(llm: LLMSettings, sessions: sessionmaker[Session], group: str) -> LLMGateway | None:
    """The one way a gateway is built: the endpoints' settings and the run's response cache; None
    where stage group `group` has no endpoint."""
    return None if llm.for_group(group).offline else LLMGateway(llm, SqlResponseCache(sessions))
