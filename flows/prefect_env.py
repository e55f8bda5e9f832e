"""Prefect's environment for the commands that run flows, set before Prefect is first imported."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trajforge.errors import TrajforgeError
from trajforge.settings import Settings


def prefect_env(settings: Settings, verbose: bool = False) -> None:
    """Prefect's own state under the trajforge home, unless the environment says otherwise.

    Called before Prefect is imported: it reads these when it loads.
    """
    home = settings.home / "prefect"
    home.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_HOME", str(home))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO" if verbose else "WARNING")
    timeout = str(settings.evolve.prefect_start_timeout_s)
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", timeout)
    if not verbose and not os.environ.get("PREFECT_API_URL"):
        from flows.prefect_server import quiet_temporary_server

        quiet_temporary_server(home / "server.log")


def records_to_file(settings: Settings) -> Path:
    """Prefect's log records go to the home's log file (`HOME/trajforge.log`) instead of the terminal:
    a failed task's ERROR records and tracebacks, its retries and the libraries' warnings. The
    command prints one `error:` line naming the file (`trajforge.logs.log_file`). Prefect's own
    logging config with its console handler replaced by a masking file handler; called before
    Prefect is imported (it reads the config when it loads)."""
    import importlib.util

    import yaml

    from trajforge.logs import keep_info, use_log_file

    log = use_log_file(settings.home / "trajforge.log")
    spec = importlib.util.find_spec("prefect")
    assert spec is not None and spec.submodule_search_locations  # a dependency
    default = Path(next(iter(spec.submodule_search_locations))) / "logging" / "logging.yml"
    config = yaml.safe_load(default.read_text(encoding="utf-8"))
    config["handlers"]["console"] = {
        "level": 0,
        "class": "trajforge.logs.RedactingFileHandler",
        "formatter": "standard",
        "filename": str(log),
    }
    path = settings.home / "prefect" / "logging.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    os.environ["PREFECT_LOGGING_SETTINGS_PATH"] = str(path)
    keep_info(log)
    return log


def prefect_call(fn: Any, *args: Any) -> Any:
    """Call a flow; a temporary Prefect API that did not come up becomes one clear error."""
    try:
        return fn(*args)
    except RuntimeError as exc:
        if "ephemeral Prefect API server" not in str(exc):
            raise
        from flows.prefect_server import server_log

        log = server_log()
        raise TrajforgeError(
            "Prefect's temporary API server did not start within "
            f"{os.environ.get('PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS')}s"
            f"{f' (its log: {log})' if log else ''}; raise "
            "evolve.prefect_start_timeout_s (TRAJFORGE_EVOLVE_PREFECT_START_TIMEOUT_S), or set "
            "PREFECT_API_URL to a running Prefect server"
        ) from exc
