"""Every model family's request against a real OpenAI-compatible server: `transformers serve` with a
tiny random Qwen2.5-VL, whose real chat template and image processor run on each request.

The model's answers are garbage; the point is that each family's request is accepted (no
`policy_error`), every answer is kept as data (parsed, or recorded with its parse reason), and the
endpoint probe copes with a server whose /models answers 500 for a local model path.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import free_port, service_missing
from tests.flows.test_cli import cli
from tests.flows.test_endpoint_probe import _one_error_line
from tests.support.transformers_serve import ModelServer, serve_python, transformers_serve
from trajforge.families import FAMILY_NAMES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    python = serve_python()
    if python is None or not Path(python).is_file():
        service_missing(
            "transformers serve is not installed (.ci/run builds it; TRAJFORGE_TEST_SERVE_PYTHON)"
        )
    with transformers_serve(str(python), tmp_path_factory.mktemp("serve"), free_port()) as running:
        yield running


def _env(server: ModelServer, model: str | None = None) -> dict[str, str]:
    return {
        "TRAJFORGE_LLM_BASE_URL": server.url,
        "TRAJFORGE_LLM_MODEL": model or server.model,
        "TRAJFORGE_LLM_MAX_RETRIES": "0",
        "TRAJFORGE_POLICY_MAX_TOKENS": "24",  # garbage either way: keep the CPU's share small
    }


def test_the_probe_passes_the_real_server_and_names_a_model_it_does_not_serve(
    server: ModelServer, tmp_path: Path
) -> None:
    ok = cli("check", env=_env(server), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "answered a one-token request: ok" in ok.stdout  # its /models answers 500 for a local path
    wrong = cli("check", env=_env(server, "no-such-model"), cwd=tmp_path)
    _one_error_line(wrong, "rejected a one-token request for model 'no-such-model' (400", "pinned")


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_every_familys_request_is_accepted_and_every_answer_kept_as_data(
    server: ModelServer, tmp_path: Path, family: str
) -> None:
    args = ("rollout", "--app", "settings", "--queries", "1", "--family", family, "--max-steps", "3")
    done = cli(*args, "--workers", "1", env=_env(server), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(tmp_path / ".trajforge" / "trajforge.db") as conn:
        episodes = conn.execute("select reason, num_steps, meta from episode").fetchall()
        steps = conn.execute("select raw_output, parse_error, action from step").fetchall()
        calls = conn.execute("select stage, prompt_tokens from llm_call").fetchall()
    assert len(episodes) == 1 and episodes[0][0] != "policy_error", episodes
    assert f'"family": "{family}"' in episodes[0][2]
    assert steps and all(raw is not None and (error or action) for raw, error, action in steps)
    # the server's own image processor read each screenshot: hundreds of visual tokens per request
    assert calls and all(stage == "policy" and tokens > 500 for stage, tokens in calls)


def test_a_round_from_the_users_checkpoint_against_the_real_server(
    server: ModelServer, tmp_path: Path
) -> None:
    """`evolve.first_policy: vlm` with the model critics, CSRS and everything else on the real server:
    the round finishes, every failure is data, and a rerun sends no request. One round sends every
    kind of request a round sends; a second round rolling out a served checkpoint is
    tests/flows/test_flywheel.py's."""
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "home": str(tmp_path / "home"),
                "apps": ["settings"],
                "llm": {
                    "base_url": server.url,
                    "model": server.model,
                    "max_retries": 0,
                    "concurrency": 2,
                    "max_tokens": 16,  # the critics' and writers' budget: garbage either way
                    "prompt_usd_per_1k": 0.001,
                    "critics": {"max_images": 1},  # the critics' episode screens go side by side
                },
                "policy": {"family": "qwen25vl", "max_tokens": 24},
                "evolve": {
                    "first_policy": "vlm",
                    "queries_per_app": 1,
                    "rollouts": 2,
                    "devices": 1,
                    "max_steps": 3,
                    "heldout_per_app": 1,
                    "heldout_rollouts": 1,
                },
                "curate": {"encoder_steps": 3},
            }
        )
    )
    done = cli(
        "evolve", "--rounds", "1", "--config", str(config), cwd=tmp_path, timeout=900, shared_prefect=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "round 1/1: policy vlm-qwen25vl@0" in done.stdout
    with sqlite3.connect(tmp_path / "home" / "trajforge.db") as conn:
        rounds = conn.execute("select number, status from round order by number").fetchall()
        paid = conn.execute("select count(*) from llm_call").fetchone()[0]
        stages = {s for (s,) in conn.execute("select distinct stage from llm_call")}
        unattributed = conn.execute("select count(*) from llm_call where round_id is null").fetchone()[0]
    assert rounds == [(1, "done")] and paid > 0 and "policy" in stages
    assert unattributed == 0  # every call is charged to its round
    report = cli("report", "--out", str(tmp_path / "report"), "--config", str(config), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    table = json.loads((tmp_path / "report" / "rounds.json").read_text())["rounds"]
    for row in table:  # tokens and cost per round and stage
        policy = row["model"]["stages"]["policy"]
        assert policy["calls"] > 0 and policy["prompt_tokens"] > 500 and policy["cost_usd"] > 0
        assert row["model"]["calls"] == sum(s["calls"] for s in row["model"]["stages"].values())
    assert sum(r["model"]["calls"] for r in table) == paid
    again = cli(
        "evolve", "--rounds", "1", "--config", str(config), cwd=tmp_path, timeout=300, shared_prefect=True
    )
    with sqlite3.connect(tmp_path / "home" / "trajforge.db") as conn:
        assert conn.execute("select count(*) from llm_call").fetchone()[0] == paid  # nothing sent again
    assert again.returncode == 0 and again.stdout.count("already done") == 1
