"""A model endpoint that cannot serve the configured model is one line before anything runs.

`check`, `rollout --policy vlm` and `evolve` probe the endpoint first: the model list where the
server answers it, else a one-token request (`transformers serve` answers /models with a 500 for a
local model path). Each failure exits 1 with one `error:` line naming the stage, the URL with its
credentials masked, and the fix; nothing is leased, no round is written.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.flows.test_cli import cli
from tests.support.scripted_llm import Reply, ScriptedLLM

ROLLOUT = ("rollout", "--app", "takeout", "--queries", "1", "--family", "uitars15", "--workers", "1")


def _env(url: str, model: str = "ui-tars", key: str = "EMPTY") -> dict[str, str]:
    return {"TRAJFORGE_LLM_BASE_URL": url, "TRAJFORGE_LLM_MODEL": model, "TRAJFORGE_LLM_API_KEY": key}


def _one_error_line(done, *words: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert all(w in lines[0] for w in words), lines[0]


def _no_round(tmp_path: Path) -> None:
    db = tmp_path / ".trajforge" / "trajforge.db"
    if db.exists():
        with sqlite3.connect(db) as conn:
            tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
            if "round" in tables:
                assert conn.execute("select count(*) from round").fetchone() == (0,)
                assert conn.execute("select count(*) from device_lease").fetchone() == (0,)


def test_a_model_the_server_does_not_list_is_one_line_everywhere(tmp_path: Path) -> None:
    with ScriptedLLM(models=["ui-tars-1.5-7b"]) as llm:
        for args in (("check",), ROLLOUT, ("evolve", "--rounds", "1")):
            done = cli(*args, env=_env(llm.url, model="ui-tars"), cwd=tmp_path)
            _one_error_line(done, "does not serve model 'ui-tars'", "ui-tars-1.5-7b", "llm.model")
        assert llm.requests == []  # nothing was sent but the probe
    _no_round(tmp_path)


def test_a_refused_key_is_one_line_with_the_key_masked(tmp_path: Path) -> None:
    with ScriptedLLM(probe=Reply(status=401)) as llm:
        url = llm.url.replace("http://", "http://user:hunter2@")
        for args in (("check",), ROLLOUT):
            done = cli(*args, env=_env(url, key="sk-wrong"), cwd=tmp_path)
            _one_error_line(done, "refused the API key (401", "llm.api_key", "user:***@")
            assert "hunter2" not in done.stderr + done.stdout and "sk-wrong" not in done.stderr
    _no_round(tmp_path)


def test_nothing_listening_is_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    for args in (("check",), ROLLOUT, ("evolve", "--rounds", "1")):
        _one_error_line(cli(*args, env=_env(url), cwd=tmp_path), "nothing answers there", "llm.base_url")
    _no_round(tmp_path)


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (404, "does not serve model 'ui-tars' (404"),
        (400, "retrying cannot help"),
        (500, "(500: scripted 500); this can be transient"),
        (503, "(503: scripted 503); this can be transient"),
    ],
)
def test_a_one_token_request_the_server_rejects_is_one_line(tmp_path: Path, status: int, says: str) -> None:
    with ScriptedLLM(probe=Reply(status=status)) as llm:  # no /models: the probe asks the model itself
        _one_error_line(cli("check", env=_env(llm.url), cwd=tmp_path), says, "llm:")


def test_a_server_without_a_model_list_is_probed_by_a_one_token_request(tmp_path: Path) -> None:
    with ScriptedLLM() as llm:  # /models answers 404, as some servers do; the ping answers
        done = cli("check", env=_env(llm.url), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "model ui-tars answered a one-token request: ok" in done.stdout
