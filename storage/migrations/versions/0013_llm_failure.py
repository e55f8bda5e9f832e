"""llm_failure: model requests that failed after their retries, with the reason

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "llm_failure",
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("stage", sa.String(length=64), nullable=False),
        sa.Column("round_id", _ID, nullable=True),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["round_id"], ["round.id"], name=op.f("fk_llm_failure_round_id_round")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_llm_failure")),
        sa.UniqueConstraint("request_hash", name=op.f("uq_llm_failure_request_hash")),
    )
    op.create_index(op.f("ix_llm_failure_stage"), "llm_failure", ["stage"])
    op.create_index(op.f("ix_llm_failure_round_id"), "llm_failure", ["round_id"])


def downgrade() -> None:
    op.drop_table("llm_failure")
