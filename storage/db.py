"""Engines, sessions, schema migration and dialect-aware bulk writes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, Table, create_engine, event, inspect, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from storage.models import Base, Exclusion
from trajforge.errors import ConfigError, SealedVersion, StorageError
from trajforge.logs import redact_url
from trajforge.settings import Settings

SEALED_MESSAGE = "dataset version is sealed"  # raised by the triggers of migration 0006

MIGRATIONS = Path(__file__).parent / "migrations"
_DIALECTS = ("sqlite", "postgresql")


def create_db_engine(
    url: str, *, echo: bool = False, pool_size: int = 5, connect_timeout_s: int = 5, make_folder: bool = True
) -> Engine:
    """An engine for a SQLite or PostgreSQL URL (`make_folder`: a SQLite file's folder is made, so
    the first connection creates the file).

    Raises:
        ConfigError: the URL is malformed or names an unsupported database.
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        raise ConfigError(
            f"database URL {redact_url(url)!r} is malformed; set TRAJFORGE_DB_URL like "
            "postgresql+psycopg://user:pw@host:5432/db or sqlite:///path/to.db"
        ) from exc
    if parsed.host and "@" in parsed.host:  # `user:p@ss@host`: the password's tail parsed as the host
        raise ConfigError(
            f"database URL {redact_url(url)!r}: the password holds an unencoded '@'; write it as %40 "
            "(and any other reserved character percent-encoded) in TRAJFORGE_DB_URL or db.url"
        )
    if parsed.get_backend_name() not in _DIALECTS:
        raise ConfigError(
            f"database URL {redact_url(url)!r}: {parsed.get_backend_name()!r} is not supported; "
            "use sqlite:///… or postgresql+psycopg://…"
        )
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3, not psycopg2
    kwargs: dict[str, Any] = {"echo": echo, "future": True}
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:" and make_folder:
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
    else:
        kwargs.update(
            pool_size=pool_size,
            pool_pre_ping=True,
            connect_args={"connect_timeout": connect_timeout_s},
        )
    try:
        engine = create_engine(parsed, **kwargs)
    except NoSuchModuleError as exc:
        raise ConfigError(f"database URL {redact_url(url)!r}: unknown driver {parsed.drivername!r}") from exc
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")  # readers do not block the writer
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def engine_from_settings(settings: Settings) -> Engine:
    return create_db_engine(
        settings.db_url,
        echo=settings.db.echo,
        pool_size=settings.db.pool_size,
        connect_timeout_s=settings.db.connect_timeout_s,
    )


def check_connection(engine: Engine) -> None:
    """Connect once, turning a refused or failed connection into a StorageError."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except DBAPIError as exc:
        raise database_error(engine, exc) from exc


def database_error(engine: Engine, exc: DBAPIError) -> StorageError:
    """One line for a database that cannot be used: unreachable, or a damaged SQLite file."""
    reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc).splitlines()[0]
    where = redact_url(engine.url.render_as_string(False))
    if engine.dialect.name == "sqlite" and not isinstance(exc, OperationalError):
        return StorageError(
            f"database {where} is damaged or not a SQLite database ({reason}); restore it from a "
            "backup, or move the file aside to start afresh"
        )
    return StorageError(
        f"cannot connect to database {where}: {reason}; check TRAJFORGE_DB_URL and that the server is running"
    )


def integrity_problems(engine: Engine) -> list[str]:
    """SQLite's own integrity check (every page, index and constraint); empty when sound.

    PostgreSQL checks its pages itself (checksums), so it reports nothing here.
    """
    if engine.dialect.name != "sqlite":
        return []
    try:
        with engine.connect() as conn:
            rows = [str(r) for (r,) in conn.execute(text("PRAGMA integrity_check"))]
    except DBAPIError as exc:
        return [str(database_error(engine, exc))]
    return [] if rows == ["ok"] else rows


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Create or migrate the schema to `revision` (idempotent)."""
    check_connection(engine)
    command.upgrade(alembic_config(engine), revision)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one_or_none()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work commits on success and rolls back on any error.

    Raises:
        SealedVersion: the work tried to change a sealed dataset version (the database's
            triggers refuse it, whoever writes; migration 0006).
    """
    try:
        with factory() as session, session.begin():
            yield session
    except DBAPIError as exc:
        if SEALED_MESSAGE in str(exc.orig):
            raise SealedVersion(
                f"{SEALED_MESSAGE}: a sealed version and its shard list never change; publish a new version"
            ) from exc
        raise


def insert_ignore(
    session: Session,
    model: type[Base],
    rows: Sequence[dict[str, Any]],
    conflict: Sequence[str],
    *,
    count: bool = False,
) -> int | None:
    """Bulk INSERT … ON CONFLICT DO NOTHING; reruns add nothing twice.

    Args:
        count: return how many rows were really inserted. It costs a RETURNING clause
            (about 3x slower on PostgreSQL, see bench/bench_steps.py), so hot paths leave it off.

    Returns:
        The number of rows inserted when `count`, else None.
    """
    if not rows:
        return 0 if count else None
    table: Table = model.__table__  # type: ignore[assignment]
    dialect = session.get_bind().dialect.name
    stmt: Any
    if dialect == "postgresql":
        stmt = postgresql.insert(table).on_conflict_do_nothing(index_elements=list(conflict))
    elif dialect == "sqlite":
        stmt = sqlite.insert(table).on_conflict_do_nothing(index_elements=list(conflict))
    else:  # pragma: no cover - create_db_engine admits only these two
        raise StorageError(f"bulk insert is not implemented for {dialect}")
    if not count:
        session.execute(stmt, list(rows))
        return None
    # executemany rowcount is -1 through SQLAlchemy; RETURNING counts what was really inserted.
    return len(session.execute(stmt.returning(table.c.id), list(rows)).all())


__all__ = ["Base", "create_db_engine", "insert_ignore", "session_factory", "transaction", "upgrade"]


def record_exclusions(
    session: Session,
    round_id: int | None,
    stage: str,
    item_type: str,
    drops: Iterable[tuple[str, str, dict[str, Any]]],
) -> None:
    """Keep every filtered item with its reason: (item key, reason code, detail) rows, idempotently."""
    rows = [
        {
            "round_id": round_id,
            "stage": stage,
            "item_type": item_type,
            "item_key": key,
            "reason": reason,
            "detail": detail,
        }
        for key, reason, detail in drops
    ]
    insert_ignore(session, Exclusion, rows, ["stage", "item_type", "item_key", "reason"])
