"""curation: screenshot feature cache, query-specific guidance, sample weights

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "screen_feature",
        sa.Column("featurizer", sa.String(length=128), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_screen_feature")),
        sa.UniqueConstraint("featurizer", "sha256", name=op.f("uq_screen_feature_featurizer_sha256")),
    )
    op.create_table(
        "guidance",
        sa.Column("query_uid", sa.String(length=64), nullable=False),
        sa.Column("round_id", _ID, nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("reference", sa.String(length=64), nullable=False),
        sa.Column("steps", _JSON, nullable=False),
        sa.Column("provenance", _JSON, nullable=False),
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"], name=op.f("fk_guidance_round_id_round")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_guidance")),
        sa.UniqueConstraint("query_uid", "round_id", name=op.f("uq_guidance_query_uid_round_id")),
    )
    with op.batch_alter_table("guidance", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_guidance_query_uid"), ["query_uid"], unique=False)
        batch_op.create_index(batch_op.f("ix_guidance_round_id"), ["round_id"], unique=False)
    with op.batch_alter_table("sample", schema=None) as batch_op:
        batch_op.add_column(sa.Column("weight", sa.Float(), server_default="1", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("sample", schema=None) as batch_op:
        batch_op.drop_column("weight")
    op.drop_table("guidance")
    op.drop_table("screen_feature")
