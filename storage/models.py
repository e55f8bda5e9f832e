"""SQLAlchemy 2 models of the data spine (DESIGN.md "Relational model").

One `Base` (`storage.base`); natural unique keys on every table so reruns insert nothing twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from storage.base import NAMING_CONVENTION, ActionJson, Base, Id, Json
from trajforge.actions import Action
from trajforge.domain import Query as DomainQuery

__all__ = ["NAMING_CONVENTION", "Base", "Id", "Json"]  # and the tables below


class App(Base):
    __tablename__ = "app"
    name: Mapped[str] = mapped_column(String(128), unique=True)
    spec_sha256: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]]


class Policy(Base):
    __tablename__ = "policy"
    __table_args__ = (UniqueConstraint("name", "version"),)
    name: Mapped[str] = mapped_column(String(128))
    version: Mapped[int] = mapped_column(Integer)
    endpoint: Mapped[str | None] = mapped_column(String(512))
    checkpoint_uri: Mapped[str | None] = mapped_column(String(1024))
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("policy.id"))
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Round(Base):
    __tablename__ = "round"
    number: Mapped[int] = mapped_column(Integer, unique=True)
    policy_id: Mapped[int] = mapped_column(ForeignKey("policy.id"))
    status: Mapped[str] = mapped_column(String(32), default="running")
    seed: Mapped[int] = mapped_column(BigInteger, default=0)
    config_hash: Mapped[str] = mapped_column(String(64), default="")
    finished: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    stats: Mapped[dict[str, Any]] = mapped_column(default=dict)

    def keep(self, figures: dict[str, Any]) -> None:
        """Add `figures` to the round's stats, key by key (a new dict, so the change is saved)."""
        self.stats = {**(self.stats or {}), **figures}


class Query(Base):
    __tablename__ = "query"
    uid: Mapped[str] = mapped_column(String(64), unique=True)
    app_id: Mapped[int] = mapped_column(ForeignKey("app.id"), index=True)
    round_id: Mapped[int | None] = mapped_column(ForeignKey("round.id"), index=True)
    instruction: Mapped[str] = mapped_column(Text)
    template: Mapped[str | None] = mapped_column(Text)
    slots: Mapped[dict[str, Any]] = mapped_column(default=dict)
    path: Mapped[list[Any]] = mapped_column(default=list)
    goal: Mapped[dict[str, Any]] = mapped_column(default=dict)
    source: Mapped[str] = mapped_column(String(32), default="template")
    status: Mapped[str] = mapped_column(String(16), default="kept")
    reason: Mapped[str | None] = mapped_column(String(64))
    difficulty: Mapped[str] = mapped_column(String(16), default="medium", server_default="medium")
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict, server_default="{}")

    def to_domain(self, app: str) -> DomainQuery:
        """The task as stages pass it around."""
        return DomainQuery(
            uid=self.uid,
            app=app,
            instruction=self.instruction,
            slots=self.slots,
            path=self.path,
            goal=self.goal,
            source=self.source,
            difficulty=self.difficulty,
            tier=str((self.meta or {}).get("tier", "")),
        )


class Episode(Base):
    __tablename__ = "episode"
    __table_args__ = (UniqueConstraint("round_id", "query_id", "attempt"),)
    uid: Mapped[str] = mapped_column(String(64), unique=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("round.id"), index=True)
    query_id: Mapped[int] = mapped_column(ForeignKey("query.id"), index=True)
    policy_id: Mapped[int] = mapped_column(ForeignKey("policy.id"))
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    device: Mapped[str | None] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16), default="running")
    outcome: Mapped[str] = mapped_column(String(16), default="unknown")
    verifier_success: Mapped[bool | None] = mapped_column(Boolean)
    num_steps: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str | None] = mapped_column(String(64))
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Step(Base):
    __tablename__ = "step"
    __table_args__ = (UniqueConstraint("episode_id", "index"),)
    episode_id: Mapped[int] = mapped_column(ForeignKey("episode.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    screenshot: Mapped[str] = mapped_column(String(64), index=True)
    screenshot_after: Mapped[str | None] = mapped_column(String(64))
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    action: Mapped[Action | None] = mapped_column(ActionJson)
    raw_output: Mapped[str] = mapped_column(Text, default="")
    parse_error: Mapped[str | None] = mapped_column(String(64))
    latency_ms: Mapped[int] = mapped_column(Integer, default=0)
    elements: Mapped[list[Any] | None] = mapped_column(Json)  # the element tree the policy saw


class Judgment(Base):
    __tablename__ = "judgment"
    __table_args__ = (UniqueConstraint("critic", "critic_version", "target", "target_id"),)
    critic: Mapped[str] = mapped_column(String(64))
    critic_version: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(16))  # step | episode
    target_id: Mapped[int] = mapped_column(BigInteger, index=True)
    label: Mapped[str] = mapped_column(String(32))
    score: Mapped[float | None] = mapped_column(Float)
    analysis: Mapped[str] = mapped_column(Text, default="")
    summary: Mapped[str] = mapped_column(Text, default="")
    raw_output: Mapped[str] = mapped_column(Text, default="")
    parse_error: Mapped[str | None] = mapped_column(String(64))
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)


class Anchor(Base):
    """A high-confidence trajectory verdict: a verifier result or a human label (CSRS)."""

    __tablename__ = "anchor"
    __table_args__ = (UniqueConstraint("episode_id", "source", "annotator"),)
    episode_id: Mapped[int] = mapped_column(ForeignKey("episode.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(String(16))  # verifier | human
    annotator: Mapped[str] = mapped_column(String(128), default="")
    label: Mapped[str] = mapped_column(String(16))  # success | failure
    confidence: Mapped[float] = mapped_column(Float, default=1.0)
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)
    annotated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # a human's, when given


class Sample(Base):
    """An extracted training sample (one of the CSRS categories, guidance, recovery...)."""

    __tablename__ = "sample"
    uid: Mapped[str] = mapped_column(String(64), unique=True)
    round_id: Mapped[int | None] = mapped_column(ForeignKey("round.id"), index=True)
    episode_id: Mapped[int | None] = mapped_column(ForeignKey("episode.id"), index=True)
    step_index: Mapped[int | None] = mapped_column(Integer)
    category: Mapped[str] = mapped_column(String(64), index=True)
    payload: Mapped[dict[str, Any]]
    provenance: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[str] = mapped_column(String(16), default="kept")
    reason: Mapped[str | None] = mapped_column(String(64))
    # repetitions in training (task re-weighting, GUI-Owl §2.2.3): >1 up-samples
    weight: Mapped[float] = mapped_column(Float, default=1.0, server_default="1")


class ScreenFeature(Base):
    """A screenshot's feature vector under one featuriser, computed once across all rounds."""

    __tablename__ = "screen_feature"
    __table_args__ = (UniqueConstraint("featurizer", "sha256"),)
    featurizer: Mapped[str] = mapped_column(String(128))
    sha256: Mapped[str] = mapped_column(String(64))
    vector: Mapped[bytes] = mapped_column(LargeBinary)  # float32, L2-normalised


class ScreenEncoder(Base):
    """A screen encoder trained on the store's screenshots; its checkpoint lies in the object store."""

    __tablename__ = "screen_encoder"
    sha256: Mapped[str] = mapped_column(String(64), unique=True)  # of the checkpoint's files
    prefix: Mapped[str] = mapped_column(String(256))  # object key folder of the checkpoint
    round_id: Mapped[int | None] = mapped_column(ForeignKey("round.id"))  # trained after this round
    facts: Mapped[dict[str, Any]] = mapped_column(default=dict)  # spec and training report


class QueryPassRate(Base):
    """A query's pass-rate label in one round (Step-GUI §2.1.3): the round's own policy's rollouts."""

    __tablename__ = "query_pass_rate"
    __table_args__ = (UniqueConstraint("query_id", "round_id"),)
    query_id: Mapped[int] = mapped_column(ForeignKey("query.id"), index=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("round.id"), index=True)
    rollouts: Mapped[int] = mapped_column(Integer)  # decided rollouts of the round's policy
    successes: Mapped[int] = mapped_column(Integer)
    solved: Mapped[bool] = mapped_column(Boolean, default=False)  # any success of the query so far, demos too
    tier: Mapped[str] = mapped_column(String(16))  # unsolved | hard | medium | easy, after this round


class Guidance(Base):
    """Query-specific guidance (GUI-Owl §6.4), fed to the next rollouts of the query."""

    __tablename__ = "guidance"
    __table_args__ = (UniqueConstraint("query_uid", "round_id"),)
    query_uid: Mapped[str] = mapped_column(String(64), index=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("round.id"), index=True)
    text: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(16))  # template | llm
    reference: Mapped[str] = mapped_column(String(64))  # an episode uid, or "replay"
    steps: Mapped[list[Any]] = mapped_column(default=list)  # described steps, with kept/dropped
    provenance: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Exclusion(Base):
    """Every filtered item with its reason code (datatrove's exclusion writer, in the DB)."""

    __tablename__ = "exclusion"
    __table_args__ = (UniqueConstraint("stage", "item_type", "item_key", "reason"),)
    round_id: Mapped[int | None] = mapped_column(ForeignKey("round.id"), index=True)
    stage: Mapped[str] = mapped_column(String(32))
    item_type: Mapped[str] = mapped_column(String(32))
    item_key: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(String(64), index=True)
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Dataset(Base):
    __tablename__ = "dataset"
    name: Mapped[str] = mapped_column(String(128), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")


class DatasetVersion(Base):
    __tablename__ = "dataset_version"
    __table_args__ = (UniqueConstraint("dataset_id", "version"),)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id"))
    version: Mapped[int] = mapped_column(Integer)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("dataset_version.id"))
    status: Mapped[str] = mapped_column(String(16), default="draft")  # draft | sealed
    manifest_key: Mapped[str | None] = mapped_column(String(512))
    manifest_sha256: Mapped[str | None] = mapped_column(String(64))
    config_hash: Mapped[str] = mapped_column(String(64), default="")
    lineage: Mapped[dict[str, Any]] = mapped_column(default=dict)
    sealed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Shard(Base):
    """A content-addressed Parquet file; versions share shards that did not change."""

    __tablename__ = "shard"
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    object_key: Mapped[str] = mapped_column(String(512))
    rows: Mapped[int] = mapped_column(Integer)
    split: Mapped[str] = mapped_column(String(16))
    format: Mapped[str] = mapped_column(String(32))


class VersionShard(Base):
    __tablename__ = "version_shard"
    __table_args__ = (UniqueConstraint("version_id", "shard_id"),)
    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_version.id", ondelete="CASCADE"))
    shard_id: Mapped[int] = mapped_column(ForeignKey("shard.id"))


class Device(Base):
    """An environment rollouts can lease: an emulator, a phone, a browser, a simulated device."""

    __tablename__ = "device"
    name: Mapped[str] = mapped_column(String(128), unique=True)
    backend: Mapped[str] = mapped_column(String(16))  # sim | web | android
    address: Mapped[str] = mapped_column(String(256), default="")
    capacity: Mapped[int] = mapped_column(Integer, default=1)
    # healthy | unhealthy (being restarted) | retired | probing (on trial after its cool-down)
    health: Mapped[str] = mapped_column(String(16), default="healthy")
    failures: Mapped[int] = mapped_column(Integer, default=0)
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)
    down_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=False))  # naive UTC


class DeviceLease(Base):
    """One of a device's `capacity` slots; free when `holder` is empty or the lease expired."""

    __tablename__ = "device_lease"
    __table_args__ = (UniqueConstraint("device_id", "slot"),)
    device_id: Mapped[int] = mapped_column(ForeignKey("device.id", ondelete="CASCADE"))
    slot: Mapped[int] = mapped_column(Integer)
    holder: Mapped[str | None] = mapped_column(String(128))
    expires: Mapped[datetime | None] = mapped_column(DateTime(timezone=False))  # naive UTC
    heartbeat: Mapped[datetime | None] = mapped_column(DateTime(timezone=False))


class LLMCall(Base):
    """One paid model call: the response cache (by request hash) and the cost ledger."""

    __tablename__ = "llm_call"
    request_hash: Mapped[str] = mapped_column(String(64), unique=True)
    stage: Mapped[str] = mapped_column(String(64), index=True)
    round_id: Mapped[int | None] = mapped_column(ForeignKey("round.id"), index=True)
    model: Mapped[str] = mapped_column(String(128))
    response_text: Mapped[str] = mapped_column(Text)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    latency_ms: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=1)


class LLMFailure(Base):
    """A model request that failed after its retries: its stage, reason and the error's text (secrets
    masked). A later success of the same request removes it, so what is here is still failing."""

    __tablename__ = "llm_failure"
    request_hash: Mapped[str] = mapped_column(String(64), unique=True)
    stage: Mapped[str] = mapped_column(String(64), index=True)
    round_id: Mapped[int | None] = mapped_column(ForeignKey("round.id"), index=True)
    model: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(String(64))  # server_error, timeout, rate_limited, refused, …
    status: Mapped[int | None] = mapped_column(Integer)  # the HTTP status, where there was one
    detail: Mapped[str] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer)


class AnnotationProject(Base):
    """A Label Studio project trajforge created (one per app or per purpose)."""

    __tablename__ = "annotation_project"
    key: Mapped[str] = mapped_column(String(128), unique=True)  # "app:<name>" or "purpose:<name>"
    ls_project_id: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(String(256))
    config_sha256: Mapped[str] = mapped_column(String(64))


class AnnotationTask(Base):
    """One trajectory pushed to Label Studio; an episode is pushed at most once."""

    __tablename__ = "annotation_task"
    episode_id: Mapped[int] = mapped_column(ForeignKey("episode.id", ondelete="CASCADE"), unique=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("round.id"), index=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("annotation_project.id"), index=True)
    ls_task_id: Mapped[int] = mapped_column(Integer, index=True)
    reasons: Mapped[list[Any]] = mapped_column(default=list)  # why it was queued
    status: Mapped[str] = mapped_column(String(16), default="pushed")  # pushed | deleted
    blind: Mapped[bool] = mapped_column(
        Boolean, default=False
    )  # critics' verdicts hidden, nothing pre-filled
    # what the critics pre-filled: {"verdict": ..., "steps": {index: label}}; None when blind
    prefill: Mapped[dict[str, Any] | None] = mapped_column(Json)
    # an identical trajectory merged into another episode's task: that episode's id (same ls_task_id)
    duplicate_of: Mapped[int | None] = mapped_column(BigInteger)


class HumanAnnotation(Base):
    """One annotator's verdict on a task, as last pulled from Label Studio."""

    __tablename__ = "human_annotation"
    ls_annotation_id: Mapped[int] = mapped_column(Integer, unique=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("annotation_task.id", ondelete="CASCADE"), index=True)
    episode_id: Mapped[int] = mapped_column(ForeignKey("episode.id", ondelete="CASCADE"), index=True)
    annotator: Mapped[str] = mapped_column(String(256))
    verdict: Mapped[str | None] = mapped_column(String(16))  # success | failure | unsure; None when skipped
    step_labels: Mapped[dict[str, Any]] = mapped_column(default=dict)  # step index -> GOOD|NEUTRAL|HARMFUL
    # what the annotator decided, not accepted from a pre-fill: the verdict, and the step indices
    independent_verdict: Mapped[bool] = mapped_column(Boolean, default=True)
    independent_steps: Mapped[list[Any]] = mapped_column(default=list)
    accepted_as_is: Mapped[bool] = mapped_column(Boolean, default=False)  # submitted the pre-fill unchanged
    first_wrong_step: Mapped[int | None] = mapped_column(Integer)  # 1-based; 0: no step was wrong
    skipped: Mapped[bool] = mapped_column(Boolean, default=False)
    withdrawn: Mapped[bool] = mapped_column(Boolean, default=False)  # deleted in Label Studio
    lead_time_s: Mapped[float | None] = mapped_column(Float)
    ls_updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Correction(Base):
    """An annotator's corrected action and/or thought for one step (Mobile-R1)."""

    __tablename__ = "correction"
    __table_args__ = (UniqueConstraint("annotation_id", "step_index"),)
    annotation_id: Mapped[int] = mapped_column(ForeignKey("human_annotation.id", ondelete="CASCADE"))
    episode_id: Mapped[int] = mapped_column(ForeignKey("episode.id", ondelete="CASCADE"), index=True)
    step_index: Mapped[int] = mapped_column(Integer)
    annotator: Mapped[str] = mapped_column(String(256))
    action_text: Mapped[str | None] = mapped_column(Text)  # as typed
    action: Mapped[Action | None] = mapped_column(ActionJson)  # canonical, when it parsed
    action_format: Mapped[str | None] = mapped_column(String(32))  # the codec that parsed it
    thought: Mapped[str | None] = mapped_column(Text)
    instruction: Mapped[str | None] = mapped_column(Text)  # the clear low-level instruction (Mobile-R1)
    source: Mapped[str | None] = mapped_column(String(16))  # typed | clicked: how the action was given
    parse_error: Mapped[str | None] = mapped_column(String(64))
