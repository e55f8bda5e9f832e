"""docker-compose.yml, checked statically: no Docker engine runs on these machines."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from trajforge.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]
SERVICES = {"postgres", "minio", "label-studio", "prefect-server", "prefect-worker"}


def _interpolate(value: Any) -> Any:
    """Compose's ${VAR:-default} with an empty environment."""
    if isinstance(value, str):
        return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    return value


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _interpolate(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def test_services_present(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == SERVICES


def test_images_pinned(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        image = svc["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest" and re.search(r"\d", tag), f"{name}: image {image} not pinned"
    assert compose["services"]["prefect-server"]["image"].endswith(":3.8.8-python3.11")
    assert compose["services"]["label-studio"]["image"].endswith(":1.23.2")
    assert compose["services"]["prefect-worker"]["build"] == "."
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install torch==2.13.0" in dockerfile
    for package in (
        "trajforge",
        "flows",
        "storage",
        "rollout",
        "critics",
        "curation",
        "querygen",
        "annotation",
    ):
        assert f"COPY {package} ./{package}" in dockerfile


def test_healthchecks_and_startup_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, svc in services.items():
        assert svc["healthcheck"]["test"], f"{name} has no healthcheck"
    worker_deps = services["prefect-worker"]["depends_on"]
    assert {k for k, v in worker_deps.items() if v["condition"] == "service_healthy"} == {
        "postgres",
        "minio",
        "label-studio",
        "prefect-server",
    }


def test_volumes_declared_and_used(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    used = set()
    for svc in compose["services"].values():
        for mount in svc.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"bind mount {source} missing"
            else:
                used.add(source)
    assert used == declared


def test_worker_env_is_valid_trajforge_config(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    services = compose["services"]
    env = services["prefect-worker"]["environment"]
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))
    settings = load_settings()  # raises on any misspelt TRAJFORGE_ variable or bad value
    assert settings.store.backend == "s3"
    pg = services["postgres"]["environment"]
    assert settings.db_url == (
        f"postgresql+psycopg://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}"
        f"@postgres:5432/{pg['POSTGRES_DB']}"
    )
    minio = services["minio"]["environment"]
    assert settings.s3.endpoint == "minio:9000"
    assert settings.s3.access_key.get_secret_value() == minio["MINIO_ROOT_USER"]
    assert settings.s3.secret_key.get_secret_value() == minio["MINIO_ROOT_PASSWORD"]
    assert env["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    label_studio = services["label-studio"]
    assert settings.annotate.url == "http://label-studio:8080"
    assert "127.0.0.1:8080:8080" in label_studio["ports"]
    assert settings.annotate.api_key is not None
    assert (
        settings.annotate.api_key.get_secret_value() == label_studio["environment"]["LABEL_STUDIO_USER_TOKEN"]
    )
    assert label_studio["environment"]["LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN"] == "true"
    init_sql = (ROOT / "deploy" / "postgres-init.sql").read_text()
    for db_url in (services["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"],):
        assert f"CREATE DATABASE {db_url.rsplit('/', 1)[1]};" in init_sql
    assert f"CREATE DATABASE {services['label-studio']['environment']['POSTGRE_NAME']};" in init_sql


def test_unknown_trajforge_env_would_be_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAJFORGE_LLM_CONCURRENCY", "lots")
    from trajforge.errors import ConfigError

    with pytest.raises(ConfigError, match="TRAJFORGE_LLM_CONCURRENCY"):
        load_settings()


def test_worker_registers_the_scheduled_deployment_on_its_own_pool(compose: dict[str, Any]) -> None:
    command = compose["services"]["prefect-worker"]["command"]
    assert command[:2] == ["sh", "-c"]
    register, start = command[2].split(" && ")
    assert register == "trajforge serve --work-pool --config /app/deploy/evolve.yaml"
    settings = load_settings(ROOT / "deploy" / "evolve.yaml")  # the file the image copies to /app/deploy
    assert settings.evolve.schedule and len(settings.evolve.schedule.split()) == 5
    assert start == f"exec prefect worker start --pool {settings.evolve.work_pool} --type process"
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in ("evolve", "deploy", "flows"):
        assert f"COPY {package} ./{package}" in dockerfile
