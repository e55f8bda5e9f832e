"""Desktop rollout speed: reset time, step time and steps/s at 1, 2 and 4 virtual displays, the engine's
share of a step, and the same loop driven by bare xdotool calls as the baseline.

The engine runs are the production runner (device pool, episode records in SQLite, screenshots in the
local object store) rolling the random explorer out on seeds of three built-in desktop tasks, one
display per worker. Each environment call is timed (`Timed`): `reset` (a fresh home, the app launched
and its window up), `step` (xdotool, the wait for the frame to settle, the screenshot and the element
tree); the rest of a step's wall time is the engine's (policy, records, hashing, storing, the pool).

The baseline is the bare loop a harness without trajforge would run on one display: launch the app,
wait for its window, then per step one `xdotool mousemove x y click 1` and one screenshot, with no
settle wait, no element tree and no records. Usage: python -m bench.bench_desktop [--seeds 4]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.bench_miniwob import Timed, run
from bench.common import table, worker_counts
from rollout.suites.desktop import DesktopSuite
from rollout.suites.desktop.display import Display, kill_group
from trajforge.domain import Observation, Query

TASKS = ["calc-enter-digit", "calc-add", "editor-write-word"]
MAX_STEPS = 8


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--seeds 1 --workers 1"


class ResetTimed(Timed):
    """`Timed`, with each reset's own time kept apart (a fresh home, the app up, the first frame)."""

    def __init__(self, env: Any, clock: dict[str, float], lock: threading.Lock, resets: list[float]) -> None:
        super().__init__(env, clock, lock)
        self.resets = resets

    def reset(self, task: Query) -> Observation:
        started = time.perf_counter()
        try:
            return super().reset(task)
        finally:
            self.resets.append(time.perf_counter() - started)


def engine_run(seeds: int, workers: int) -> dict[str, float]:
    resets: list[float] = []
    report, env_s = run(
        seeds,
        workers,
        [f"desktop:{task}" for task in TASKS],
        MAX_STEPS,
        lambda env, clock, lock: ResetTimed(env, clock, lock, resets),
    )
    reset_s = sum(resets)
    step_s = (env_s - reset_s) / max(report.steps, 1)
    engine_s = max(report.seconds * workers - env_s, 0.0) / max(report.steps, 1)
    return {
        "episodes": report.completed,
        "steps": report.steps,
        "steps_s": report.steps / report.seconds,
        "reset_ms": 1000 * reset_s / max(len(resets), 1),
        "step_ms": 1000 * step_s,
        "engine_ms": 1000 * engine_s,
    }


def bare_run(episodes: int) -> dict[str, float]:
    """The baseline: galculator on one display, clicks and screenshots through bare calls."""
    from PIL import ImageGrab

    rng = random.Random(0)
    display = Display(1024, 768)
    resets, steps, started_all = [], 0, time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as home:
            for _ in range(episodes):
                started = time.perf_counter()
                app = display.launch(["galculator"], Path(home))
                while not display.windows(app.pid):
                    time.sleep(0.02)
                resets.append(time.perf_counter() - started)
                for _ in range(MAX_STEPS):
                    x, y = rng.randrange(10, 320), rng.randrange(150, 330)
                    subprocess.run(
                        ["xdotool", "mousemove", str(x), str(y), "click", "1"], env=display.env, check=True
                    )
                    ImageGrab.grab(xdisplay=f":{display.number}").save(
                        "/dev/null", format="PNG", compress_level=1
                    )
                    steps += 1
                kill_group(app)
    finally:
        display.close()
    seconds = time.perf_counter() - started_all - sum(resets)
    return {
        "steps_s": steps / seconds,
        "reset_ms": 1000 * sum(resets) / len(resets),
        "step_ms": 1000 * seconds / steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=4, help="per task")
    parser.add_argument("--workers", default="1,2,4", help="display counts")
    args = parser.parse_args()
    lacking = DesktopSuite.builtin().missing()
    if lacking:
        print(f"bench_desktop: skipped, missing {', '.join(lacking)} (apt-get install {' '.join(lacking)})")
        return
    bare = bare_run(args.seeds * len(TASKS))
    rows = [["bare xdotool (baseline)", "1", "", f"{bare['steps_s']:.2f}", "1.00x", f"{bare['reset_ms']:.0f}",
             f"{bare['step_ms']:.0f}", "", ""]]  # fmt: skip
    for workers in worker_counts(args.workers):
        got = engine_run(args.seeds, workers)
        share = got["engine_ms"] / (got["engine_ms"] + got["step_ms"])
        rows.append(
            [
                "trajforge",
                f"{workers}",
                f"{got['episodes']:.0f} ({got['steps']:.0f} steps)",
                f"{got['steps_s']:.2f}",
                f"{got['steps_s'] / bare['steps_s']:.2f}x",
                f"{got['reset_ms']:.0f}",
                f"{got['step_ms']:.0f}",
                f"{got['engine_ms']:.0f}",
                f"{share:.0%}",
            ]
        )
    header = ["loop", "displays", "episodes", "steps/s", "vs bare", "reset ms", "env ms/step",
              "engine ms/step", "engine share"]  # fmt: skip
    title = (
        f"Desktop rollouts, random explorer, {len(TASKS)} tasks x {args.seeds} seeds, <= {MAX_STEPS} steps"
    )
    print(table(title, header, rows))


if __name__ == "__main__":
    main()
