"""The loop on BrowserGym's tasks, by their ids, with no glue: `trajforge evolve` rolls them out in
BrowserGym's own venv, judges them by BrowserGym's reward, and exports their steps with the bid the
policy aimed at still on the step's element tree."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.evolve.test_suite_loop import TRAJFORGE, _evolve
from tests.rollout.test_browsergym_suite import browsergym_python
from tests.support.processes import child_env
from trajforge.recovery import PROBE_REASONS

TASKS = ["browsergym:miniwob.click-test", "browsergym:miniwob.enter-text"]


@pytest.mark.browser
@pytest.mark.slow
def test_browsergym_tasks_evolve_and_export(tmp_path: Path) -> None:
    bg = {"TRAJFORGE_BROWSERGYM_PYTHON": str(browsergym_python())}
    config = {
        "apps": TASKS,
        "evolve": {"rounds": 1, "queries_per_app": 3, "rollouts": 2, "heldout_per_app": 2,
                   "heldout_rollouts": 1, "devices": 2, "max_steps": 6},
        "curate": {"featurizer": "phash"},
    }  # fmt: skip
    table = _evolve(tmp_path / "run", config, extra_env=bg)
    first = table["rounds"][0]
    apps = first["apps"]
    assert set(apps) == set(TASKS)
    for app in TASKS:  # 3 seeds x 2 rollouts, each decided by BrowserGym's own reward
        assert apps[app]["episodes"] == 6 and apps[app]["outcome_sources"] == {"verifier": 6}
    assert apps["browsergym:miniwob.click-test"]["successes"] > 0
    assert set(first["heldout"]["per_app"]) == set(TASKS)
    rec = first["recovery"]  # probes replay the seed on the same BrowserGym servers
    made = rec["samples"].get("error_escape", 0)
    assert rec["probed"] == made + sum(n for r, n in rec["skipped"].items() if r in PROBE_REASONS)

    out = tmp_path / "export"
    env = child_env("TRAJFORGE_")
    done = subprocess.run(
        [TRAJFORGE, "datasets", "export", "1", "--format", "sft-sharegpt", "--out", str(out)],
        env=env | {"TRAJFORGE_HOME": str(tmp_path / "run" / "home")}, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]
    assert rows and all(row["images"] for row in rows)
    _browsergym_rows_parse_in_browsergym(tmp_path, env | {"TRAJFORGE_HOME": str(tmp_path / "run" / "home")})


PARSE = """
import json, sys
from browsergym.core.action.highlevel import HighLevelActionSet
sys.path.insert(0, sys.argv[1])
from serve import SUBSETS
strict = HighLevelActionSet(subsets=SUBSETS, multiaction=True, strict=True)
loose = HighLevelActionSet(subsets=SUBSETS, multiaction=True, strict=False)  # the demo agent's parsing
bad = []
for line in sys.stdin:
    answer, code = json.loads(line)
    for parser, text in ((loose, answer), (strict, code)):
        try:
            parser.to_python_code(text)
        except Exception as exc:
            bad.append([text, repr(exc)])
print(json.dumps(bad))
"""


def _browsergym_rows_parse_in_browsergym(tmp_path: Path, env: dict[str, str]) -> None:
    """`--format browsergym`: the demo agent's conversation, each answer an action string that
    BrowserGym's own parser reads (the answer with its reasoning as the demo agent's parsing takes
    it, the code alone strictly), aimed at a bid the row's accessibility tree shows."""
    out = tmp_path / "bg-export"
    done = subprocess.run(
        [TRAJFORGE, "datasets", "export", "1", "--format", "browsergym", "--out", str(out)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "demo agent's conversation" in done.stdout
    rows = [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]
    assert rows and json.loads((out / "dataset_info.json").read_text())
    for row in rows:
        system, user, said = (m["content"] for m in row["messages"])
        assert system.startswith("# Instructions") and "# Current page Accessibility Tree" in user
        assert said.endswith(f"```{row['meta']['action']}```")
        bid = re.match(
            r'(?:click|dblclick|hover|fill|select_option|focus|clear)\("([^"]+)"', row["meta"]["action"]
        )
        assert bid is None or f"[{bid.group(1)}]" in user, (row["meta"]["action"], user[-3000:])
    serve = Path(__file__).resolve().parents[2] / "rollout" / "suites" / "browsergym"
    lines = "".join(json.dumps([m["messages"][-1]["content"], m["meta"]["action"]]) + "\n" for m in rows)
    parsed = subprocess.run(
        [str(browsergym_python()), "-c", PARSE, str(serve)], input=lines, capture_output=True, text=True
    )
    assert parsed.returncode == 0, parsed.stderr[-2000:]
    assert json.loads(parsed.stdout) == [], parsed.stdout[:2000]  # 100% parse
