"""Settings: one pydantic-settings class per area, composed into `Settings`.

The spine's areas (home, database, store, S3) live here, the model endpoints' in
`trajforge.llm_settings`, the stages' in `trajforge.stage_settings`, the policy's and the
trainer's in `trajforge.model_settings`; each section's class is importable from this module.

Environment variables use the `TRAJFORGE_` prefix (`TRAJFORGE_DB_URL`,
`TRAJFORGE_S3_ENDPOINT`, `TRAJFORGE_LLM_BASE_URL`, ...). A YAML run config may set
the same fields by section (`db:`, `store:`, `s3:`, `llm:`); a value in the file
wins over the environment, so a run is reproducible from its file. This module is
(with `trajforge.llm_settings`, `trajforge.stage_settings` and `trajforge.model_settings`) the
only place that reads the environment.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from trajforge.errors import ConfigError, yaml_problem
from trajforge.files import read_text
from trajforge.llm_settings import STAGE_GROUPS, LLMSettings
from trajforge.logs import remember_secret, remember_url_secret
from trajforge.model_settings import PolicySettings, TrainerSettings
from trajforge.stage_settings import (
    AnnotationSettings,
    CriticSettings,
    CurationSettings,
    EvolveSettings,
    ExportFormat,
    FeaturizerName,
)

__all__ = [
    "AnnotationSettings",
    "CriticSettings",
    "CurationSettings",
    "DatabaseSettings",
    "EvolveSettings",
    "ExportFormat",
    "FeaturizerName",
    "HomeSettings",
    "LLMSettings",
    "PolicySettings",
    "S3Settings",
    "Settings",
    "StoreSettings",
    "TrainerSettings",
    "known_env_names",
    "load_settings",
]

SQLITE_FILE = "trajforge.db"


class HomeSettings(BaseSettings):
    """Where the embedded default keeps its state."""

    model_config = SettingsConfigDict(env_prefix="TRAJFORGE_", extra="ignore")

    home: Path = Field(
        Path(".trajforge"),
        description="Directory for the SQLite file, local object store and caches; "
        "relative paths resolve against the working directory.",
    )


class DatabaseSettings(BaseSettings):
    """Relational database (SQLite file by default, PostgreSQL in production)."""

    model_config = SettingsConfigDict(env_prefix="TRAJFORGE_DB_", extra="forbid")

    url: SecretStr | None = Field(
        None,
        description="SQLAlchemy URL, e.g. postgresql+psycopg://user:pw@host:5432/db. "
        "Unset: a SQLite file under TRAJFORGE_HOME.",
    )
    echo: bool = Field(False, description="Log every SQL statement (passwords redacted).")
    pool_size: int = Field(5, ge=1, le=100, description="Connection pool size (PostgreSQL).")
    connect_timeout_s: int = Field(5, ge=1, le=300, description="Seconds to wait for a connection.")


class StoreSettings(BaseSettings):
    """Which object store holds screenshots, shards and manifests."""

    model_config = SettingsConfigDict(env_prefix="TRAJFORGE_STORE_", extra="forbid")

    backend: Literal["local", "s3"] = Field(
        "local", description="local: a directory under TRAJFORGE_HOME; s3: MinIO or any S3 API."
    )
    path: Path | None = Field(None, description="Directory of the local store (default HOME/objects).")


class S3Settings(BaseSettings):
    """S3 / MinIO connection, used when the store backend is `s3`."""

    model_config = SettingsConfigDict(env_prefix="TRAJFORGE_S3_", extra="forbid")

    endpoint: str = Field("127.0.0.1:9000", description="host:port of the S3 API, no scheme.")
    access_key: SecretStr = Field(SecretStr("minioadmin"), description="Access key id.")
    secret_key: SecretStr = Field(SecretStr("minioadmin"), description="Secret access key.")
    bucket: str = Field(
        "trajforge",
        min_length=3,
        max_length=63,
        pattern=r"^[a-z0-9][a-z0-9.-]+[a-z0-9]$",
        description="Bucket for all trajforge objects (created if missing).",
    )
    secure: bool = Field(False, description="Use HTTPS.")
    region: str | None = Field(None, description="Region name, if the server needs one.")
    timeout_s: float = Field(10.0, gt=0, le=600, description="Connect/read timeout per request.")

    @field_validator("endpoint")
    @classmethod
    def _no_scheme(cls, value: str) -> str:
        if "://" in value:
            raise ValueError(f"give host:port without a scheme (got {value!r}); set secure for https")
        return value


class Settings(BaseModel):
    """All settings, composed. Build with `load_settings()`."""

    home: Path
    db: DatabaseSettings
    store: StoreSettings
    s3: S3Settings
    llm: LLMSettings
    curate: CurationSettings = Field(default_factory=CurationSettings)
    critics: CriticSettings = Field(default_factory=CriticSettings)
    annotate: AnnotationSettings = Field(default_factory=AnnotationSettings)
    evolve: EvolveSettings = Field(default_factory=EvolveSettings)
    trainer: TrainerSettings = Field(default_factory=TrainerSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    # The run's apps: built-in names, spec paths (relative to the config file) and suite tasks
    # (`miniwob:click-button`, `shop.yaml:checkout`); empty: the built-ins.
    apps: list[str] = Field(default_factory=list)

    @property
    def db_url(self) -> str:
        """The database URL in clear (never log this; use `redact_url`)."""
        if self.db.url is not None:
            return self.db.url.get_secret_value()
        return f"sqlite:///{self.home / SQLITE_FILE}"

    @property
    def store_path(self) -> Path:
        return self.store.path if self.store.path is not None else self.home / "objects"

    @property
    def store_where(self) -> str:
        """The object store as a line names it: its backend, then its endpoint or folder."""
        where = self.s3.endpoint if self.store.backend == "s3" else str(self.store_path)
        return f"{self.store.backend} {where}"


_SECTIONS: dict[str, type[BaseSettings]] = {
    "db": DatabaseSettings,
    "store": StoreSettings,
    "s3": S3Settings,
    "llm": LLMSettings,
    "curate": CurationSettings,
    "critics": CriticSettings,
    "annotate": AnnotationSettings,
    "evolve": EvolveSettings,
    "trainer": TrainerSettings,
    "policy": PolicySettings,
}


def load_settings(config_file: Path | None = None) -> Settings:
    """Build settings from the environment and, optionally, a YAML run config.

    Raises:
        ConfigError: an unknown key, a value of the wrong type, or an unreadable file.
    """
    _check_env_names(os.environ)
    sections: dict[str, Any] = {}
    source = "environment"
    if config_file is not None:
        source = f"config {config_file}"
        sections = _read_yaml(config_file)
    try:
        home = HomeSettings(**({"home": sections.pop("home")} if "home" in sections else {}))
        parts = {name: cls(**sections.get(name, {})) for name, cls in _SECTIONS.items()}
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from exc
    apps = _app_refs(sections.pop("apps", []), config_file)
    root = home.home if home.home.is_absolute() else Path.cwd() / home.home
    store: StoreSettings = parts["store"]  # type: ignore[assignment]
    if store.path is not None and not store.path.is_absolute():
        parts["store"] = store.model_copy(update={"path": Path.cwd() / store.path})
    settings = Settings(home=root, apps=apps, **parts)  # every section, so none is validated and lost
    _remember_secrets(settings)
    return settings


def _remember_secrets(settings: Settings) -> None:
    """Every secret the settings hold is masked in whatever is printed or logged from now on."""
    remember_url_secret(settings.db_url)
    remember_secret(settings.s3.secret_key.get_secret_value())
    remember_secret(settings.annotate.api_key.get_secret_value() if settings.annotate.api_key else None)
    for url in (settings.annotate.url, *(settings.llm.for_group(g).base_url for g in STAGE_GROUPS)):
        remember_url_secret(str(url) if url else None)
    for group in STAGE_GROUPS:
        remember_secret(settings.llm.for_group(group).api_key.get_secret_value())


def _app_refs(value: Any, config_file: Path | None) -> list[str]:
    """`apps:` as a list of built-in names, spec paths and suite tasks (`SUITE:TASK`), paths made
    relative to the config file."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(
            f"config {config_file}: `apps` must be a list of built-in app names, spec paths and suite "
            f"tasks (SUITE:TASK), got {value!r}"
        )
    base = config_file.parent if config_file is not None else Path.cwd()
    return [_relative(ref, base) for ref in value]


def _relative(ref: str, base: Path) -> str:
    """A spec path (`apps/x.yaml`) or a web suite's task (`shop.yaml:checkout`) made relative to `base`."""
    path, sep, task = (
        ref.rpartition(":") if ":" in ref and not ref.endswith((".yaml", ".yml")) else (ref, "", "")
    )
    if path.endswith((".yaml", ".yml")) and not Path(path).is_absolute():
        return f"{base / path}{sep}{task}"
    return ref


# Reserved for the test suite and CI (e.g. TRAJFORGE_TEST_REQUIRE_SERVICES), never settings.
_TEST_PREFIX = "TRAJFORGE_TEST_"


def known_env_names() -> set[str]:
    """Every TRAJFORGE_* variable a setting reads, and those read before settings exist: the home,
    and the Python of BrowserGym's venv (rollout/suites/browsergym)."""
    names = {"TRAJFORGE_HOME", "TRAJFORGE_BROWSERGYM_PYTHON"}
    for cls in _SECTIONS.values():
        prefix = str(cls.model_config.get("env_prefix", ""))
        names.update(f"{prefix}{field}".upper() for field in cls.model_fields)
    return names


def _check_env_names(environ: Mapping[str, str]) -> None:
    """A misspelt TRAJFORGE_ variable would be silently ignored; refuse it instead."""
    known = known_env_names()
    for name in sorted(environ):
        if name.startswith("TRAJFORGE_") and not name.startswith(_TEST_PREFIX) and name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]}?" if close else "see `trajforge config` for the known settings"
            raise ConfigError(f"environment: unknown variable {name}; {hint}")


def _read_yaml(path: Path) -> dict[str, Any]:
    text = read_text(path, "config")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path}: not valid YAML at {yaml_problem(exc)}; fix the syntax") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config {path}: top level must be a mapping of sections, got {type(data).__name__}"
        )
    allowed = {"home", "apps", *_SECTIONS}
    for key, value in data.items():
        if key not in allowed:
            raise ConfigError(
                f"config {path}: unknown section {key!r}; known sections: {', '.join(sorted(allowed))}"
            )
        if key not in ("home", "apps") and not isinstance(value, dict):
            raise ConfigError(f"config {path}: section {key!r} must be a mapping, got {value!r}")
    return dict(data)


def _describe(exc: ValidationError, source: str) -> str:
    """One line naming the field, the bad value and the fix."""
    err = exc.errors()[0]
    model = exc.title
    section = next((n for n, c in _SECTIONS.items() if c.__name__ == model), "")
    field = ".".join(str(p) for p in err["loc"])
    where = f"{section}.{field}" if section else field
    prefix = _SECTIONS[section].model_config.get("env_prefix", "") if section else "TRAJFORGE_"
    env_name = f"{prefix}{field}".upper()
    if err["type"] == "extra_forbidden":
        known = ", ".join(sorted(_SECTIONS[section].model_fields)) if section else ""
        return f"{source}: unknown key {where!r}; known keys: {known}"
    value = err.get("input")
    shown = "***" if "key" in field or "url" in field else repr(value)
    return f"{source}: {where} (env {env_name}) = {shown}: {err['msg']}"
