"""One failing model request never aborts a stage: the item is dropped or left pending with its
reason and HTTP detail, the rest completes, and a rerun retries only the failed items.

Every case runs the console script against a faulty local OpenAI-compatible server.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.critics.test_llm_critics import responder as critic_responder
from tests.flows.test_cli import cli
from tests.support.scripted_llm import Recorded, Reply, ScriptedLLM, querygen_responder
from tests.support.smoke import smoke_round
from trajforge.settings import load_settings

FAULTS = {  # what the server answers to the one request that keeps failing, and the reason kept
    "500": (Reply(status=500), "llm_error", 500),
    "429": (Reply(status=429), "llm_rate_limited", 429),
    "timeout": (Reply(delay_s=3.0), "llm_timeout", None),  # past TIMEOUT_FAULT_S
    "no_choices": (Reply(no_choices=True), "llm_error", 200),
    "not_json": (Reply(body="<html><h1>502 Bad Gateway</h1></html>"), "llm_error", 200),
}


# The scripted server answers at once, but a loaded 2-core CI machine can hold an answer past a
# short timeout: only the timeout fault's test runs with one.
TIMEOUT_S, TIMEOUT_FAULT_S = 10.0, 1.5


def llm_env(url: str, timeout_s: float = TIMEOUT_S) -> dict[str, str]:
    return {
        "TRAJFORGE_LLM_BASE_URL": url,
        "TRAJFORGE_LLM_MAX_RETRIES": "1",
        "TRAJFORGE_LLM_BACKOFF_BASE_S": "0.01",
        "TRAJFORGE_LLM_TIMEOUT_S": str(timeout_s),
    }


class OneBadRequest:
    """Answers like `good`, except the first request it sees (and its retries), answered `fault`."""

    def __init__(self, good: Callable[[Recorded], Reply], fault: Reply) -> None:
        self.good, self.fault = good, fault
        self.bad: str | None = None
        self.healthy = False

    def __call__(self, rec: Recorded) -> Reply:
        if self.bad is None:
            self.bad = rec.text
        return self.fault if rec.text == self.bad and not self.healthy else self.good(rec)


def _db(tmp_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / ".trajforge" / "trajforge.db")


@pytest.mark.parametrize("fault", list(FAULTS))
def test_queries_generate_drops_the_failing_query_and_keeps_the_rest(tmp_path: Path, fault: str) -> None:
    reply, reason, status = FAULTS[fault]
    script = OneBadRequest(querygen_responder({}), reply)
    with ScriptedLLM(responder=script) as llm:
        env = llm_env(llm.url, TIMEOUT_FAULT_S if fault == "timeout" else TIMEOUT_S)
        done = cli("queries", "generate", "--app", "takeout", "--n", "6", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("takeout: 6 queries kept") and f"{reason}=1" in done.stdout
    with _db(tmp_path) as conn:
        (detail,) = conn.execute(
            "select detail from exclusion where stage = 'querygen' and reason = ?", (reason,)
        ).fetchone()
    why = json.loads(detail)["why"]
    assert why.startswith("querygen.synthesize: ") and (
        status is None or str(status) in why or "no choices" in why
    )


def test_critics_run_writes_every_other_verdict_and_a_rerun_retries_only_the_pending(tmp_path: Path) -> None:
    smoke_round(load_settings(), queries_per_app=1, rollouts=1)
    script = OneBadRequest(critic_responder, Reply(status=503))
    with ScriptedLLM(responder=script) as llm:
        first = cli("critics", "run", env=llm_env(llm.url), cwd=tmp_path)
        paid = len(llm.requests)
        assert first.returncode == 0, first.stderr
        assert "3 episodes pending" not in first.stdout and "1 episodes pending (llm_error=1)" in first.stdout
        with _db(tmp_path) as conn:
            judged = conn.execute(
                "select count(*) from judgment where critic = 'llm_consensus_and'"
            ).fetchone()
            (detail,) = conn.execute(
                "select detail from exclusion where stage = 'critic_pending' and reason = 'llm_error'"
            ).fetchone()
        assert judged == (3,) and json.loads(detail)["status"] == 503
        script.healthy = True
        again = cli("critics", "run", env=llm_env(llm.url), cwd=tmp_path)
        retried = llm.requests[paid:]
    assert again.returncode == 0 and "pending" not in again.stdout
    assert 1 <= len(retried) < paid / 2  # only the pending episode's requests that were not answered yet
    with _db(tmp_path) as conn:
        assert conn.execute(
            "select count(*) from judgment where critic = 'llm_consensus_and'"
        ).fetchone() == (4,)
        assert conn.execute("select count(*) from exclusion where stage = 'critic_pending'").fetchone() == (
            0,
        )


TERMINATE = Reply(
    content='<tool_call>\n{"name": "mobile_use", "arguments": {"action": "terminate", "status": "success"}}\n'
    "</tool_call>"
)


def test_rollout_keeps_the_http_detail_and_a_rerun_plays_only_the_failed_episode(tmp_path: Path) -> None:
    rollout = ("rollout", "--app", "takeout", "--queries", "2", "--policy", "vlm", "--workers", "1")
    script = OneBadRequest(lambda rec: TERMINATE, Reply(status=500))
    with ScriptedLLM(responder=script) as llm:
        first = cli(*rollout, env=llm_env(llm.url), cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        with _db(tmp_path) as conn:
            reasons = conn.execute("select reason, meta from episode order by id").fetchall()
            kept = conn.execute("select detail from exclusion where reason = 'policy_error'").fetchall()
        failed = [json.loads(meta)["policy_failure"] for reason, meta in reasons if reason == "policy_error"]
        assert len(reasons) == 2 and len(failed) == 1 and len(kept) == 1
        assert failed[0]["status"] == 500 and "500" in failed[0]["error"] and failed[0]["step"] == 0
        script.healthy = True
        paid = len(llm.requests)
        again = cli(*rollout, env=llm_env(llm.url), cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert len(llm.requests) == paid + 1  # the failed episode's one request, nothing else
        third = cli(*rollout, env=llm_env(llm.url), cwd=tmp_path)
        assert len(llm.requests) == paid + 1 and "(0 run now, 2 already stored)" in third.stdout
    with _db(tmp_path) as conn:
        assert conn.execute("select count(*) from round").fetchone() == (1,)  # never a new round
        assert conn.execute("select count(*) from episode where reason = 'policy_error'").fetchone() == (0,)
        assert conn.execute("select count(*) from exclusion where reason = 'policy_error'").fetchone() == (0,)


@pytest.mark.parametrize("fault", [Reply(status=500), Reply(status=401)], ids=["500", "401"])
def test_a_rollout_whose_every_episode_the_endpoint_failed_exits_1_with_one_line(
    tmp_path: Path, fault: Reply
) -> None:
    """The probe passes (the server is up), then every chat request fails: no 0% success rate and
    exit 0, but one line with the failure; the episodes are kept and the rerun plays them again."""
    rollout = ("rollout", "--app", "takeout", "--queries", "2", "--policy", "vlm", "--workers", "1")
    with ScriptedLLM(responder=lambda rec: fault) as llm:
        failed = cli(*rollout, env=llm_env(llm.url), cwd=tmp_path)
        assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
        errors = [
            line for line in failed.stderr.splitlines() if not line[:4].isdigit()
        ]  # less the retries' log
        assert len(errors) == 1, failed.stderr
        for fragment in (
            "error: round 1: the policy's endpoint failed every episode (2 of 2; last: ",
            str(fault.status),
            "the same command plays them again",
        ):
            assert fragment in errors[0], errors[0]
        with _db(tmp_path) as conn:
            assert conn.execute("select reason, count(*) from episode group by reason").fetchall() == [
                ("policy_error", 2)
            ]
    with ScriptedLLM(responder=lambda rec: TERMINATE) as llm:
        healed = cli(*rollout, env=llm_env(llm.url), cwd=tmp_path)
    assert healed.returncode == 0, healed.stderr
    assert "(2 run now, 0 already stored)" in healed.stdout


class Outage:
    """Answers 500 to every request until `healthy`, then like `good`."""

    def __init__(self, good: Callable[[Recorded], Reply]) -> None:
        self.good, self.healthy = good, False

    def __call__(self, rec: Recorded) -> Reply:
        return self.good(rec) if self.healthy else Reply(status=500)


def _csrs_answer(rec: Recorded) -> Reply:
    """One JSON object per step, answering each `## category` the request asks."""
    asked = re.findall(r"^## (\w+)$", rec.text, re.M)
    return Reply(content=json.dumps({c: f"Written by the model: {c}." for c in asked}))


def test_critics_extract_keeps_the_template_answers_when_the_endpoint_fails_and_a_rerun_retries_them(
    tmp_path: Path,
) -> None:
    """Before: `critics extract` exited 1 on the first request that failed its retries, writing nothing."""
    smoke_round(load_settings(), queries_per_app=1, rollouts=1)
    script = Outage(_csrs_answer)
    with ScriptedLLM(responder=script) as llm:
        first = cli("critics", "extract", "--round", "1", env=llm_env(llm.url), cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        assert "model answers missing, template answers kept: llm_error=" in first.stdout
        with _db(tmp_path) as conn:
            failures = conn.execute(
                "select stage, reason, status, attempts, detail from llm_failure"
            ).fetchall()
            kept = conn.execute("select count(*) from sample where status = 'kept'").fetchone()[0]
        assert failures and kept > 0
        assert {(stage, reason, status, attempts) for stage, reason, status, attempts, _ in failures} == {
            ("csrs.step", "llm_error", 500, 2)
        }
        assert all("500" in detail for *_, detail in failures)
        script.healthy = True
        paid = len(llm.requests)
        again = cli("critics", "extract", "--round", "1", env=llm_env(llm.url), cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert len(llm.requests) - paid == len(failures)  # exactly the requests that failed, once each
        assert "template answers kept" not in again.stdout
        third = cli("critics", "extract", "--round", "1", env=llm_env(llm.url), cwd=tmp_path)
        assert len(llm.requests) - paid == len(failures) and third.returncode == 0  # nothing left to pay for
    with _db(tmp_path) as conn:
        assert conn.execute("select count(*) from llm_failure").fetchone() == (0,)
        written = conn.execute("select count(*) from sample where payload like '%Written by the model%'")
        assert written.fetchone()[0] > 0


def test_curate_with_a_failing_endpoint_finishes_and_counts_each_failure_by_reason(tmp_path: Path) -> None:
    """Before: a guidance, bottleneck or thought request that failed its retries aborted `curate`."""
    smoke_round(load_settings(), queries_per_app=1, rollouts=2)
    with ScriptedLLM(responder=Outage(_csrs_answer)) as llm:
        done = cli("curate", "--round", "1", env=llm_env(llm.url), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "llm_error=" in done.stdout and "Traceback" not in done.stderr
    with _db(tmp_path) as conn:
        stages = dict(conn.execute("select stage, count(*) from llm_failure group by stage").fetchall())
    assert stages and all(s.split(".")[0] in ("guidance", "bottleneck", "thought") for s in stages), stages


def test_a_server_error_quoting_the_api_key_leaves_it_nowhere_at_rest(tmp_path: Path) -> None:
    """A server whose 500 body quotes the request's headers (`Authorization: Bearer sk-…`): the
    failure is kept with its HTTP detail, masked, in every table, object and log of the home, and
    the command's output. Rollout keeps it in the episode and its exclusion, critics in theirs."""
    key = "sk-quoted-back-7731"
    env = llm_env("") | {"TRAJFORGE_LLM_API_KEY": key}
    fault = Reply(status=500, quote_headers=True)
    rollout = ("rollout", "--app", "takeout", "--queries", "2", "--policy", "vlm", "--workers", "1")
    with ScriptedLLM(responder=OneBadRequest(lambda rec: TERMINATE, fault)) as llm:
        played = cli(*rollout, env=env | {"TRAJFORGE_LLM_BASE_URL": llm.url}, cwd=tmp_path)
    with ScriptedLLM(responder=OneBadRequest(critic_responder, fault)) as llm:
        judged = cli("critics", "run", env=env | {"TRAJFORGE_LLM_BASE_URL": llm.url}, cwd=tmp_path)
    assert played.returncode == 0 and judged.returncode == 0, played.stderr + judged.stderr
    with _db(tmp_path) as conn:
        kept = conn.execute("select detail from exclusion where reason = 'policy_error'").fetchone()
        tables = [t for (t,) in conn.execute("select name from sqlite_master where type = 'table'")]
        stored = "\n".join(str(row) for t in tables for row in conn.execute(f'select * from "{t}"'))
    assert kept is not None and "request headers" in kept[0] and "***" in kept[0]  # masked, not dropped
    assert "request headers" in stored and key not in stored
    for path in (tmp_path / ".trajforge").rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    assert key not in played.stdout + played.stderr + judged.stdout + judged.stderr
