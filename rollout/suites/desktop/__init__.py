"""Desktop suites: real Linux apps on virtual displays, with OSWorld-style task checks.

`apps: [desktop:calc-add]` runs a task of the built-in suite (`builtin.yaml` beside this file:
a text editor, a calculator and a spreadsheet, Debian's mousepad, galculator and gnumeric); a
suite file with `desktop:` at its top is a user's own (docs/environments.md):

    name: my-office
    display: [1024, 768]
    home: template/          # optional: copied into every episode's fresh home folder
    desktop:
      TASK: {instruction, params, setup, check}   # rollout/suites/desktop/tasks.py

Each device slot is one virtual display (`display.py`), its apps reset per episode (`env.py`).
"""

from __future__ import annotations

from rollout.suites.desktop.env import DesktopEnv
from rollout.suites.desktop.spec import SuiteSpec
from storage.objectstore import ObjectStore


class DesktopSuite(SuiteSpec):
    """A suite of desktop tasks: the display's size, a home template and the tasks, run on displays."""

    def check_task(self, task: str) -> None:
        self.task(task)

    def environment(self, store: ObjectStore | None) -> DesktopEnv:
        return DesktopEnv(self, store)
