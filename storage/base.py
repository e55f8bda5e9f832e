"""The declarative base of the data spine: a naming convention, shared `id` and `created` columns,
JSON (JSONB on PostgreSQL), an action column read back typed, and BigInteger ids (INTEGER on
SQLite, which only autoincrements those)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, DateTime, Dialect, Integer, MetaData, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

from trajforge.actions import Action


def as_utc(moment: datetime) -> datetime:
    """A stored time as an aware UTC time: SQLite hands back naive UTC times, PostgreSQL aware ones."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

Json = JSON().with_variant(JSONB(), "postgresql")
Id = BigInteger().with_variant(Integer(), "sqlite")


class ActionJson(TypeDecorator[Action]):
    """An action column (a step's, a correction's): stored as the action's JSON (`Action.stored`)
    and read back typed. The one place a stored row's action is parsed."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return dialect.type_descriptor(JSONB() if dialect.name == "postgresql" else JSON())

    def process_bind_param(self, value: Action | dict[str, Any] | None, dialect: Dialect) -> Any:
        return value.stored() if isinstance(value, Action) else value

    def process_result_value(self, value: Any, dialect: Dialect) -> Action | None:
        return None if value is None else Action.model_validate(value)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: Json, list[Any]: Json}

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
