"""BrowserGym as a built-in suite: `apps: [browsergym:miniwob.click-test]` runs any registered
BrowserGym task by its id, with BrowserGym's own reset, observation and `validate` reward.

BrowserGym pins Playwright 1.44 and lxml < 6, which would move the project's own, so it is
installed in a virtualenv of its own (`make browsergym`: `browsergym-core` and `browsergym-miniwob`)
and run behind a small process boundary: each device slot starts `serve.py` under that venv's
Python and speaks one JSON line per request over its pipes (`pipe.py`). A slot is a process of its
own, so slots run in parallel, and BrowserGym's one process-wide Playwright stays on one thread.

Which venv: `TRAJFORGE_BROWSERGYM_PYTHON`, else `~/.cache/trajforge/browsergym-0.14.3/bin/python`
(where `make browsergym` installs it). MiniWoB's pages come from the `miniwob` package of the
project's venv (the same pages the built-in `miniwob` suite drives) unless `MINIWOB_URL` is set. The
browser is Debian's Chromium, for BrowserGym's chat window too (`serve.py`, `link_chromium`).
Another benchmark's package (`browsergym-webarena`, ...) installed into that venv registers its
tasks there; docs/environments.md says how to point WebArena at a user's own servers.
"""

from __future__ import annotations

import difflib
import os
from functools import cached_property
from pathlib import Path

from rollout.suites.browsergym.env import BrowserGymEnv
from rollout.suites.browsergym.pipe import Pipe
from storage.objectstore import ObjectStore
from trajforge.errors import ConfigError

PYTHON_ENV = "TRAJFORGE_BROWSERGYM_PYTHON"
VENV = Path.home() / ".cache" / "trajforge" / "browsergym-0.14.3"
INSTALL = "make browsergym (BrowserGym in a venv of its own), or set TRAJFORGE_BROWSERGYM_PYTHON"


def browsergym_python() -> Path:
    """The Python of BrowserGym's venv (see the module's docstring)."""
    return Path(os.environ.get(PYTHON_ENV) or VENV / "bin" / "python")


def missing() -> list[str]:
    """What this machine lacks to run the suite, each with its fix."""
    python = browsergym_python()
    return [] if python.is_file() else [f"BrowserGym's venv ({python}): {INSTALL}"]


class BrowserGymSuite:
    name = "browsergym"
    device = "web"

    def python(self) -> Path:
        python = browsergym_python()
        if not python.is_file():
            raise ConfigError(f"apps: the browsergym suite needs {python}, which is missing; run {INSTALL}")
        return python

    @cached_property
    def tasks(self) -> list[str]:
        """Every task id BrowserGym registers in its venv (`miniwob.click-test`, ...)."""
        pipe = Pipe(self.python())
        try:
            return [str(t) for t in pipe.ask({"op": "tasks"})["tasks"]]
        finally:
            pipe.close()

    def check_task(self, task: str) -> None:
        if task not in self.tasks:
            close = difflib.get_close_matches(task, self.tasks, n=3)
            hint = (
                f"did you mean {', '.join(close)}?" if close else "install the benchmark's browsergym package"
            )
            raise ConfigError(f"apps: BrowserGym has no task {task!r} ({len(self.tasks)} registered); {hint}")

    def environment(self, store: ObjectStore | None) -> BrowserGymEnv:
        return BrowserGymEnv(self.python(), store)
