"""Annotation queue payload: what Label Studio's task list downloads, with screenshots inline
(`annotate.images=data`) vs uploaded once and linked (`upload`, the local store's default).

One smoke round (one query per app, 4 rollouts each) is pushed twice, `--tasks` tasks each
time, into fresh projects; then the first page of the task list (`/api/tasks`, as the Data
Manager asks for it) is fetched. Label Studio is started from TRAJFORGE_TEST_LS_BIN (as
`.ci/run` installs it) or reused from TRAJFORGE_TEST_LS_URL.
Usage: python -m bench.bench_annotation [--tasks 10]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import uuid
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any, Literal

import httpx
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from annotation.push import push_round
from bench.common import table, timed
from evolve.smoke import run_smoke_round
from storage.db import engine_from_settings, session_factory, transaction
from storage.models import AnnotationProject, AnnotationTask, Round
from storage.objectstore import ObjectStore, open_object_store
from tests.support.label_studio import label_studio_bin, running_server, serve
from trajforge.settings import AnnotationSettings, Settings, load_settings

# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--tasks 2"


def _push(
    server: Any,
    sessions: sessionmaker[Session],
    round_id: int,
    store: ObjectStore,
    settings: Settings,
    mode: Literal["data", "upload"],
    tasks: int,
) -> list[str]:
    """Push the round into new projects with images as `mode`, then fetch the task list: a table
    row, its last cell the list's size in bytes."""
    with transaction(sessions) as s:  # the same trajectories again, into new projects
        s.execute(delete(AnnotationTask))
        s.execute(delete(AnnotationProject))
    annotate = AnnotationSettings(
        url=server.url,
        api_key=server.token,
        project_prefix=f"bench-{uuid.uuid4().hex[:6]}",
        project_by="purpose",
        audit_fraction=1.0,
        images=mode,
    )
    report, push_s = timed(partial(push_round, sessions, round_id, store, annotate, settings.s3, tasks))
    with sessions() as s:
        project = s.scalars(select(AnnotationProject.ls_project_id)).one()
    answer, list_s = timed(
        partial(
            httpx.get,
            f"{server.url}/api/tasks",
            params={"project": project, "page_size": tasks, "page": 1},
            headers={"Authorization": f"Token {server.token}"},
            timeout=120,
        )
    )
    size = len(answer.content)
    pushed = str(sum(report.pushed.values()))
    return [
        mode,
        pushed,
        str(report.merged),
        f"{push_s:.1f} s",
        f"{size / 1e6:.2f} MB",
        f"{list_s:.2f} s",
        str(size),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=10)
    args = parser.parse_args()
    with ExitStack() as stack:
        server = running_server()
        if server is None:
            binary = label_studio_bin()
            if binary is None:
                print("== annotation payload: skipped, Label Studio is not installed (TRAJFORGE_TEST_LS_BIN)")
                return
            work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            server = stack.enter_context(serve(binary, work / "ls", 8093))
        home = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        os.environ["TRAJFORGE_DB_URL"] = f"sqlite:///{home / 'bench.db'}"
        os.environ["TRAJFORGE_STORE_PATH"] = str(home / "store")
        settings = load_settings()
        run_smoke_round(settings, queries_per_app=1, rollouts=4)
        sessions = session_factory(engine_from_settings(settings))
        with sessions() as s:
            round_id = s.scalars(select(Round.id)).one()
        store = open_object_store(settings)
        modes: tuple[Literal["data"], Literal["upload"]] = ("data", "upload")
        rows = [_push(server, sessions, round_id, store, settings, mode, args.tasks) for mode in modes]
        sizes = {mode: int(row.pop()) for mode, row in zip(modes, rows, strict=True)}
        print(
            table(
                f"annotation payload: task list of {args.tasks} tasks",
                ["images", "pushed", "identical merged", "push", "task list", "list fetch"],
                rows,
            )
        )
        print(f"upload vs data: the task list is {sizes['data'] / max(1, sizes['upload']):.0f}x smaller")


if __name__ == "__main__":
    main()
