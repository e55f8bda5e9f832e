"""The loop on environments trajforge did not build: MiniWoB++'s pages beside a built-in app, and
a suite a separate package registers through the `trajforge.suites` entry point."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from PIL import Image

from tests.conftest import service_missing
from tests.flows.test_cli import TRAJFORGE
from tests.support.processes import child_env
from trajforge.recovery import PROBE_REASONS

REPO = Path(__file__).resolve().parents[2]


def _evolve(
    folder: Path, config: dict, extra_env: dict[str, str] | None = None, trajforge: str = TRAJFORGE
) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.yaml").write_text(yaml.safe_dump({"home": str(folder / "home"), **config}))
    env = child_env("TRAJFORGE_", shared_prefect=True) | (extra_env or {})
    done = subprocess.run(
        [trajforge, "evolve", "--config", "run.yaml"], cwd=folder, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads((folder / "home" / "report" / "rounds.json").read_text())


@pytest.mark.browser
@pytest.mark.slow
def test_miniwob_tasks_beside_a_built_in_app_evolve_and_export(tmp_path: Path) -> None:
    from rollout.web.env import chromium_available

    if not chromium_available():
        service_missing("Chromium or Playwright missing (apt-get install chromium)")
    config = {
        "apps": ["miniwob:click-button", "miniwob:enter-text", "takeout"],
        "evolve": {"rounds": 1, "queries_per_app": 4, "rollouts": 2, "heldout_per_app": 4, "heldout_rollouts": 1},
        "curate": {"featurizer": "phash"},
    }  # fmt: skip
    table = _evolve(tmp_path / "run", config)
    first = table["rounds"][0]
    apps = first["apps"]
    assert set(apps) == {"miniwob:click-button", "miniwob:enter-text", "takeout"}
    for app in ("miniwob:click-button", "miniwob:enter-text"):
        # 4 seeds x 2 rollouts, decided by MiniWoB's own reward
        assert apps[app]["episodes"] == 8 and apps[app]["outcome_sources"] == {"verifier": 8}
    assert apps["miniwob:click-button"]["successes"] > 0
    assert set(first["heldout"]["per_app"]) == set(apps)
    # Error recovery ran on the same device slots (a MiniWoB page replays its seed): every probe
    # made a pair or is counted with its reason.
    rec = first["recovery"]
    made = rec["samples"].get("error_escape", 0)
    assert rec["probed"] == made + sum(n for r, n in rec["skipped"].items() if r in PROBE_REASONS)

    out = tmp_path / "export"
    home = {"TRAJFORGE_HOME": str(tmp_path / "run" / "home")}
    env = child_env("TRAJFORGE_") | home
    done = subprocess.run(
        [TRAJFORGE, "datasets", "export", "1", "--format", "sft-sharegpt", "--out", str(out)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]
    sizes = {image: Image.open(out / image).size for row in rows for image in row["images"]}  # relative paths
    miniwob = [
        r for r in rows if any(_is_miniwob(m["content"]) for m in r["messages"] if m["role"] == "user")
    ]
    assert miniwob and len(miniwob) < len(rows)
    # no launcher: a MiniWoB episode starts on its task page, so each of its images is MiniWoB's 160x210
    assert {sizes[image] for row in miniwob for image in row["images"]} == {(160, 210)}


def _is_miniwob(prompt: str) -> bool:
    return (
        "Click on the" in prompt and "button." in prompt
    ) or "into the text field and press Submit" in prompt


@pytest.mark.slow
def test_a_suite_package_installed_from_its_wheel_runs_two_rounds(tmp_path: Path) -> None:
    """A user's suite package as users ship one: a wheel (built here from tests/support/tally_suite.py)
    whose metadata registers it under `trajforge.suites`, installed into a fresh venv beside a
    trajforge installed from its own wheel, and evolved from that venv's `trajforge` command."""
    package = tmp_path / "tally-suite"
    (package / "tally_suite").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "support" / "tally_suite.py", package / "tally_suite" / "__init__.py")
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tally-suite"\nversion = "0.1"\n'
        '[project.entry-points."trajforge.suites"]\ntally = "tally_suite:TallySuite"\n'
    )
    project = tmp_path / "trajforge"  # a copy: setuptools builds in the source folder (build/)
    skip = (".*", "__pycache__", "build", "*.egg-info", "tests", "docs", "bench", "deploy")
    shutil.copytree(REPO, project, ignore=shutil.ignore_patterns(*skip))
    wheels = tmp_path / "wheels"
    for source in (package, project):  # the project's own, not the editable install the tests run on
        _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
              "-w", str(wheels), str(source)], cwd=tmp_path)  # fmt: skip
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # trajforge's dependencies come from the test venv's site-packages (no network, no reinstall);
    # the editable trajforge there is not visible: a plain path entry processes no .pth file.
    (site / "deps.pth").write_text(
        next(p for p in map(Path, sys.path) if p.name == "site-packages").as_posix()
    )
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
          *map(str, sorted(wheels.glob("*.whl")))], cwd=tmp_path)  # fmt: skip
    found = _run([str(venv / "bin" / "python"), "-c", "import rollout, tally_suite; print(rollout.__file__)"],
                 cwd=tmp_path)  # fmt: skip
    assert found.startswith(str(site))  # trajforge itself from the venv, not the source tree

    config = {"apps": ["tally:reach"], "evolve": {"rounds": 2, "queries_per_app": 4, "rollouts": 2,
              "heldout_per_app": 4, "heldout_rollouts": 1}, "curate": {"featurizer": "phash"}}  # fmt: skip
    table = _evolve(tmp_path / "run", config, trajforge=str(venv / "bin" / "trajforge"))
    rounds = table["rounds"]
    assert [r["status"] for r in rounds] == ["done", "done"]
    assert set(rounds[0]["apps"]) == {"tally:reach"} and rounds[0]["apps"]["tally:reach"]["episodes"] == 8
    assert rounds[1]["heldout"]["per_app"]["tally:reach"][1] == 4


def _run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=_clean_env())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def _clean_env() -> dict[str, str]:
    """The environment without trajforge's settings and without PYTHONPATH: a user's shell."""
    return {k: v for k, v in child_env("TRAJFORGE_").items() if k != "PYTHONPATH"}


@pytest.mark.slow
def test_a_gymnasium_env_runs_two_rounds_through_gym(tmp_path: Path) -> None:
    """Our own RGB gymnasium env (tests/support/gym_shapes.py) by its id, and by a suite file that
    gives its kwargs: its seeds are the queries, its reward and termination the outcomes."""
    suite = tmp_path / "run" / "shapes.yaml"
    suite.parent.mkdir(parents=True)
    suite.write_text(
        "name: shapes\ngym:\n  type: {id: 'tests.support.gym_shapes:Shapes-v0', kwargs: {mode: type}}\n"
    )
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    config = {"apps": ["gym:tests.support.gym_shapes:Shapes-v0", "shapes.yaml:type"],
              "evolve": {"rounds": 2, "queries_per_app": 4, "rollouts": 2, "heldout_per_app": 4,
                         "heldout_rollouts": 1},
              "curate": {"featurizer": "phash"}}  # fmt: skip
    rounds = _evolve(tmp_path / "run", config, {"PYTHONPATH": path})["rounds"]
    assert [r["status"] for r in rounds] == ["done", "done"]
    apps = rounds[0]["apps"]
    assert set(apps) == {"gym:tests.support.gym_shapes:Shapes-v0", "shapes:type"}
    for app in apps.values():  # 4 seeds x 2 rollouts, each decided by the env's own reward
        assert app["episodes"] == 8 and app["outcome_sources"] == {"verifier": 8}
    assert sum(app["successes"] for r in rounds for app in r["apps"].values()) > 0
    assert set(rounds[1]["heldout"]["per_app"]) == set(apps)
    if apps["shapes:type"]["successes"] == 0 and rounds[0]["heldout"]["per_app"]["shapes:type"][0] == 0:
        # nothing solved it in round 1: round 2 gives each of its queries an explorer rollout too
        assert rounds[1]["curriculum"]["explored"]["queries"] == 4
