"""Settings: env + YAML, validation messages, secrets and redaction."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import get_args

import pytest
import yaml

from publish.exports import FORMATS
from trajforge.actions import CODECS
from trajforge.errors import ConfigError
from trajforge.logs import RedactingFilter, redact, redact_url
from trajforge.settings import ExportFormat, load_settings


def test_embedded_default_lives_under_the_working_directory(tmp_path: Path) -> None:
    settings = load_settings()
    assert settings.home == tmp_path / ".trajforge"
    assert settings.db_url == f"sqlite:///{tmp_path / '.trajforge' / 'trajforge.db'}"
    assert settings.store_path == tmp_path / ".trajforge" / "objects"
    assert settings.store.backend == "local" and settings.llm.offline


def test_home_override_and_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJFORGE_HOME", "state")
    monkeypatch.setenv("TRAJFORGE_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TRAJFORGE_LLM_CONCURRENCY", "7")
    monkeypatch.setenv("TRAJFORGE_S3_SECRET_KEY", "s3cr3t")
    settings = load_settings()
    assert settings.home == tmp_path / "state"
    assert settings.llm.concurrency == 7 and not settings.llm.offline
    assert "s3cr3t" not in repr(settings) and settings.s3.secret_key.get_secret_value() == "s3cr3t"


def test_yaml_overrides_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJFORGE_LLM_MODEL", "from-env")
    monkeypatch.setenv("TRAJFORGE_LLM_CONCURRENCY", "3")
    cfg = tmp_path / "run.yaml"
    cfg.write_text("home: /tmp/tf-home\nllm:\n  model: from-yaml\nstore:\n  backend: s3\n")
    settings = load_settings(cfg)
    assert settings.llm.model == "from-yaml" and settings.llm.concurrency == 3
    assert settings.home == Path("/tmp/tf-home") and settings.store.backend == "s3"


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("llm:\n  modle: x\n", "unknown key 'llm.modle'; known keys: api_key, backoff_base_s"),
        (
            "databse:\n  url: x\n",
            "unknown section 'databse'; known sections: annotate, apps, critics, curate, db, evolve, home, llm, policy, s3, store, trainer",
        ),
        (
            "llm:\n  concurrency: 0\n",
            "llm.concurrency (env TRAJFORGE_LLM_CONCURRENCY) = 0: Input should be greater",
        ),
        (
            "store:\n  backend: gcs\n",
            "store.backend (env TRAJFORGE_STORE_BACKEND) = 'gcs': Input should be 'local' or 's3'",
        ),
        (
            "trainer:\n  action_format: gpt\n",
            "trainer.action_format (env TRAJFORGE_TRAINER_ACTION_FORMAT) = 'gpt': Value error, unknown "
            "action format 'gpt'; known: agentcpm, qwen, guiowl, uitars, uitars15, mobiler1, androidworld, computer_use, uitars15-computer, pyautogui, canonical",
        ),
        ("s3:\n  endpoint: http://minio:9000\n", "give host:port without a scheme"),
        ("s3:\n  bucket: A\n", "s3.bucket"),
        ("llm: 3\n", "section 'llm' must be a mapping"),
        ("- a\n", "top level must be a mapping"),
        ("llm: [\n", "not valid YAML"),
    ],
)
def test_bad_config_names_the_field_and_fix(tmp_path: Path, yaml_text: str, message: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml_text)
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    assert message in str(info.value)
    assert str(info.value).startswith(f"config {cfg}")


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_settings(tmp_path / "absent.yaml")


def test_bad_env_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJFORGE_LLM_MAX_RETRIES", "many")
    with pytest.raises(ConfigError, match=r"environment: llm.max_retries \(env TRAJFORGE_LLM_MAX_RETRIES\)"):
        load_settings()


def test_secret_values_not_echoed_in_errors(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("db:\n  url: 12\n")
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    assert "= ***" in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql+psycopg://bob:pw@db:5432/x", "postgresql+psycopg://bob:***@db:5432/x"),
        ("connect to redis://:topsecret@host/0 failed", "connect to redis://:***@host/0 failed"),
        ("headers={'Authorization': 'Bearer sk-abc123'}", "headers={'Authorization': '***'}"),
        ("Bearer sk-abc123 sent", "Bearer *** sent"),
        ("api_key=sk-live-1 ok", "api_key=*** ok"),
        ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
        ("postgresql://u@h/db?password=hunter2", "postgresql://u@h/db?password=***"),
        (
            "postgresql://u@h/db?sslmode=require&PASSWORD=x&a=1",
            "postgresql://u@h/db?sslmode=require&PASSWORD=***&a=1",
        ),
        ("postgresql://u:p@ss@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u:p%40ss@h/db", "postgresql://u:***@h/db"),
        ("cannot reach postgresql://u:pw@h/db: refused", "cannot reach postgresql://u:***@h/db: refused"),
        ("postgresql+psycopg//u:SECRET@127.0.0.1/db", "postgresql+psycopg//u:***@127.0.0.1/db"),  # typo
        ("https:/me:pw@h/x", "https:/me:***@h/x"),
        ("Authorization: Token X1234", "Authorization: ***"),
        ("authorization=Basic dXNlcjpwdw==", "authorization=***"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "unit",
    ["a", "a:", "a:@", "a:a@", "x://a:b", "ab1", "Bearer ", "authorization:"],
)
def test_redact_is_linear_on_a_megabyte_without_spaces(unit: str) -> None:
    """A server's error body can be megabytes of one token: masking it reads the text once (the
    backtracking URL pattern took 6.6 s on 32k characters, so hours on this). The bound is loose on
    purpose; `bench` is where time is measured."""
    import time

    text = unit * (1_000_000 // len(unit)) + "/https://u:sk-tail-9@h/x"
    started = time.perf_counter()
    masked = redact(text)
    assert time.perf_counter() - started < 5
    assert "sk-tail-9" not in masked and "***" in masked[-30:]


def test_every_secret_the_settings_hold_is_masked_wherever_it_appears(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A library's error text quotes a key or a password without any pattern around it."""
    monkeypatch.setenv("TRAJFORGE_LLM_API_KEY", "sk-only-here-41")
    monkeypatch.setenv("TRAJFORGE_ANNOTATE_URL", "http://ann:ls-pass-42@127.0.0.1:9")
    monkeypatch.setenv("TRAJFORGE_DB_URL", "postgresql+psycopg://u:p%40ss-43@127.0.0.1/db")
    load_settings()
    said = "401: key sk-only-here-41 refused; login ls-pass-42 failed; password p@ss-43 rejected"
    assert redact(said) == "401: key *** refused; login *** failed; password *** rejected"


def test_redact_url_and_log_filter(caplog: pytest.LogCaptureFixture) -> None:
    assert redact_url("postgresql://u:p@h/d") == "postgresql://u:***@h/d"
    assert redact_url("postgresql://u:p@h:abc/d?password=q") == "postgresql://u:***@h:abc/d?password=***"
    logger = logging.getLogger("trajforge.test_redaction")
    logger.addFilter(RedactingFilter())
    with caplog.at_level(logging.INFO, logger="trajforge.test_redaction"):
        logger.info("using %s", "postgresql://u:hunter2@h/d")
    assert "hunter2" not in caplog.text and "postgresql://u:***@h/d" in caplog.text


def test_misspelt_env_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJFORGE_LLM_MODLE", "x")
    with pytest.raises(
        ConfigError, match="unknown variable TRAJFORGE_LLM_MODLE; did you mean TRAJFORGE_LLM_MODEL"
    ):
        load_settings()
    monkeypatch.delenv("TRAJFORGE_LLM_MODLE")
    monkeypatch.setenv("TRAJFORGE_TEST_ANYTHING", "1")  # reserved for tests and CI
    load_settings()


def test_apps_are_built_in_names_or_spec_paths_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "cfg").mkdir()
    config = tmp_path / "cfg" / "run.yaml"
    config.write_text("apps: [mine.yaml, settings, /abs/other.yml]\n")
    assert load_settings(config).apps == [str(tmp_path / "cfg" / "mine.yaml"), "settings", "/abs/other.yml"]
    assert load_settings().apps == []  # the built-ins
    config.write_text("apps: settings\n")
    with pytest.raises(
        ConfigError, match="`apps` must be a list of built-in app names, spec paths and suite"
    ):
        load_settings(config)


def test_every_codec_and_export_format_is_accepted_by_the_trainer_settings(tmp_path: Path) -> None:
    assert get_args(ExportFormat) == FORMATS  # one list
    cfg = tmp_path / "c.yaml"
    for codec in CODECS:  # androidworld and uitars15 included
        cfg.write_text(f"trainer:\n  action_format: {codec}\n  format: rl-verl\n")
        assert load_settings(cfg).trainer.action_format == codec


def test_every_section_of_a_run_config_reaches_the_settings(tmp_path: Path) -> None:
    """Each section is validated and then kept: `critics:` used to load as the defaults."""
    from trajforge.settings import _SECTIONS

    values = {
        "db": ("echo", True),
        "store": ("backend", "s3"),
        "s3": ("endpoint", "minio.example:9000"),
        "llm": ("model", "qwen2.5-vl-7b"),
        "curate": ("featurizer", "phash"),
        "critics": ("outcome", "critic"),
        "annotate": ("project_by", "purpose"),
        "evolve": ("rounds", 2),
        "trainer": ("action_format", "uitars"),
        "policy": ("temperature", 1.2),
    }
    assert set(values) == set(_SECTIONS)  # a new section gets a line here
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({name: {key: value} for name, (key, value) in values.items()}))
    settings = load_settings(cfg)
    for name, (key, value) in values.items():
        assert getattr(getattr(settings, name), key) == value, name
    cfg.write_text("critics:\n  outcome: critic\n  tau_c: 0.9\n")
    critics = load_settings(cfg).critics
    assert (critics.outcome, critics.tau_c) == ("critic", 0.9)


def test_a_trainer_command_without_an_endpoint_is_refused_when_the_config_loads(tmp_path: Path) -> None:
    """Once found by the train stage, after a whole round's rollout, judging and publishing."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"trainer": {"command": "llamafactory-cli train sft.yaml"}}))
    with pytest.raises(ConfigError, match=r"trainer\.command is set but trainer\.endpoint is not"):
        load_settings(cfg)
