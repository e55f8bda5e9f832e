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
    """Prefect's log records in this process go to the home's log file (`HOME/trajforge.log`)
    instead of the terminal: a failed task's ERROR records and tracebacks, and the libraries'
    warnings. The command prints one `error:` line naming the file (`trajforge.logs.log_file`).
    Called once Prefect is imported (it sets its logging up then): each of its console handlers
    becomes a masking file handler with the same format. The temporary API server, a process of
    its own, keeps writing to its own log (`quiet_temporary_server`)."""
    import logging

    from prefect.logging.handlers import PrefectConsoleHandler

    from trajforge.logs import RedactingFileHandler, keep_info, use_log_file

    log = use_log_file(settings.home / "trajforge.log")
    loggers = [
        logging.getLogger(),
        *(x for x in logging.Logger.manager.loggerDict.values() if isinstance(x, logging.Logger)),
    ]
    for logger in loggers:
        for handler in [h for h in logger.handlers if isinstance(h, PrefectConsoleHandler)]:
            file = RedactingFileHandler(str(log))
            file.setFormatter(handler.formatter)
            file.setLevel(handler.level)
            logger.removeHandler(handler)
            logger.addHandler(file)
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
