"""annotation: Label Studio projects and tasks, human annotations, corrections, anchor time

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def _spine() -> list[sa.Column]:
    return [
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "annotation_project",
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("ls_project_id", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(length=256), nullable=False),
        sa.Column("config_sha256", sa.String(length=64), nullable=False),
        *_spine(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_annotation_project")),
        sa.UniqueConstraint("key", name=op.f("uq_annotation_project_key")),
    )
    op.create_table(
        "annotation_task",
        sa.Column("episode_id", _ID, nullable=False),
        sa.Column("round_id", _ID, nullable=False),
        sa.Column("project_id", _ID, nullable=False),
        sa.Column("ls_task_id", sa.Integer(), nullable=False),
        sa.Column("reasons", _JSON, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        *_spine(),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episode.id"],
            name=op.f("fk_annotation_task_episode_id_episode"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"], name=op.f("fk_annotation_task_round_id_round")),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["annotation_project.id"],
            name=op.f("fk_annotation_task_project_id_annotation_project"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_annotation_task")),
        sa.UniqueConstraint("episode_id", name=op.f("uq_annotation_task_episode_id")),
    )
    with op.batch_alter_table("annotation_task", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_annotation_task_round_id"), ["round_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_annotation_task_project_id"), ["project_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_annotation_task_ls_task_id"), ["ls_task_id"], unique=False)
    op.create_table(
        "human_annotation",
        sa.Column("ls_annotation_id", sa.Integer(), nullable=False),
        sa.Column("task_id", _ID, nullable=False),
        sa.Column("episode_id", _ID, nullable=False),
        sa.Column("annotator", sa.String(length=256), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        sa.Column("step_labels", _JSON, nullable=False),
        sa.Column("skipped", sa.Boolean(), nullable=False),
        sa.Column("withdrawn", sa.Boolean(), nullable=False),
        sa.Column("lead_time_s", sa.Float(), nullable=True),
        sa.Column("ls_updated_at", sa.DateTime(timezone=True), nullable=False),
        *_spine(),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["annotation_task.id"],
            name=op.f("fk_human_annotation_task_id_annotation_task"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episode.id"],
            name=op.f("fk_human_annotation_episode_id_episode"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_human_annotation")),
        sa.UniqueConstraint("ls_annotation_id", name=op.f("uq_human_annotation_ls_annotation_id")),
    )
    with op.batch_alter_table("human_annotation", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_human_annotation_task_id"), ["task_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_human_annotation_episode_id"), ["episode_id"], unique=False)
    op.create_table(
        "correction",
        sa.Column("annotation_id", _ID, nullable=False),
        sa.Column("episode_id", _ID, nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("annotator", sa.String(length=256), nullable=False),
        sa.Column("action_text", sa.Text(), nullable=True),
        sa.Column("action", _JSON, nullable=True),
        sa.Column("action_format", sa.String(length=32), nullable=True),
        sa.Column("thought", sa.Text(), nullable=True),
        sa.Column("parse_error", sa.String(length=64), nullable=True),
        *_spine(),
        sa.ForeignKeyConstraint(
            ["annotation_id"],
            ["human_annotation.id"],
            name=op.f("fk_correction_annotation_id_human_annotation"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episode.id"], name=op.f("fk_correction_episode_id_episode"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_correction")),
        sa.UniqueConstraint(
            "annotation_id", "step_index", name=op.f("uq_correction_annotation_id_step_index")
        ),
    )
    with op.batch_alter_table("correction", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_correction_episode_id"), ["episode_id"], unique=False)
    with op.batch_alter_table("anchor", schema=None) as batch_op:
        batch_op.add_column(sa.Column("annotated_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("anchor", schema=None) as batch_op:
        batch_op.drop_column("annotated_at")
    for table in ("correction", "human_annotation", "annotation_task", "annotation_project"):
        op.drop_table(table)
