"""Rolling rounds back: a round, the rounds after it, and everything made from them, in one
transaction.

A round another command made (`trajforge rollout`, `trajforge run`) is not one of the loop's, and
`evolve` will not take it as its own (`evolve.ownership`); dropping it gives the home back to the
loop. What a sealed dataset version holds is never taken back: a round a sealed version names is
refused. Screenshots stay in the object store and their features in `screen_feature` (both are
kept by content and may be shared); the database no longer names the dropped round's screenshots.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import Select, and_, delete, func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from storage.db import transaction
from storage.models import (
    Anchor,
    AnnotationTask,
    Correction,
    Dataset,
    DatasetVersion,
    Episode,
    Exclusion,
    Guidance,
    HumanAnnotation,
    Judgment,
    LLMCall,
    LLMFailure,
    Query,
    QueryPassRate,
    Round,
    Sample,
    ScreenEncoder,
    Step,
)
from trajforge.errors import ConfigError


def drop_rounds(sessions: sessionmaker[Session], number: int) -> tuple[list[int], Counter[str]]:
    """Delete round `number` and every later round (latest first), each with its episodes, steps,
    judgments, labels, samples, guidance, exclusions, model calls and the queries only it used: the
    round numbers dropped and the rows deleted, by table.

    Raises:
        ConfigError: no such round, or a sealed version holds rows of one of them; nothing is deleted.
    """
    with transaction(sessions) as s:
        rows = s.scalars(select(Round).where(Round.number >= number).order_by(Round.number.desc())).all()
        if not rows or rows[-1].number != number:
            latest = s.scalar(select(func.max(Round.number)))
            raise ConfigError(
                f"no round {number} in the database (the latest is {latest or 'none'}); "
                "`trajforge status` lists the rounds"
            )
        deleted: Counter[str] = Counter()
        for row in rows:
            _refuse_sealed(s, row.number)
        for row in rows:
            deleted.update(_delete(s, row))
        return [row.number for row in reversed(rows)], deleted


def _refuse_sealed(s: Session, number: int) -> None:
    sealed = s.execute(
        select(Dataset.name, DatasetVersion.version, DatasetVersion.lineage)
        .join(Dataset, Dataset.id == DatasetVersion.dataset_id)
        .where(DatasetVersion.status == "sealed")
    )
    for name, version, lineage in sealed:
        if number in (lineage or {}).get("rounds", []):
            raise ConfigError(
                f"round {number} has rows in dataset {name} v{version}, a sealed version, "
                "which is never changed; keep the round, or start a new home (a fresh TRAJFORGE_HOME)"
            )


def _delete(s: Session, row: Round) -> dict[str, int]:
    rid = row.id
    episodes: Select[tuple[int]] = select(Episode.id).where(Episode.round_id == rid)
    steps: Select[tuple[int]] = select(Step.id).where(Step.episode_id.in_(episodes))
    queries = [
        q
        for q in s.scalars(select(Query.id).where(Query.round_id == rid))
        if not s.scalar(select(Episode.id).where(Episode.query_id == q, Episode.round_id != rid).limit(1))
    ]
    judged = or_(
        and_(Judgment.target == "step", Judgment.target_id.in_(steps)),
        and_(Judgment.target == "episode", Judgment.target_id.in_(episodes)),
    )
    statements = {  # in an order no foreign key refuses
        "judgment": delete(Judgment).where(judged),
        "correction": delete(Correction).where(Correction.episode_id.in_(episodes)),
        "human_annotation": delete(HumanAnnotation).where(HumanAnnotation.episode_id.in_(episodes)),
        "annotation_task": delete(AnnotationTask).where(
            or_(AnnotationTask.round_id == rid, AnnotationTask.episode_id.in_(episodes))
        ),
        "anchor": delete(Anchor).where(Anchor.episode_id.in_(episodes)),
        "sample": delete(Sample).where(or_(Sample.round_id == rid, Sample.episode_id.in_(episodes))),
        "query_pass_rate": delete(QueryPassRate).where(
            or_(QueryPassRate.round_id == rid, QueryPassRate.query_id.in_(queries))
        ),
        "guidance": delete(Guidance).where(Guidance.round_id == rid),
        "exclusion": delete(Exclusion).where(Exclusion.round_id == rid),
        "llm_call": delete(LLMCall).where(LLMCall.round_id == rid),
        "llm_failure": delete(LLMFailure).where(LLMFailure.round_id == rid),
        "screen_encoder": delete(ScreenEncoder).where(ScreenEncoder.round_id == rid),
        "draft_version": delete(DatasetVersion).where(
            DatasetVersion.status != "sealed", DatasetVersion.id.in_(_drafts_naming(s, row.number))
        ),
        "step": delete(Step).where(Step.episode_id.in_(episodes)),
        "episode": delete(Episode).where(Episode.round_id == rid),
        "query": delete(Query).where(Query.id.in_(queries)),
        "round": delete(Round).where(Round.id == rid),
    }
    return {table: s.execute(stmt).rowcount for table, stmt in statements.items()}  # type: ignore[attr-defined]


def _drafts_naming(s: Session, number: int) -> list[int]:
    """Unsealed versions (a publish that was interrupted) whose lineage names the round."""
    drafts = s.execute(
        select(DatasetVersion.id, DatasetVersion.lineage).where(DatasetVersion.status != "sealed")
    )
    return [vid for vid, lineage in drafts if number in (lineage or {}).get("rounds", [])]
