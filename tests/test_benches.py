"""Benches that cannot rot: every module of `bench/` with a `main` declares its smoke mode (`SMOKE`,
the arguments of its smallest sizes) and runs in it here, as `python -m bench.NAME` runs, so a bench
that crashes fails the fast tier. The full sizes stay in `make bench`.

The benches that read a finished run get the shared tiny run (two rounds of the tiny evolve config,
made once per test run: `tests.conftest.tiny_run`), each a copy of its own: `{run}` is the folder,
`{home}` its `.trajforge`, `{out}` an empty folder of the bench's."""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bench
from rollout.suites import browsergym
from tests.support.evolve import copy_sqlite
from tests.support.processes import child_env
from tests.support.trainer_recipes import TRAINERS
from tests.support.trainers import trainer_python

NEEDS_RUN = {"{run}", "{home}"}


def _in_order() -> list[str]:
    """The bench modules, one that reads the shared run first (its worker makes the run, a minute of
    two rounds), then those that need none (the other workers go on meanwhile), then the rest that
    read it. Read from the source, so collecting imports no bench."""
    root = Path(bench.__path__[0])
    names = sorted(
        m.name for m in pkgutil.iter_modules([str(root)]) if not m.name.startswith("_") and m.name != "common"
    )
    smoke = {
        n: re.search(r'^SMOKE = "(.*)"$', (root / f"{n}.py").read_text(encoding="utf-8"), re.M) for n in names
    }
    reads = [n for n in names if (found := smoke[n]) and any(p in found[1] for p in NEEDS_RUN)]
    rest = [n for n in names if n not in reads]
    return reads[:1] + rest + reads[1:]


BENCHES = _in_order()


def _bench_run(tiny_run: Path, to: Path) -> Path:
    """The tiny run as `make run` lays it out: `to`/.trajforge, the database inside it, and beside it
    what `trajforge evolve` printed (`to`.out)."""
    shutil.copytree(tiny_run / "home", to / ".trajforge")
    copy_sqlite(tiny_run / "ref.sqlite", to / ".trajforge" / "trajforge.db")
    shutil.copy(tiny_run / "evolve.out", to.with_suffix(".out"))
    return to


def _installed(python: Path) -> bool:
    """Whether a venv has finished installing: `.ci/run` writes `.pins-key` last, `make browsergym`
    `.installed`. In CI the trainers and BrowserGym install beside the fast tier; half a venv is none."""
    return any((python.parent.parent / mark).is_file() for mark in (".pins-key", ".installed"))


def _venvs(env: dict[str, str], none: Path) -> dict[str, str]:
    """The trainers' and BrowserGym's venvs for a bench, or, while they are still installing, a folder
    without them (the bench says they are not installed)."""
    bg = Path(os.environ.get("TRAJFORGE_TEST_BROWSERGYM_PYTHON") or browsergym.VENV / "bin" / "python")
    trainers = all(_installed(trainer_python(t)) for t in TRAINERS)
    return env | {
        browsergym.PYTHON_ENV: str(bg if _installed(bg) else none / "bin" / "python"),
        "TRAJFORGE_TEST_TRAINERS": str(trainer_python("llamafactory").parents[2] if trainers else none),
    }


def test_every_bench_declares_a_smoke_mode() -> None:
    modules = [importlib.import_module(f"bench.{n}") for n in BENCHES]
    benches = [m for m in modules if hasattr(m, "main")]
    lacking = [m.__name__ for m in benches if not isinstance(getattr(m, "SMOKE", None), str)]
    assert len(benches) >= 30  # the discovery finds them
    assert not lacking, f"give these benches a SMOKE, the arguments of their smallest sizes: {lacking}"


@pytest.mark.parametrize("name", BENCHES)
def test_the_bench_runs_in_its_smoke_mode(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    module = importlib.import_module(f"bench.{name}")
    if not hasattr(module, "main"):
        pytest.skip(f"bench.{name} is a helper, not a bench")
    argv = shlex.split(module.SMOKE)
    env = child_env("TRAJFORGE_") | {k: v for k, v in os.environ.items() if k.startswith("TRAJFORGE_TEST_")}
    env["TRAJFORGE_CURATE_ENCODER_STEPS"] = "3"  # a bench that runs a round trains the encoder a few steps
    env = _venvs(env, tmp_path / "not-installed")
    places = {"{out}": str(tmp_path / "out")}
    (tmp_path / "out").mkdir()
    if any(p in a for a in argv for p in NEEDS_RUN):
        run = _bench_run(request.getfixturevalue("tiny_run"), tmp_path / "run")
        places |= {"{run}": str(run), "{home}": str(run / ".trajforge")}
    if name == "bench_annotation":
        server = request.getfixturevalue("label_studio")
        env |= {"TRAJFORGE_TEST_LS_URL": server.url, "TRAJFORGE_TEST_LS_TOKEN": server.token,
                "TRAJFORGE_TEST_LS_USERNAME": server.username, "TRAJFORGE_TEST_LS_PASSWORD": server.password}  # fmt: skip
    args = []
    for arg in argv:
        for place, value in places.items():
            arg = arg.replace(place, value)
        args.append(arg)
    root = Path(bench.__path__[0]).parent
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *args],
        cwd=tmp_path, env=env | {"PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    shown = f"python -m bench.{name} {' '.join(args)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, shown
    assert done.stdout.strip(), f"bench.{name} printed nothing"
