"""The `trajforge` console script, run as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import child_env
from trajforge.actions import CODECS, Action, get_codec
from trajforge.actions.space import coordinate_screen
from trajforge.families import FAMILY_NAMES, get_family

TRAJFORGE = shutil.which("trajforge", path=str(Path(sys.executable).parent)) or "trajforge"


def cli(
    *args: str,
    stdin: str = "",
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
    shared_prefect: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`trajforge ARGS` with a user's environment (`child_env`; `shared_prefect`: an `evolve` reports
    to this worker's Prefect server instead of starting a temporary one)."""
    full_env = child_env("TRAJFORGE_", shared_prefect=shared_prefect)
    full_env.update(env or {})
    return subprocess.run(
        [TRAJFORGE, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=timeout,
    )


SAMPLES = {
    "agentcpm": [
        '{"POINT":[500,500]}',
        '{"POINT":[500,200],"to":"up"}',
        '{"TYPE":"你好"}',
        '{"PRESS":"BACK"}',
        '{"duration":1000}',
        '{"STATUS":"finish"}',
    ],
    "qwen": [
        '<tool_call>{"name":"mobile_use","arguments":{"action":"click","coordinate":[540,1200]}}</tool_call>',
        '<tool_call>{"name":"mobile_use","arguments":{"action":"terminate","status":"success"}}</tool_call>',
    ],
    "uitars": [
        "click(start_box='(500,500)')",
        "scroll(start_box='(500,500)', direction='down')",
        "type(content='hi')",
        "finished()",
    ],
    "mobiler1": [
        '<think>t</think><action>tap</action><tool_call>{"name":"mobile_use","arguments":'
        '{"action":"click","coordinate":[540,1200]}}</tool_call>'
    ],
    "androidworld": [
        '{"action_type":"click","x":540,"y":1200}',
        '{"action_type":"navigate_home"}',
        '{"action_type":"status","goal_status":"complete"}',
    ],
}


@pytest.mark.parametrize("src", sorted(SAMPLES))
@pytest.mark.parametrize("dst", sorted(CODECS))
def test_convert_every_pair_matches_the_library(src: str, dst: str) -> None:
    lines = SAMPLES[src]
    result = cli(
        "actions",
        "convert",
        "--from",
        src,
        "--to",
        dst,
        "--screen",
        "1080x2400",
        stdin="\n".join(lines) + "\n",
    )
    out = result.stdout.splitlines()
    assert len(out) == len(lines)
    # each side in its own space for a 1080x2400 screenshot (qwen's: the smart resize, 1092x2408)
    read_in, written_in = coordinate_screen(src, 1080, 2400), coordinate_screen(dst, 1080, 2400)
    for line, got in zip(lines, out, strict=True):
        action = get_codec(src).parse(line, read_in)
        try:
            expected = get_codec(dst).format(action, written_in)
        except Exception as exc:  # unsupported in the target: reported on that line
            expected = f"error: {exc}"
        # Multi-line formats (qwen, mobiler1) come out on one line: newlines become spaces.
        assert got == expected.replace("\n", " ")
        if got != expected:  # and the one-line form still parses to the same action
            target = get_codec(dst)
            assert target.parse(got, written_in) == target.parse(expected, written_in)
    assert result.returncode == (1 if any(o.startswith("error: ") for o in out) else 0)


def test_convert_reads_each_family_in_the_space_rollout_and_export_use() -> None:
    """A tap a family's model makes on a 1080x2400 screenshot, written in that family's own space (for
    the Qwen2.5-VL based ones 1092x2408, as rollout reads it and export writes it), converts to the
    same place on the screen: before, `--screen` was taken as their space, 0.5% off."""
    tap = Action(kind="click", point=(333, 777))
    for name in FAMILY_NAMES:
        family = get_family(name)
        written = get_codec(family.action_format).format(tap, family.coordinate_screen(1080, 2400))
        line = written.replace("\n", " ")  # one output per line
        args = ("--from", family.action_format, "--to", "canonical", "--screen", "1080x2400")
        done = cli("actions", "convert", *args, stdin=line)
        assert done.returncode == 0, (name, done.stdout, done.stderr)
        x, y = json.loads(done.stdout)["point"]
        assert abs(x - 333) <= 1 and abs(y - 777) <= 1, (name, line, done.stdout)


def test_convert_malformed_lines_keep_their_place() -> None:
    stdin = '{"POINT":[10,20]}\n{"POINT":[10,\n\n{"PRESS":"VOLUME"}\n{"STATUS":"finish"}\n'
    result = cli("actions", "convert", "--from", "agentcpm", "--to", "uitars", stdin=stdin)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "Action: click(start_box='(10,20)')",
        "error: invalid_json: Expecting value at char 13",
        "error: empty_output: no action text",
        "error: unsupported_key: PRESS 'VOLUME'; known: HOME, BACK, ENTER",
        "Action: finished()",
    ]
    assert result.stderr == ""


def test_convert_refuses_a_line_over_a_mebibyte_without_reading_on(tmp_path: Path) -> None:
    """`< /dev/zero` has no line end: the command once read it until the kernel killed it."""
    with open("/dev/zero", "rb") as zero:
        done = subprocess.run(
            [TRAJFORGE, "actions", "convert", "--from", "qwen", "--to", "uitars"],
            stdin=zero, capture_output=True, text=True, env=child_env("TRAJFORGE_"), timeout=60,
        )  # fmt: skip
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == "error: stdin line 1: over 1048576 characters; give one model output per line\n"


def test_convert_to_canonical_uses_screen_for_pixels() -> None:
    result = cli(
        "actions",
        "convert",
        "--from",
        "androidworld",
        "--to",
        "canonical",
        "--screen",
        "720x1280",
        stdin='{"action_type":"click","x":719,"y":0}\n',
    )
    assert result.returncode == 0
    assert json.loads(result.stdout) == {"kind": "click", "point": [1000, 0]}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--from", "json", "--to", "qwen"],
            "error: unknown action format 'json'; known: agentcpm, qwen",
        ),
        (["--from", "qwen", "--to", "qwen", "--screen", "big"], "error: screen 'big' is not WxH"),
        (
            ["--from", "qwen", "--to", "qwen", "--screen", "99999999999x2"],
            "error: screen 99999999999x2 is over 32768 pixels on a side",
        ),
    ],
)
def test_convert_bad_arguments(args: list[str], message: str) -> None:
    result = cli("actions", "convert", *args, stdin="x\n")
    assert result.returncode == 1 and result.stderr.strip().startswith(message)
    assert result.stdout == "" and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("env", "yaml_text", "message"),
    [
        ({}, "llm:\n  temprature: 0\n", "unknown key 'llm.temprature'"),
        (
            {"TRAJFORGE_DB_URL": "postgres//nope"},
            None,
            "database URL 'postgres//nope' is malformed",
        ),
        (
            {"TRAJFORGE_DB_URL": "postgresql+psycopg://u:s3cr3t@127.0.0.1:1/x"},
            None,
            "cannot connect to database postgresql+psycopg://u:***@127.0.0.1:1/x",
        ),
        (
            {
                "TRAJFORGE_STORE_BACKEND": "s3",
                "TRAJFORGE_S3_ENDPOINT": "127.0.0.1:1",
                "TRAJFORGE_S3_TIMEOUT_S": "1",
            },
            None,
            "cannot reach S3 endpoint 127.0.0.1:1",
        ),
    ],
)
@pytest.mark.parametrize("command", ["run", "check"])
def test_bad_configuration_is_one_line_and_exit_1(
    tmp_path: Path, command: str, env: dict[str, str], yaml_text: str | None, message: str
) -> None:
    args = [command]
    if yaml_text is not None:
        (tmp_path / "run.yaml").write_text(yaml_text)
        args += ["--config", "run.yaml"]
    result = cli(*args, env=env, cwd=tmp_path)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert "s3cr3t" not in result.stderr


@pytest.mark.slow  # over 40 s of CPU on 2 cores: the fast tier stays under 15 min
def test_run_then_rerun_keeps_state_in_the_working_directory(tmp_path: Path) -> None:
    first = cli("run", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("round 1: 8 new queries, 32 episodes, ")
    shots = re.compile(r"screenshots: (\d+) stored, (\d+) already there")
    stored_first, _ = map(int, shots.search(first.stdout).groups())  # type: ignore[union-attr]
    second = cli("run", "--queries", "1", "--rollouts", "2", cwd=tmp_path)  # the next round, smaller
    assert second.stdout.startswith("round 2: 4 new queries")
    stored_second, reused = map(int, shots.search(second.stdout).groups())  # type: ignore[union-attr]
    assert (
        stored_first > stored_second and reused > 0
    )  # the launcher and app home screens are not stored again
    assert (tmp_path / ".trajforge" / "trajforge.db").is_file()
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert cli("run", "--queries", "1", "--rollouts", "1", cwd=other).stdout.startswith(
        "round 1: 4 new queries, 4 episodes"  # one query per built-in app, one rollout each
    )  # another directory, another state


def test_home_override(tmp_path: Path) -> None:
    result = cli("db", "upgrade", env={"TRAJFORGE_HOME": str(tmp_path / "h")}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"database sqlite:///{tmp_path / 'h' / 'trajforge.db'} at revision 0014"


def test_config_show_masks_secrets(tmp_path: Path) -> None:
    result = cli(
        "config",
        env={
            "TRAJFORGE_DB_URL": "postgresql://u:hunter2@h/d",
            "TRAJFORGE_LLM_API_KEY": "sk-secret",
        },
        cwd=tmp_path,
    )
    assert result.returncode == 0
    assert "db.url = postgresql://u:***@h/d" in result.stdout
    assert "hunter2" not in result.stdout and "sk-secret" not in result.stdout


def test_usage_errors_are_not_tracebacks() -> None:
    result = cli("actions", "convert", "--from", "qwen")
    assert result.returncode == 2 and "Missing option '--to'" in result.stderr
    assert "Traceback" not in result.stderr


def test_apps_validate_reports_every_problem_and_writes_nothing(tmp_path: Path) -> None:
    good = cli(
        "apps",
        "validate",
        str(Path(__file__).resolve().parents[2] / "trajforge/apps/takeout.yaml"),
        cwd=tmp_path,
    )
    assert good.returncode == 0 and good.stdout.strip().endswith("ok (takeout: 9 screens, 10 edges)")
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "name: broken\ntitle: Broken\nstart: home\nslots: {dish: []}\nscreens:\n"
        "  home: {title: Home, description: x, terminal: true, widgets: [{id: go, kind: button, goto: pay}]}\n"
    )
    result = cli("apps", "validate", str(broken), cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: app spec {broken}: slots.dish: has no values; give at least one value or remove the slot",
        f"error: app spec {broken}: screens.home.widgets.go: goto 'pay' is not a screen (screens: home); "
        "fix it or add the screen",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.yaml"]  # nothing written
    unchecked = tmp_path / "fav.yaml"
    unchecked.write_text(
        "name: fav\ntitle: Fav\nstart: home\nslots: {shop: [A, B], fav: ['no', 'yes']}\nscreens:\n"
        "  home: {title: Home, description: x, widgets: [{id: shops, kind: list, slot: shop, goto: shop}]}\n"
        "  shop: {title: Shop, description: y, terminal: true, intents: ['收藏{shop}'],\n"
        "         widgets: [{id: star, kind: toggle, slot: fav, label: 收藏}]}\n"
    )
    warned = cli("apps", "validate", str(unchecked), cwd=tmp_path)
    assert warned.returncode == 0 and warned.stdout.strip().endswith("ok (fav: 2 screens, 1 edges)")
    assert warned.stderr.startswith(
        f"warning: app spec {unchecked}: screens.shop.intents: '收藏{{shop}}' names"
    )


def test_queries_generate_stores_and_summarises(tmp_path: Path) -> None:
    result = cli("queries", "generate", "--app", "settings", "--n", "40", "--seed", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("settings: 40 queries kept of 40 requested")
    assert lines[1].startswith("dropped: ") and lines[4].startswith("coverage: ")
    again = cli("queries", "generate", "--app", "settings", "--n", "40", "--seed", "3", cwd=tmp_path)
    assert again.stdout.startswith("settings: 40 queries kept")  # 40 more, none repeated
    missing = cli("queries", "generate", "--app", "nope.yaml", cwd=tmp_path)
    assert missing.returncode == 1 and missing.stderr.startswith("error: app spec nope.yaml: file not found")
    mixed = cli("queries", "generate", "--app", "settings", "--n", "6", "--mix", "intent=1", cwd=tmp_path)
    assert mixed.returncode == 0, mixed.stderr
    assert "tiers: localization=0, functional=0, intent=6 (wanted localization=0, functional=0, intent=6" in (
        mixed.stdout
    )
    for bad, says in [("easy=1", "unknown query tier(s) easy"), ("intent=lots", "is not tier=share")]:
        refused = cli("queries", "generate", "--app", "settings", "--mix", bad, cwd=tmp_path)
        assert refused.returncode == 1 and says in refused.stderr and refused.stdout == ""


def test_rollout_survives_sigkill_and_resumes(tmp_path: Path) -> None:
    import signal
    import sqlite3
    import time

    rollout = [
        "rollout",
        "--app",
        "takeout",
        "--queries",
        "12",
        "--rollouts-per-query",
        "2",
        "--workers",
        "1",
    ]
    args = [TRAJFORGE, *rollout]
    env = child_env("TRAJFORGE_")
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    db = tmp_path / ".trajforge" / "trajforge.db"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:  # kill once some episodes are stored
        if db.exists():
            try:
                with sqlite3.connect(db) as conn:
                    if conn.execute("select count(*) from episode").fetchone()[0] >= 3:
                        break
            except sqlite3.OperationalError:
                pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    result = cli(
        *rollout,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("episodes: "))
    done, requested = map(int, re.match(r"episodes: (\d+)/(\d+)", line).groups())  # type: ignore[union-attr]
    assert done == requested == 24
    if proc.returncode == -signal.SIGKILL:
        assert "already stored)" in line and not line.endswith("(24 run now, 0 already stored)")
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*), count(distinct uid) from episode").fetchone() == (24, 24)
        assert conn.execute("select count(*) from round").fetchone() == (1,)  # the same round, resumed


def test_rollout_refuses_unbuilt_backends_and_offline_vlm(tmp_path: Path) -> None:
    android = cli("rollout", "--app", "takeout", "--backend", "android", cwd=tmp_path)
    assert android.returncode == 1 and "backend 'android' needs devices: pass --serial" in android.stderr
    other = cli("rollout", "--app", "takeout", "--backend", "ios", cwd=tmp_path)
    assert other.returncode == 1 and "unknown backend 'ios'; known: sim, web, android" in other.stderr
    vlm = cli("rollout", "--app", "takeout", "--policy", "vlm", cwd=tmp_path)
    assert vlm.returncode == 1 and "policy 'vlm' needs an endpoint; set TRAJFORGE_LLM_BASE_URL" in vlm.stderr


def test_rollout_on_android_through_the_fake_adb(tmp_path: Path) -> None:
    from tests.support.fake_adb import SERIAL, FakeAdb
    from trajforge.appspec import builtin_app_names, load_app

    fake = FakeAdb([load_app(n) for n in builtin_app_names()], tmp_path)
    try:
        result = cli(
            "rollout",
            "--app",
            "settings",
            "--queries",
            "3",
            "--backend",
            "android",
            "--serial",
            SERIAL,
            "--adb",
            str(fake.path),
            "--noise",
            "0",
            cwd=tmp_path,
        )
    finally:
        fake.close()
    assert result.returncode == 0, result.stderr
    assert "1 android devices" in result.stdout and "episodes: 3/3 accounted for" in result.stdout
    assert "success rate: 3/3 = 100%" in result.stdout
    assert any(cmd[2:4] == ["exec-out", "screencap"] for cmd in fake.commands)


@pytest.mark.slow  # over 40 s of CPU on 2 cores: the fast tier stays under 15 min
def test_critics_run_is_idempotent_and_calibrate_reports(tmp_path: Path) -> None:
    import sqlite3

    missing = cli("critics", "run", cwd=tmp_path)
    assert missing.returncode == 1 and "no round" in missing.stderr
    assert cli("run", "--queries", "3", "--rollouts", "1", cwd=tmp_path).returncode == 0  # judges once
    db = tmp_path / ".trajforge" / "trajforge.db"
    with sqlite3.connect(db) as conn:
        before = conn.execute("select count(*) from judgment").fetchone()[0]
    again = cli("critics", "run", "--round", "1", cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.startswith("round 1: judged 12 episodes")
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from judgment").fetchone()[0] == before  # nothing added
    report = cli("critics", "calibrate", cwd=tmp_path)
    assert report.returncode == 0
    lines = report.stdout.splitlines()
    assert lines[0] == "round 1 calibration" and any(line.startswith("consensus:5") for line in lines)
    assert any(line.startswith("step labels in failure episodes") for line in lines)


@pytest.mark.parametrize("src", sorted(SAMPLES))
def test_convert_a_line_that_is_not_utf8_is_one_error_in_its_place(src: str) -> None:
    good = SAMPLES[src][0].replace("\n", " ").encode()
    stdin = good + b"\n" + b"\xff\xfe" + good + b"\n" + b"\x00\n" + good + b"\n"
    env = child_env("TRAJFORGE_")
    result = subprocess.run(
        [TRAJFORGE, "actions", "convert", "--from", src, "--to", "canonical"],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
    )
    out = result.stdout.decode().splitlines()
    assert result.returncode == 1 and result.stderr == b"", result.stderr.decode()[-400:]
    assert len(out) == 4 and out[0] == out[3] and not out[0].startswith("error: ")
    assert out[1].startswith("error: ") or out[1] == out[0]  # qwen finds its call after the junk
    assert out[2].startswith("error: ")


def test_rollout_takes_a_suite_task_and_its_rerun_resumes_it(tmp_path: Path) -> None:
    """A suite task's seeds are its queries, worded by the environment: `rollout --app miniwob:…`
    once looked for a spec file of that name."""
    from rollout.web.browser import chromium_available
    from tests.conftest import service_missing

    if not chromium_available():
        service_missing("Chromium or Playwright missing (apt-get install chromium)")
    args = (
        "rollout",
        "--app",
        "miniwob:click-button",
        "--queries",
        "2",
        "--max-steps",
        "3",
        "--workers",
        "1",
    )
    done = cli(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("round 1: miniwob:click-button, policy random-explorer v0, 1 suite miniwob")
    assert "(2 run now, 0 already stored)" in done.stdout
    again = cli(*args, cwd=tmp_path)
    assert "round 1: " in again.stdout and "(0 run now, 2 already stored)" in again.stdout
    oracle = cli(*args, "--policy", "noisy-oracle", cwd=tmp_path)
    assert oracle.returncode == 1 and "the noisy oracle knows only app specs' graphs" in oracle.stderr
