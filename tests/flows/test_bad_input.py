"""Bad input ends with one line and exit 1, never a traceback, and leaves nothing half-made.

Each case runs the console script as a user would (a real subprocess) on the embedded default.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evolve.ownership import check_loop_rounds, check_store
from evolve.spine import open_spine
from storage.datasets import manifest
from storage.db import create_db_engine, session_factory
from storage.objectstore import open_object_store
from tests.flows.test_cli import TRAJFORGE, cli
from tests.support.smoke import smoke_round
from trajforge.errors import StorageError
from trajforge.settings import load_settings


def one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The stderr of a refused command: exit 1, one `error:` line naming every fragment."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def published(tmp_path: Path) -> Path:
    """A judged, curated round published as v1 in ./.trajforge; the SQLite file's path."""
    smoke_round(load_settings(), queries_per_app=1, rollouts=1)
    done = cli("datasets", "publish", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path / ".trajforge" / "trajforge.db"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not a text file (byte"),
        (None, "is a directory; give the path of a .yaml file in it"),
        (  # before: PyYAML's own eight lines
            b"name: bad\nscreens:\n  - id: a\n   title: x\n",
            "not valid YAML at line 4, column 4: did not find expected '-' indicator",  # libyaml words it
        ),
    ],
    ids=["binary", "directory", "syntax"],
)
def test_a_spec_that_is_not_a_yaml_file(tmp_path: Path, content: bytes | None, expected: str) -> None:
    spec = tmp_path / "my_app.yaml"
    if content is None:
        spec.mkdir()
    else:
        spec.write_bytes(content)
    one_line_error(cli("queries", "generate", "--app", str(spec), cwd=tmp_path), f"app spec {spec}", expected)
    one_line_error(cli("rollout", "--app", str(spec), cwd=tmp_path), expected)
    validated = cli("apps", "validate", str(spec), cwd=tmp_path)
    one_line_error(validated, expected)


def test_publish_rounds_that_are_not_numbers_or_not_there(tmp_path: Path) -> None:
    one_line_error(
        cli("datasets", "publish", "--rounds", "abc", cwd=tmp_path), "--rounds 'abc': give round numbers"
    )
    one_line_error(cli("datasets", "publish", "--rounds", "1,,2", cwd=tmp_path), "e.g. --rounds 1,2,5")
    one_line_error(cli("datasets", "publish", cwd=tmp_path), "the database holds no round yet")


def test_publish_of_a_missing_round_writes_nothing(published: Path, tmp_path: Path) -> None:
    one_line_error(
        cli("datasets", "publish", "--rounds", "7", cwd=tmp_path), "no round 7 in the database (rounds: 1)"
    )
    listed = cli("datasets", "list", cwd=tmp_path).stdout.splitlines()
    assert len(listed) == 1 and listed[0].startswith("trajforge v1")  # no empty v2


def test_export_options_and_targets(published: Path, tmp_path: Path) -> None:
    export = ("datasets", "export", "1", "--format", "sft-sharegpt")
    one_line_error(
        cli(*export, "--out", str(tmp_path / "a"), "--max-side", "0", cwd=tmp_path),
        "--max-side must be a positive number of pixels, not 0",
    )
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    one_line_error(cli(*export, "--out", str(a_file), cwd=tmp_path), f"export target {a_file} is a file")
    one_line_error(
        cli(*export, "--out", str(a_file / "inside"), cwd=tmp_path),
        f"cannot write the export to {a_file / 'inside'}",
        "give a folder you can write to",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [".trajforge", "notes.txt"]  # nothing half-made
    for system in ("/", "/usr"):  # refused before anything in them is read (`/` once walked into /proc)
        one_line_error(
            cli(*export, "--out", system, cwd=tmp_path), f"export target {system} is a system folder"
        )
    many = tmp_path / "mine"
    for i in range(50):
        (many / str(i)).mkdir(parents=True)
        (many / str(i) / "notes.txt").write_text("mine")
    line = one_line_error(
        cli(*export, "--out", str(many), cwd=tmp_path), "holds files that no trajforge export"
    )
    assert line.count("notes.txt") == 3 and "and more" in line  # the walk stops at the fourth


def test_export_of_a_damaged_shard_leaves_nothing(published: Path, tmp_path: Path) -> None:
    settings = load_settings()
    store = open_object_store(settings)
    sessions = session_factory(create_db_engine(settings.db_url))
    shards = manifest(sessions, store, "trajforge", 1).shards
    victim = settings.store_path / shards[-1].key
    victim.write_bytes(victim.read_bytes()[:64])
    out = tmp_path / "exports" / "v1"
    for fmt in ("sft-sharegpt", "rl-verl", "hf"):
        one_line_error(
            cli("datasets", "export", "1", "--format", fmt, "--out", str(out), cwd=tmp_path),
            f"shard {shards[-1].key} is damaged in the object store",
            "`trajforge datasets verify`",
        )
        assert list((tmp_path / "exports").iterdir()) == []  # neither the folder nor a partial one
    verified = cli("datasets", "verify", "1", cwd=tmp_path)
    assert verified.returncode == 1 and "differs from the manifest" in verified.stdout


def test_a_damaged_sqlite_file(published: Path, tmp_path: Path) -> None:
    with sqlite3.connect(published) as conn:  # everything into the main file, then damage its middle
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    assert cli("check", cwd=tmp_path).returncode == 0
    with published.open("r+b") as f:
        f.seek(page_size * (pages // 2))
        f.write(b"\xa5" * page_size * 4)
    checked = cli("check", cwd=tmp_path)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    assert "database integrity: " in checked.stderr and "error: database sqlite:///" in checked.stderr
    assert "is damaged" in checked.stderr.splitlines()[-1]

    with published.open("r+b") as f:  # now the header: it is not a database any more
        f.write(b"this is not a database header")
    for args in (("check",), ("datasets", "list"), ("critics", "run")):
        one_line_error(
            cli(*args, cwd=tmp_path), "is damaged or not a SQLite database (file is not a database)"
        )


BAD_DB_URLS = {
    "garbage": ("garbage", "database URL 'garbage' is malformed"),
    "unsupported": ("mysql://x@h/db", "'mysql' is not supported"),
    "bad_port": (
        "postgresql://u:hunter2@127.0.0.1:abc/db",
        "postgresql://u:***@127.0.0.1:abc/db' is malformed",
    ),
    "refused": (
        "postgresql+psycopg://u:hunter2@127.0.0.1:1/db",
        "cannot connect to database postgresql+psycopg://u:***@",
    ),
    "scheme_typo": (
        "postgresql+psycopg//u:hunter2@127.0.0.1/db",
        "postgresql+psycopg//u:***@127.0.0.1/db' is",
    ),
    "unencoded_at": (
        "postgresql+psycopg://u:hunt@er2@127.0.0.1/db",
        "holds an unencoded '@'; write it as %40",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_DB_URLS))
def test_evolve_with_a_database_it_cannot_use_is_one_line(tmp_path: Path, case: str) -> None:
    url, expected = BAD_DB_URLS[case]
    done = cli("evolve", "--rounds", "1", env={"TRAJFORGE_DB_URL": url}, cwd=tmp_path)
    line = one_line_error(done, expected)
    assert "hunter2" not in line and "er2" not in line and done.stdout == ""  # no round line, no password


def test_evolve_with_an_unreachable_object_store_is_one_line(tmp_path: Path) -> None:
    env = {"TRAJFORGE_STORE_BACKEND": "s3", "TRAJFORGE_S3_ENDPOINT": "127.0.0.1:1"}
    done = cli("evolve", "--rounds", "1", env=env, cwd=tmp_path)
    one_line_error(done, "cannot reach S3 endpoint 127.0.0.1:1")
    assert "already done" not in done.stdout and "round 1/1" not in done.stdout


@pytest.mark.parametrize("case", ["garbage", "unsupported", "bad_port", "scheme_typo", "unencoded_at"])
def test_config_with_a_database_url_it_cannot_use_exits_1(tmp_path: Path, case: str) -> None:
    url, expected = BAD_DB_URLS[case]
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"db:\n  url: '{url}'\n")
    done = cli("config", "--config", str(cfg), cwd=tmp_path)
    one_line_error(done, expected)
    assert "db.url = " in done.stdout and "hunter2" not in done.stdout + done.stderr


@pytest.mark.parametrize("name", ["/tmp/elsewhere", "../up", "a/b", ".hidden"])
def test_a_dataset_name_that_is_not_a_plain_name_is_refused_before_anything_is_written(
    tmp_path: Path, name: str
) -> None:
    """Before: an absolute name wrote the training export outside the home; `../` left a draft."""
    done = cli("evolve", "--rounds", "1", env={"TRAJFORGE_EVOLVE_DATASET": name}, cwd=tmp_path)
    one_line_error(done, "is not a plain name")
    assert not (tmp_path / ".trajforge").exists() and done.stdout == ""


def test_publish_refuses_a_dataset_name_that_is_a_path(published: Path, tmp_path: Path) -> None:
    one_line_error(
        cli("datasets", "publish", "--dataset", "../x", cwd=tmp_path), "'../x' is not a plain name"
    )
    with sqlite3.connect(published) as conn:
        assert conn.execute("select count(*) from dataset_version").fetchone() == (1,)  # v1 only, no draft


def test_evolve_does_not_take_a_rollout_round_as_its_own_and_says_how_to_roll_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for app in ("takeout", "takeout", "settings"):  # a rerun adds nothing; another app, a round of its own
        done = cli("rollout", "--app", app, "--queries", "1", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    refused = cli("evolve", "--rounds", "1", cwd=tmp_path)
    line = one_line_error(refused, "round 1 was made by trajforge rollout --app takeout, not by the loop")
    assert "already done" not in refused.stdout and "`trajforge rounds drop 1 --yes`" in line
    db = tmp_path / ".trajforge" / "trajforge.db"
    with sqlite3.connect(db) as conn:
        episodes = conn.execute("select count(*) from episode").fetchone()[0]
        assert episodes > 0 and conn.execute("select count(*) from step").fetchone()[0] > 0
    one_line_error(cli("rounds", "drop", "1", cwd=tmp_path), "pass --yes")
    one_line_error(cli("rounds", "drop", "7", "--yes", cwd=tmp_path), "no round 7 in the database")
    dropped = cli("rounds", "drop", "1", "--yes", cwd=tmp_path)
    assert dropped.returncode == 0, dropped.stderr
    assert dropped.stdout.startswith(f"dropped rounds 1, 2: {episodes} episodes, ")
    with sqlite3.connect(db) as conn:  # nothing of the round is left: the loop's preflight passes
        for table in ("round", "episode", "step", "judgment", "exclusion", "llm_call"):
            assert conn.execute(f"select count(*) from {table}").fetchone() == (0,), table
    monkeypatch.setenv("TRAJFORGE_HOME", str(tmp_path / ".trajforge"))
    check_loop_rounds(load_settings())


def _two_counter_suites(tmp_path: Path) -> list[str]:
    """Two web-suite files, both `name: counter`: their tasks would share one page per device."""
    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "webapp"
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        for name in ("suite.yaml", "counter.html"):
            (tmp_path / folder / name).write_bytes((example / name).read_bytes())
    return [f"{tmp_path / 'one' / 'suite.yaml'}:count-up", f"{tmp_path / 'two' / 'suite.yaml'}:count-down"]


APP_PROBLEMS = {  # apps: entries -> what the one line names
    "misspelt_task": (["takeout", "miniwob:click-chekboxes"], "did you mean click-checkboxes"),
    "path_like_task": (["miniwob:../../etc/passwd"], "MiniWoB++ has no task '../../etc/passwd'"),
    "missing_spec": (["takeout", "./missing.yaml"], "missing.yaml: file not found"),
    "same_suite_name": (None, "are both suite 'counter'; give one of them another `name:`"),
}


@pytest.mark.parametrize("case", sorted(APP_PROBLEMS))
def test_apps_are_checked_before_the_first_round(tmp_path: Path, case: str) -> None:
    """Before: each of these printed 165-183 lines of Prefect retry tracebacks and left round 1 running."""
    refs, expected = APP_PROBLEMS[case]
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"apps": refs or _two_counter_suites(tmp_path)}))
    done = cli("evolve", "--rounds", "1", "--config", str(cfg), cwd=tmp_path)
    one_line_error(done, expected)
    assert "round 1" not in done.stdout
    assert not (tmp_path / ".trajforge").exists()  # refused before the home was made


def test_a_suite_hook_that_throws_is_one_configuration_error_before_the_first_round(tmp_path: Path) -> None:
    """Before: the page's exception was a crashed device, retried on new pages, then Prefect's
    task retries, with their tracebacks."""
    from rollout.web.browser import chromium_available

    if not chromium_available():
        pytest.skip("Chromium or Playwright missing (apt-get install chromium)")
    refs = _two_counter_suites(tmp_path)
    suite = tmp_path / "one" / "suite.yaml"
    suite.write_text(suite.read_text().replace("app.reset(task, seed)", "app.restart(task, seed)"))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"apps": refs[:1]}))
    done = cli("evolve", "--rounds", "1", "--config", str(cfg), cwd=tmp_path)
    one_line_error(done, "web suite 'counter': its reset hook threw TypeError: app.restart is not a function")
    with sqlite3.connect(tmp_path / ".trajforge" / "trajforge.db") as conn:
        assert conn.execute("select count(*) from round").fetchone() == (0,)


def test_an_error_inside_a_round_is_one_line_naming_the_log_with_the_traceback(tmp_path: Path) -> None:
    """A trainer that fails after the round's rollout, judging and publishing: before, Prefect's ERROR
    records and their tracebacks (47 lines) came before the one line."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "apps": ["settings"],
                "evolve": {
                    "queries_per_app": 1,
                    "rollouts": 2,
                    "devices": 1,
                    "max_steps": 4,
                    "heldout_per_app": 0,
                },
                "curate": {"encoder_steps": 1},
                "trainer": {"command": "sh -c 'echo boom >&2; exit 3'", "endpoint": "http://127.0.0.1:9/v1"},
            }
        )
    )
    done = cli("evolve", "--rounds", "1", "--config", str(cfg), cwd=tmp_path)
    log = tmp_path / ".trajforge" / "trajforge.log"
    one_line_error(done, "error: trainer command exited 3: boom", f"(details: {log})")
    assert "Traceback" in log.read_text() and "trainer command exited 3" in log.read_text()


RSS_OF = (  # the command's peak resident memory in KiB, printed after its own output
    "import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(done.returncode)"
)


@pytest.mark.parametrize("given", ["/dev/zero", "folder", "binary"])
@pytest.mark.parametrize("as_", ["config", "app spec"])
def test_a_device_a_folder_or_a_binary_file_is_one_line_in_bounded_memory(
    tmp_path: Path, given: str, as_: str
) -> None:
    """Before: `/dev/zero` as a config or spec grew to 14 and 19 GB; a folder or a binary config was
    a 50-line traceback."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "binary").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    path = given if given.startswith("/") else str(tmp_path / given)
    args = ["evolve", "--config", path] if as_ == "config" else ["apps", "validate", path]
    done = subprocess.run(
        [sys.executable, "-c", RSS_OF, TRAJFORGE, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    *lines, peak_kib = done.stderr.strip().splitlines()
    expected = {"/dev/zero": "over the 8 MiB", "folder": "is a directory", "binary": "not a text file (byte"}
    one_line_error(
        subprocess.CompletedProcess(args, done.returncode, "", "\n".join(lines)), f"{as_} ", expected[given]
    )
    assert int(peak_kib) < 200 * 1024, peak_kib
    assert not (tmp_path / ".trajforge").exists()  # nothing written


def test_a_screenshot_lost_from_the_middle_of_the_store_is_found_by_check(published: Path) -> None:
    """`evolve` once checked the first and last screenshots only: with a middle one deleted, the next
    round was rolled out and curated before publish failed (87 lines). `check` said `ok`."""
    home = published.parent
    assert cli("check", cwd=home.parent).returncode == 0
    with sqlite3.connect(published) as conn:
        shas = [sha for (sha,) in conn.execute("select distinct screenshot from step order by id")]
    middle = shas[len(shas) // 2]
    blob = next((home / "objects").rglob(f"{middle}.png"))
    blob.unlink()
    done = cli("check", cwd=home.parent)
    one_line_error(done, "the object store has lost data the database expects", f"{middle}.png")
    spine = open_spine(load_settings())
    with pytest.raises(StorageError, match=middle):
        check_store(spine.sessions, spine.store)


def test_check_and_config_read_a_new_home_without_making_it(tmp_path: Path) -> None:
    """Both once made `.trajforge` and an empty database: a typo'd TRAJFORGE_HOME then looked real."""
    checked = cli("check", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "trajforge.db: not made yet (the first round makes it): ok" in checked.stdout
    assert "fonts: CJK" in checked.stdout  # the rest is still checked
    assert cli("config", cwd=tmp_path).returncode == 0
    assert list(tmp_path.iterdir()) == []


DESKTOP_SUITE = """\
name: office
desktop:
  note:
    instruction: "Write {word} in notes.txt"
    params: {word: [alpha, beta]}
    setup: [{write: {path: notes.txt, text: ""}}, {launch: [mousepad, notes.txt]}]
    check: [{get: {file: notes.txt}, contains: "{word}"}]
"""


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            'contains: "{word}"',
            'contains: "{wrd}"',
            "desktop.note: check 1: '{wrd}' names 'wrd', which is not",
        ),
        (
            "get: {file: notes.txt}",
            "get: {file: ../../etc/passwd}",
            "check 1: path '../../etc/passwd' leaves",
        ),
        (
            "{write: {path: notes.txt",
            "{write: {path: /tmp/x",
            "setup step 1: path '/tmp/x' leaves the episode's",
        ),
    ],
)
def test_check_refuses_a_desktop_suite_that_would_fail_only_when_it_runs(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    """Before: `trajforge check` said rc 0, and `evolve` ran 40 s into 137 lines of tracebacks."""
    (tmp_path / "office.yaml").write_text(DESKTOP_SUITE.replace(old, new))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"apps": ["office.yaml:note"]}))
    one_line_error(cli("check", "--config", str(cfg), cwd=tmp_path), "desktop suite ", expected, "fix it")
    one_line_error(cli("evolve", "--config", str(cfg), cwd=tmp_path), expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["office.yaml", "run.yaml"]  # nothing written
