"""Where a figure may be reported: the tuning half and the reporting half of the environments.

A figure counts only on tasks that no feature, threshold or rule was chosen on. So the
environments are split once:

- MiniWoB++'s tasks by the first byte of the SHA-256 of the task's name: even is the tuning
  half, odd the reporting half. Features, thresholds and knn rules are chosen on the
  tuning half only.
- A task the project has looked at (`LOOKED_AT`: named by its tests, docs, examples or
  benchmarks, or measured while building a feature) is tuning, whichever half its hash
  falls in. `tests/test_halves.py` fails when a new one is named without being added here.
- Apps: the built-in apps are tuning. A user's app (a spec or suite file) is reporting
  unless it is one of the project's own examples (`docs/examples/`), which were looked at.

`python -m bench.halves` prints both halves, and with `--config N` an evolve config over the
first N reporting tasks (in hash order), for `bench.bench_critics` to measure.
"""

from __future__ import annotations

import argparse
import hashlib
import re
from functools import cache
from pathlib import Path

from rollout.suites.miniwob import MiniWobSuite
from trajforge.appspec import builtin_app_names

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"

# MiniWoB++ tasks the project has looked at: they are in-sample wherever their hash falls
LOOKED_AT = frozenset(
    {
        "choose-list",  # the select behaviour of web suites was measured on it
        "click-button",
        "click-checkboxes",
        "click-dialog",
        "click-link",
        "click-option",
        "click-tab",
        "click-test",
        "click-test-2",
        "enter-text",
        "focus-text",
        "login-user",
        "use-spinner",
        # the learned critic measured on them (docs/critics.md, 2026-11-28): tuning from then on
        "click-collapsible",
        "click-shape",
        "click-tab-2",
        "click-widget",
        "email-inbox-delete",
        "number-checkboxes",
        # the learned critic's prior (bench/critic_prior.yaml), all of the tuning half by their hash
        "click-button-sequence",
        "click-collapsible-2",
        "click-color",
        "click-dialog-2",
        "click-menu",
        "click-pie-nodelay",
        "click-scroll-list",
        "email-inbox",
        "enter-password",
        "enter-time",
        "find-word",
        "focus-text-2",
        "grid-coordinate",
        "guess-number",
        "multi-orderings",
        "odd-or-even",
        "read-table",
        "sign-agreement",
        "simple-arithmetic",
        "text-transform",
        "unicode-test",
    }
)
TUNING, REPORTING = "tuning", "reporting"


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = ""


def task_half(task: str) -> str:
    """The half a MiniWoB++ task's name hashes to (regardless of whether anyone looked at it)."""
    return TUNING if hashlib.sha256(task.encode()).digest()[0] % 2 == 0 else REPORTING


def app_half(app: str) -> str:
    """The half an app's figures belong to: "reporting" only where nothing was chosen on it."""
    suite, _, task = app.partition(":")
    if suite == "miniwob":
        return TUNING if task in LOOKED_AT else task_half(task)
    return TUNING if app in builtin_app_names() or suite in example_names() else REPORTING


@cache
def example_names() -> frozenset[str]:
    """The apps and web suites of the project's own examples (`name:` in docs/examples/), read once."""
    found = (re.search(r"^name:\s*(\S+)", p.read_text(), re.M) for p in EXAMPLES.rglob("*.yaml"))
    return frozenset(m.group(1) for m in found if m)


def reporting_tasks() -> list[str]:
    """MiniWoB++'s reporting half, in hash order (a fixed, arbitrary order: no choosing)."""
    tasks = [t for t in MiniWobSuite().tasks if task_half(t) == REPORTING and t not in LOOKED_AT]
    return sorted(tasks, key=lambda t: hashlib.sha256(t.encode()).hexdigest())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=int, default=0, help="print an evolve config over N reporting tasks")
    args = parser.parse_args()
    if args.config:
        apps = ", ".join(f"miniwob:{t}" for t in reporting_tasks()[: args.config])
        print(f"# {args.config} MiniWoB++ tasks of the reporting half (python -m bench.halves)")
        print(f"home: .trajforge-reporting\napps: [{apps}]")
        print("evolve:\n  rounds: 3\n  queries_per_app: 6\n  rollouts: 4\n  devices: 4\n  heldout_per_app: 8")
        return
    tasks = MiniWobSuite().tasks
    tuning = [t for t in tasks if task_half(t) == TUNING or t in LOOKED_AT]
    print(f"tuning half ({len(tuning)}): {' '.join(tuning)}")
    print(f"reporting half ({len(reporting_tasks())}): {' '.join(reporting_tasks())}")


if __name__ == "__main__":
    main()
