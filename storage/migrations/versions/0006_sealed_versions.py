"""dataset versions: triggers that refuse any change to a sealed version or its shard list

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MESSAGE = "dataset version is sealed"  # storage.db.SEALED_MESSAGE

_SQLITE = [
    f"""CREATE TRIGGER dataset_version_sealed_update BEFORE UPDATE ON dataset_version
    WHEN OLD.status = 'sealed' BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END""",
    f"""CREATE TRIGGER dataset_version_sealed_delete BEFORE DELETE ON dataset_version
    WHEN OLD.status = 'sealed' BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END""",
    f"""CREATE TRIGGER version_shard_sealed_insert BEFORE INSERT ON version_shard
    WHEN (SELECT status FROM dataset_version WHERE id = NEW.version_id) = 'sealed'
    BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END""",
    f"""CREATE TRIGGER version_shard_sealed_update BEFORE UPDATE ON version_shard
    WHEN (SELECT status FROM dataset_version WHERE id IN (OLD.version_id, NEW.version_id)
          AND status = 'sealed') IS NOT NULL
    BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END""",
    f"""CREATE TRIGGER version_shard_sealed_delete BEFORE DELETE ON version_shard
    WHEN (SELECT status FROM dataset_version WHERE id = OLD.version_id) = 'sealed'
    BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END""",
]
_SQLITE_NAMES = [
    "dataset_version_sealed_update",
    "dataset_version_sealed_delete",
    "version_shard_sealed_insert",
    "version_shard_sealed_update",
    "version_shard_sealed_delete",
]

_POSTGRES = [
    f"""CREATE FUNCTION trajforge_refuse_sealed() RETURNS trigger AS $$
BEGIN
  IF TG_TABLE_NAME = 'dataset_version' THEN
    IF OLD.status = 'sealed' THEN RAISE EXCEPTION '{MESSAGE}'; END IF;
  ELSE
    IF TG_OP IN ('UPDATE', 'DELETE') AND EXISTS (
        SELECT 1 FROM dataset_version WHERE id = OLD.version_id AND status = 'sealed') THEN
      RAISE EXCEPTION '{MESSAGE}';
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND EXISTS (
        SELECT 1 FROM dataset_version WHERE id = NEW.version_id AND status = 'sealed') THEN
      RAISE EXCEPTION '{MESSAGE}';
    END IF;
  END IF;
  IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql""",
    """CREATE TRIGGER dataset_version_sealed BEFORE UPDATE OR DELETE ON dataset_version
    FOR EACH ROW EXECUTE FUNCTION trajforge_refuse_sealed()""",
    """CREATE TRIGGER version_shard_sealed BEFORE INSERT OR UPDATE OR DELETE ON version_shard
    FOR EACH ROW EXECUTE FUNCTION trajforge_refuse_sealed()""",
]


def upgrade() -> None:
    for statement in _POSTGRES if op.get_bind().dialect.name == "postgresql" else _SQLITE:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER version_shard_sealed ON version_shard")
        op.execute("DROP TRIGGER dataset_version_sealed ON dataset_version")
        op.execute("DROP FUNCTION trajforge_refuse_sealed()")
    else:
        for name in _SQLITE_NAMES:
            op.execute(f"DROP TRIGGER {name}")
