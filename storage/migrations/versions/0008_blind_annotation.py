"""annotation: blind tasks and pre-fills, merged duplicates, independent labels, click and Mobile-R1 corrections

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("annotation_task", schema=None) as batch_op:
        batch_op.add_column(sa.Column("blind", sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.add_column(sa.Column("prefill", _JSON, nullable=True))
        batch_op.add_column(sa.Column("duplicate_of", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("human_annotation", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("independent_verdict", sa.Boolean(), server_default=sa.true(), nullable=False)
        )
        batch_op.add_column(sa.Column("independent_steps", _JSON, server_default="[]", nullable=False))
        batch_op.add_column(
            sa.Column("accepted_as_is", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column("first_wrong_step", sa.Integer(), nullable=True))
    with op.batch_alter_table("correction", schema=None) as batch_op:
        batch_op.add_column(sa.Column("instruction", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("source", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("correction", schema=None) as batch_op:
        batch_op.drop_column("source")
        batch_op.drop_column("instruction")
    with op.batch_alter_table("human_annotation", schema=None) as batch_op:
        for column in ("first_wrong_step", "accepted_as_is", "independent_steps", "independent_verdict"):
            batch_op.drop_column(column)
    with op.batch_alter_table("annotation_task", schema=None) as batch_op:
        for column in ("duplicate_of", "prefill", "blind"):
            batch_op.drop_column(column)
