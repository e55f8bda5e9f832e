"""query: difficulty tag and meta (actions, raw model outputs)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("query", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("difficulty", sa.String(length=16), server_default="medium", nullable=False)
        )
        batch_op.add_column(
            sa.Column(
                "meta",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                server_default="{}",
                nullable=False,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("query", schema=None) as batch_op:
        batch_op.drop_column("meta")
        batch_op.drop_column("difficulty")
