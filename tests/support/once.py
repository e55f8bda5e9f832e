"""A value computed once per test run, shared by every xdist worker (pytest-xdist's own recipe).

The first worker to ask computes it under a file lock and leaves it as JSON beside the workers'
base temp folders; the others read it. Without xdist the test session is the only worker.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock


def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every worker of this run shares (xdist gives each worker a base of its own in it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if base.name.startswith("popen-gw") else base


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[], Any]) -> Any:
    """`compute()`'s JSON value, computed by one worker of this run; every worker gets the same."""
    cached = run_root(tmp_path_factory) / f"{name}.json"
    with FileLock(str(cached) + ".lock"):
        if not cached.exists():
            cached.write_text(json.dumps(compute()), encoding="utf-8")
        return json.loads(cached.read_text(encoding="utf-8"))
