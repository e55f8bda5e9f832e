"""device pool: devices and their lease slots

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "device",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("address", sa.String(length=256), nullable=False),
        sa.Column("capacity", sa.Integer(), nullable=False),
        sa.Column("health", sa.String(length=16), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("meta", _JSON, nullable=False),
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_device")),
        sa.UniqueConstraint("name", name=op.f("uq_device_name")),
    )
    op.create_table(
        "device_lease",
        sa.Column("device_id", _ID, nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=True),
        sa.Column("expires", sa.DateTime(timezone=False), nullable=True),
        sa.Column("heartbeat", sa.DateTime(timezone=False), nullable=True),
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_id"], ["device.id"], name=op.f("fk_device_lease_device_id_device"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_device_lease")),
        sa.UniqueConstraint("device_id", "slot", name=op.f("uq_device_lease_device_id_slot")),
    )


def downgrade() -> None:
    op.drop_table("device_lease")
    op.drop_table("device")
