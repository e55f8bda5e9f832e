"""One evolve at a time per dataset, on SQLite (a file lock) and PostgreSQL (an advisory lock):
the second run refuses with one line that names the first, and a killed holder frees the lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text

from storage.db import create_db_engine
from storage.locks import LOOP_LOCK, exclusive, holder
from storage.models import DatasetVersion, Episode
from tests.conftest import PG_ADMIN_URL
from tests.support.processes import child_env
from trajforge.errors import LoopBusy

TRAJFORGE = str(Path(sys.executable).with_name("trajforge"))
NAME = LOOP_LOCK


def test_a_held_lock_names_its_holder_and_is_free_after(engine: Engine) -> None:
    assert holder(engine, NAME) is None
    with exclusive(engine, NAME, "first evolve"):
        with pytest.raises(LoopBusy) as caught, exclusive(engine, NAME, "second evolve"):
            pass
        assert f"first evolve (pid {os.getpid()}" in str(caught.value)
        assert "one writing command at a time per home (its database)" in str(caught.value)
        with exclusive(engine, "another lock", "other"):
            pass  # another lock is not this one
    assert holder(engine, NAME) is None
    with exclusive(engine, NAME, "third evolve"):
        pass


@pytest.mark.postgres
def test_the_holder_named_is_the_one_in_this_database(pg_database: str) -> None:
    """Advisory locks are per database: a loop of the same dataset on another database of the same
    server is not this one's holder (a status or refusal once named the other database's pid)."""
    admin = create_db_engine(PG_ADMIN_URL).execution_options(isolation_level="AUTOCOMMIT")
    others = [f"trajforge_other_{uuid.uuid4().hex[:8]}" for _ in range(3)]
    with admin.connect() as conn:
        for name in others:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    engines = [create_db_engine(pg_database)]
    engines += [
        create_db_engine(admin.url.set(database=n).render_as_string(hide_password=False)) for n in others
    ]
    try:
        with ExitStack() as held:
            for i, eng in enumerate(engines):
                held.enter_context(exclusive(eng, NAME, f"evolve number {i}"))
            for i, eng in enumerate(engines):  # the same query, asked of each database, names its own
                assert f"evolve number {i} " in (holder(eng, NAME) or "")
    finally:
        for eng in engines:
            eng.dispose()
        with admin.connect() as conn:
            for name in others:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.postgres
def test_asking_who_holds_the_lock_never_takes_it(pg_database: str) -> None:
    """`trajforge status` (and the tests' polling) read the holder without taking the lock: a probe
    that took it for a moment once made an evolve starting at that moment refuse (a CI failure)."""
    eng = create_db_engine(pg_database)
    stop, asked = threading.Event(), [0]

    def ask() -> None:
        while not stop.is_set():
            holder(eng, NAME)
            asked[0] += 1

    prober = threading.Thread(target=ask)
    prober.start()
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # every take while the prober asks as fast as it can
            with exclusive(eng, NAME, "evolve"):
                assert f"evolve (pid {os.getpid()}" in (holder(eng, NAME) or "")
    finally:
        stop.set()
        prober.join()
        eng.dispose()
    assert asked[0] > 10


def test_a_killed_holder_frees_the_lock(engine: Engine, db_url: str) -> None:
    script = (
        "import sys, time\n"
        "from storage.db import create_db_engine\n"
        "from storage.locks import exclusive\n"
        "with exclusive(create_db_engine(sys.argv[1]), sys.argv[2], 'doomed evolve'):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, db_url, NAME], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        assert "doomed evolve" in (holder(engine, NAME) or "")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10  # PostgreSQL ends the dead client's session on its own time
    while holder(engine, NAME) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    with exclusive(engine, NAME, "next evolve"):
        pass


def test_a_second_evolve_refuses_in_one_line_and_writes_nothing(evolve_config: Path, engine: Engine) -> None:
    """One loop per home: an evolve publishing another dataset is refused too (it once ran beside)."""
    with exclusive(engine, NAME, "trajforge evolve"):
        done = subprocess.run(
            [TRAJFORGE, "evolve", "--rounds", "1", "--config", str(evolve_config)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "TRAJFORGE_EVOLVE_DATASET": "another-dataset"},
        )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"held by trajforge evolve (pid {os.getpid()}" in lines[0]
    assert "evolving" not in done.stdout  # refused before any round started
    assert not (evolve_config.parent / "home" / "report").exists()


@pytest.mark.slow
def test_two_concurrent_evolves_one_works_the_other_refuses(evolve_config: Path, engine: Engine) -> None:
    command = [TRAJFORGE, "evolve", "--rounds", "1", "--config", str(evolve_config)]
    env = child_env("PREFECT_", shared_prefect=True)
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + 120
    while holder(engine, NAME) is None and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    second = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-3000:]
    assert second.returncode == 1 and len(second.stderr.strip().splitlines()) == 1, second.stderr
    assert f"held by trajforge evolve (pid {first.pid}" in second.stderr
    with engine.connect() as conn:  # the round was played once: every episode uid once, one version
        episodes = conn.execute(select(func.count(), func.count(Episode.uid.distinct()))).one()
        versions = conn.execute(select(func.count()).select_from(DatasetVersion)).scalar()
    assert episodes[0] == episodes[1] > 0 and versions == 1
