"""initial spine

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "app",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("spec_sha256", sa.String(length=64), nullable=False),
        sa.Column(
            "spec",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_app")),
        sa.UniqueConstraint("name", name=op.f("uq_app_name")),
    )
    op.create_table(
        "dataset",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset")),
        sa.UniqueConstraint("name", name=op.f("uq_dataset_name")),
    )
    op.create_table(
        "judgment",
        sa.Column("critic", sa.String(length=64), nullable=False),
        sa.Column("critic_version", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=16), nullable=False),
        sa.Column("target_id", sa.BigInteger(), nullable=False),
        sa.Column("label", sa.String(length=32), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("analysis", sa.Text(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("raw_output", sa.Text(), nullable=False),
        sa.Column("parse_error", sa.String(length=64), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_judgment")),
        sa.UniqueConstraint(
            "critic",
            "critic_version",
            "target",
            "target_id",
            name=op.f("uq_judgment_critic_critic_version_target_target_id"),
        ),
    )
    with op.batch_alter_table("judgment", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_judgment_target_id"), ["target_id"], unique=False)

    op.create_table(
        "policy",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("endpoint", sa.String(length=512), nullable=True),
        sa.Column("checkpoint_uri", sa.String(length=1024), nullable=True),
        sa.Column("parent_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column(
            "meta",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["parent_id"], ["policy.id"], name=op.f("fk_policy_parent_id_policy")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policy")),
        sa.UniqueConstraint("name", "version", name=op.f("uq_policy_name_version")),
    )
    op.create_table(
        "shard",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("object_key", sa.String(length=512), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("split", sa.String(length=16), nullable=False),
        sa.Column("format", sa.String(length=32), nullable=False),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shard")),
        sa.UniqueConstraint("sha256", name=op.f("uq_shard_sha256")),
    )
    op.create_table(
        "dataset_version",
        sa.Column("dataset_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("parent_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("manifest_key", sa.String(length=512), nullable=True),
        sa.Column("manifest_sha256", sa.String(length=64), nullable=True),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column(
            "lineage",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("sealed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["dataset.id"], name=op.f("fk_dataset_version_dataset_id_dataset")
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            ["dataset_version.id"],
            name=op.f("fk_dataset_version_parent_id_dataset_version"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset_version")),
        sa.UniqueConstraint("dataset_id", "version", name=op.f("uq_dataset_version_dataset_id_version")),
    )
    op.create_table(
        "round",
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("policy_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("finished", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "stats",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["policy_id"], ["policy.id"], name=op.f("fk_round_policy_id_policy")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_round")),
        sa.UniqueConstraint("number", name=op.f("uq_round_number")),
    )
    op.create_table(
        "exclusion",
        sa.Column("round_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("stage", sa.String(length=32), nullable=False),
        sa.Column("item_type", sa.String(length=32), nullable=False),
        sa.Column("item_key", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column(
            "detail",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"], name=op.f("fk_exclusion_round_id_round")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exclusion")),
        sa.UniqueConstraint(
            "stage",
            "item_type",
            "item_key",
            "reason",
            name=op.f("uq_exclusion_stage_item_type_item_key_reason"),
        ),
    )
    with op.batch_alter_table("exclusion", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_exclusion_reason"), ["reason"], unique=False)
        batch_op.create_index(batch_op.f("ix_exclusion_round_id"), ["round_id"], unique=False)

    op.create_table(
        "llm_call",
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("stage", sa.String(length=64), nullable=False),
        sa.Column("round_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("response_text", sa.Text(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"], name=op.f("fk_llm_call_round_id_round")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_llm_call")),
        sa.UniqueConstraint("request_hash", name=op.f("uq_llm_call_request_hash")),
    )
    with op.batch_alter_table("llm_call", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_llm_call_round_id"), ["round_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_llm_call_stage"), ["stage"], unique=False)

    op.create_table(
        "query",
        sa.Column("uid", sa.String(length=64), nullable=False),
        sa.Column("app_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("round_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("instruction", sa.Text(), nullable=False),
        sa.Column("template", sa.Text(), nullable=True),
        sa.Column(
            "slots",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "path",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "goal",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["app_id"], ["app.id"], name=op.f("fk_query_app_id_app")),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"], name=op.f("fk_query_round_id_round")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_query")),
        sa.UniqueConstraint("uid", name=op.f("uq_query_uid")),
    )
    with op.batch_alter_table("query", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_query_app_id"), ["app_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_query_round_id"), ["round_id"], unique=False)

    op.create_table(
        "version_shard",
        sa.Column("version_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("shard_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["shard_id"], ["shard.id"], name=op.f("fk_version_shard_shard_id_shard")),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["dataset_version.id"],
            name=op.f("fk_version_shard_version_id_dataset_version"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_version_shard")),
        sa.UniqueConstraint("version_id", "shard_id", name=op.f("uq_version_shard_version_id_shard_id")),
    )
    op.create_table(
        "episode",
        sa.Column("uid", sa.String(length=64), nullable=False),
        sa.Column("round_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("query_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("policy_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(length=128), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("verifier_success", sa.Boolean(), nullable=True),
        sa.Column("num_steps", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column(
            "meta",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["policy_id"], ["policy.id"], name=op.f("fk_episode_policy_id_policy")),
        sa.ForeignKeyConstraint(["query_id"], ["query.id"], name=op.f("fk_episode_query_id_query")),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"], name=op.f("fk_episode_round_id_round")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_episode")),
        sa.UniqueConstraint(
            "round_id", "query_id", "attempt", name=op.f("uq_episode_round_id_query_id_attempt")
        ),
        sa.UniqueConstraint("uid", name=op.f("uq_episode_uid")),
    )
    with op.batch_alter_table("episode", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_episode_query_id"), ["query_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_episode_round_id"), ["round_id"], unique=False)

    op.create_table(
        "anchor",
        sa.Column("episode_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("annotator", sa.String(length=128), nullable=False),
        sa.Column("label", sa.String(length=16), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column(
            "meta",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episode.id"],
            name=op.f("fk_anchor_episode_id_episode"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_anchor")),
        sa.UniqueConstraint(
            "episode_id", "source", "annotator", name=op.f("uq_anchor_episode_id_source_annotator")
        ),
    )
    op.create_table(
        "sample",
        sa.Column("uid", sa.String(length=64), nullable=False),
        sa.Column("round_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("episode_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("step_index", sa.Integer(), nullable=True),
        sa.Column("category", sa.String(length=64), nullable=False),
        sa.Column(
            "payload",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "provenance",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["episode_id"], ["episode.id"], name=op.f("fk_sample_episode_id_episode")),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"], name=op.f("fk_sample_round_id_round")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sample")),
        sa.UniqueConstraint("uid", name=op.f("uq_sample_uid")),
    )
    with op.batch_alter_table("sample", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_sample_category"), ["category"], unique=False)
        batch_op.create_index(batch_op.f("ix_sample_episode_id"), ["episode_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_sample_round_id"), ["round_id"], unique=False)

    op.create_table(
        "step",
        sa.Column("episode_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("screenshot", sa.String(length=64), nullable=False),
        sa.Column("screenshot_after", sa.String(length=64), nullable=True),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column(
            "action",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("raw_output", sa.Text(), nullable=False),
        sa.Column("parse_error", sa.String(length=64), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episode.id"],
            name=op.f("fk_step_episode_id_episode"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_step")),
        sa.UniqueConstraint("episode_id", "index", name=op.f("uq_step_episode_id_index")),
    )
    with op.batch_alter_table("step", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_step_screenshot"), ["screenshot"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("step", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_step_screenshot"))

    op.drop_table("step")
    with op.batch_alter_table("sample", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sample_round_id"))
        batch_op.drop_index(batch_op.f("ix_sample_episode_id"))
        batch_op.drop_index(batch_op.f("ix_sample_category"))

    op.drop_table("sample")
    op.drop_table("anchor")
    with op.batch_alter_table("episode", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_episode_round_id"))
        batch_op.drop_index(batch_op.f("ix_episode_query_id"))

    op.drop_table("episode")
    op.drop_table("version_shard")
    with op.batch_alter_table("query", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_query_round_id"))
        batch_op.drop_index(batch_op.f("ix_query_app_id"))

    op.drop_table("query")
    with op.batch_alter_table("llm_call", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_llm_call_stage"))
        batch_op.drop_index(batch_op.f("ix_llm_call_round_id"))

    op.drop_table("llm_call")
    with op.batch_alter_table("exclusion", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_exclusion_round_id"))
        batch_op.drop_index(batch_op.f("ix_exclusion_reason"))

    op.drop_table("exclusion")
    op.drop_table("round")
    op.drop_table("dataset_version")
    op.drop_table("shard")
    op.drop_table("policy")
    with op.batch_alter_table("judgment", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_judgment_target_id"))

    op.drop_table("judgment")
    op.drop_table("dataset")
    op.drop_table("app")
