"""One holder at a time per dataset: the lock `evolve` holds while it runs rounds.

- PostgreSQL: a session advisory lock on a connection of its own. The server frees it when
  that connection ends, so a killed process (kill -9, a crashed worker) never leaves it behind.
  The holder is named by the connection's `application_name`, which `pg_stat_activity` shows.
- SQLite: `flock` on a file beside the database file, which the kernel frees when the process
  dies; the file keeps the holder's name. An in-memory database has one process: a
  process-wide lock.

Taking a held lock raises `LoopBusy` with the holder's name: one line, never a wait that
looks like a hang.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from sqlalchemy import Connection, Engine, text

from trajforge.errors import LoopBusy

_NAMESPACE = 0x7472_6A66  # "trjf": the first key of every trajforge advisory lock
_MEMORY: dict[str, threading.Lock] = {}
_MEMORY_GUARD = threading.Lock()


def holder_line(what: str) -> str:
    """Who holds the lock: the command, host, pid and start time (UTC)."""
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{what} (pid {os.getpid()} on {socket.gethostname()}, since {started})"


def _key(name: str) -> int:
    """The second advisory key: a stable, positive int4 from the lock's name."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:7], 16)


def _busy(name: str, holder: str) -> LoopBusy:
    return LoopBusy(
        f"{name} is held by {holder}; wait for it to finish (or stop it), then run again: "
        "one writing command at a time per home (its database): evolve, a schedule's run, rollout, run, "
        "stage, critics, curate, datasets publish, annotate push and pull, queries generate",
        holder,
    )


@contextmanager
def exclusive(engine: Engine, name: str, what: str) -> Iterator[None]:
    """Hold the lock `name` (e.g. "evolve of dataset trajforge") for the block.

    Raises:
        LoopBusy: another process (or this one) holds it; the message names the holder.
    """
    if engine.dialect.name == "postgresql":
        with _advisory(engine, name, what):
            yield
    elif engine.url.database and engine.url.database != ":memory:":
        with _file_lock(Path(engine.url.database), name, what):
            yield
    else:
        with _memory_lock(name):
            yield


@contextmanager
def _advisory(engine: Engine, name: str, what: str) -> Iterator[None]:
    key = _key(name)
    with engine.connect() as conn:
        conn.execute(text("SELECT set_config('application_name', :n, false)"), {"n": holder_line(what)[:63]})
        got = conn.execute(text("SELECT pg_try_advisory_lock(:a, :b)"), {"a": _NAMESPACE, "b": key}).scalar()
        conn.commit()
        if not got:
            raise _busy(name, _advisory_holder(conn, key) or "another session")
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:a, :b)"), {"a": _NAMESPACE, "b": key})
            conn.commit()


def _advisory_holder(conn: Connection, key: int) -> str | None:
    """The `application_name` of the session holding the advisory lock `key` in this database,
    read from `pg_locks` without taking the lock."""
    holder = conn.execute(
        text(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :a AND l.objid = :b "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ),
        {"a": _NAMESPACE, "b": key},
    ).scalar()
    return str(holder) if holder is not None else None


def lock_path(database: Path, name: str) -> Path:
    """The lock file of `name`, beside the database file."""
    slug = "".join(c if c.isalnum() else "-" for c in name).strip("-")
    return database.with_name(f"{database.name}.{slug}.lock")


@contextmanager
def _file_lock(database: Path, name: str, what: str) -> Iterator[None]:
    path = lock_path(database, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(name, _read(fh) or "another process") from None
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(holder_line(what))
            fh.flush()
            yield
        finally:
            fh.truncate(0)
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read(fh: IO[str]) -> str:
    fh.seek(0)
    return fh.read().strip()


@contextmanager
def _memory_lock(name: str) -> Iterator[None]:
    with _MEMORY_GUARD:
        lock = _MEMORY.setdefault(name, threading.Lock())
    if not lock.acquire(blocking=False):
        raise _busy(name, "this process")
    try:
        yield
    finally:
        lock.release()


def holder(engine: Engine, name: str) -> str | None:
    """Who holds the lock now (None: nobody), for `trajforge status`.

    On PostgreSQL it reads `pg_locks` and takes nothing: a probe that took the lock, however
    briefly, made an evolve starting at that moment refuse to run. A file or in-process lock is
    probed by taking it, which holds it for microseconds and touches no database."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            return _advisory_holder(conn, _key(name))
    try:
        with exclusive(engine, name, "trajforge status"):
            return None
    except LoopBusy as exc:
        return exc.holder


# One loop per home, whatever dataset it publishes: rounds, devices and policies belong to the home.
LOOP_LOCK = "the evolve loop of this home"
