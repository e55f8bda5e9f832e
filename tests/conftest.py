"""Shared fixtures: SQLite and PostgreSQL databases, a moto S3 server, the scripted LLM.

A test that needs a service skips with a visible reason when it is absent, except
when TRAJFORGE_TEST_REQUIRE_SERVICES=1 (set by .ci/run), where the skip becomes a failure.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from storage.db import create_db_engine, session_factory, upgrade
from storage.models import Base
from tests.support.evolve import finished_tiny_run, tiny_config
from tests.support.label_studio import LabelStudioServer, label_studio_bin, running_server, serve
from tests.support.once import once_per_run, run_root
from tests.support.processes import LOADED_MACHINE, free_port
from tests.support.scripted_llm import ScriptedLLM
from trajforge.settings import S3Settings, Settings, load_settings

REQUIRE_SERVICES = os.environ.get("TRAJFORGE_TEST_REQUIRE_SERVICES") == "1"
PG_ADMIN_URL = os.environ.get("TRAJFORGE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def service_missing(what: str) -> None:
    """Skip, or fail in CI where every service must be there."""
    if REQUIRE_SERVICES:
        pytest.fail(f"{what} (TRAJFORGE_TEST_REQUIRE_SERVICES=1 turns this skip into a failure)")
    pytest.skip(what)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets its own working directory, so no state is shared through ./.trajforge, and
    the loaded machine's Prefect start timeout (`tests.support.processes.LOADED_MACHINE`)."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("TRAJFORGE_") and not name.startswith("TRAJFORGE_TEST_"):
            monkeypatch.delenv(name)
    for name, value in LOADED_MACHINE.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for the test session, dropped at the end."""
    try:
        admin = create_db_engine(PG_ADMIN_URL, connect_timeout_s=3)
        admin = admin.execution_options(isolation_level="AUTOCOMMIT")
        name = f"trajforge_test_{uuid.uuid4().hex[:10]}"
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # any failure to reach the server means "absent"
        service_missing(f"PostgreSQL not reachable at {PG_ADMIN_URL}: {type(exc).__name__}")
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    engine = create_db_engine(url)
    upgrade(engine)
    engine.dispose()
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same test on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'test.db'}"
    return request.getfixturevalue("pg_database")


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An upgraded database, emptied after the test."""
    eng = create_db_engine(db_url)
    upgrade(eng)
    yield eng
    if eng.dialect.name == "postgresql":
        tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
        with eng.begin() as conn:
            conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    eng.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    return session_factory(engine)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real S3 API: moto's threaded server on 127.0.0.1."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        service_missing("moto[server] is not installed")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_settings(moto_endpoint: str) -> S3Settings:
    """S3 settings with a bucket of this test's own."""
    return S3Settings(
        endpoint=moto_endpoint,
        access_key="testing",
        secret_key="testing",
        bucket=f"tf-{uuid.uuid4().hex[:12]}",
        region="us-east-1",
    )


@pytest.fixture
def scripted_llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture(scope="session")
def label_studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabelStudioServer]:
    """A real Label Studio server (see tests/support/label_studio.py)."""
    running = running_server()
    if running is not None:
        yield running
        return
    binary = label_studio_bin()
    if binary is None:
        service_missing(
            "Label Studio is not installed (.ci/run installs label-studio 1.23.2 into its own virtualenv; "
            "set TRAJFORGE_TEST_LS_BIN to its label-studio)"
        )
    with serve(str(binary), tmp_path_factory.mktemp("label-studio"), free_port()) as server:
        yield server


@pytest.fixture
def evolve_config(tmp_path: Path, db_url: str, engine: Engine) -> Path:
    """A tiny evolve config on SQLite and on PostgreSQL (the engine fixture empties PostgreSQL after)."""
    return tiny_config(tmp_path / "evolve.yaml", db_url)


@pytest.fixture
def evolve_settings(evolve_config: Path) -> Settings:
    return load_settings(evolve_config)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two finished rounds of the tiny config on SQLite, made once per test run for every worker
    (`tests.support.evolve.finished_tiny_run`): read it, or `copy_tiny_run` it before writing."""
    root = run_root(tmp_path_factory)
    return Path(once_per_run(tmp_path_factory, "tiny-run", lambda: str(finished_tiny_run(root))))
