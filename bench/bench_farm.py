"""Farm scale: does one engine process keep N latency-bound devices and a model endpoint busy?

Each device stands in for a cloud emulator: `reset` and `step` block their thread for
`--step-s` (an adb or HTTP round trip); the policy stands in for a VLM endpoint and answers
after `--policy-s` (an awaited call, as the gateway's is). Episodes are 10 steps (9 taps and
a terminate). The bound is N / (step + policy) steps/s; resets cost one more device call per
episode, so a perfect engine reaches 10/10.5 = 95% of it. Every device call returns a new
1080x2400 PNG that is hashed and put into a local object store, as the sim and web devices do
(`--no-frames`: one fixed hash, the engine's bookkeeping alone).

Baseline, in the same run: the runner as it was, every device call on asyncio's default
executor, min(32, cores + 4) threads (`io_threads` set to that), one episode per device.

Usage: python -m bench.bench_farm [--sizes 8,64,256] [--step-s 1 --policy-s 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import tempfile
import time
from pathlib import Path

from bench.common import list_screens, table
from querygen.pipeline import generate_queries, store_generation
from rollout.policies.base import PolicyOutput
from rollout.pool import DevicePool, Lease
from rollout.runner import EpisodeRunner, RolloutConfig, RolloutReport
from storage.db import create_db_engine, session_factory, upgrade
from storage.objectstore import LocalObjectStore, ObjectStore, put_blob
from tests.support.spine import new_round
from trajforge.actions import Action, ActionKind, Screen, get_codec
from trajforge.appspec import builtin_app_names, load_app
from trajforge.domain import Observation, Query
from trajforge.world.verify import VerifierResult

STEPS = 10
FRAME = "ab" * 32  # the same screenshot hash every step: the bench measures the engine, not PNGs
SCREEN = Screen(1080, 2400)
CANONICAL = get_codec("canonical")
TAP = CANONICAL.format(Action(kind=ActionKind.CLICK, point=(500, 500)), SCREEN)
DONE = CANONICAL.format(Action(kind=ActionKind.TERMINATE, status="success"), SCREEN)


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--sizes 4 --step-s 0.01 --policy-s 0.01 --episodes-per-device 1 --baseline-max 4 --no-frames"


class LatencyDevice:
    """A device whose every call blocks its thread for `latency` seconds; with a store, every
    observation is a new PNG screenshot the device hashes and puts, as the sim and web devices do."""

    def __init__(self, latency: float, store: ObjectStore | None, frames: list[bytes]) -> None:
        self.latency, self.store, self.frames = latency, store, frames

    def _observe(self) -> Observation:
        time.sleep(self.latency)
        sha = FRAME
        if self.store is not None:  # a unique frame: trailing bytes after IEND change the hash only
            png = self.frames[random.randrange(len(self.frames))] + os.urandom(8)
            sha, _ = put_blob(self.store, png)
        return Observation(screenshot=sha, width=SCREEN.width, height=SCREEN.height, elements=[])

    def reset(self, task: Query) -> Observation:
        return self._observe()

    def step(self, action: Action) -> Observation:
        return self._observe()

    def verify(self) -> VerifierResult:
        return VerifierResult(True)

    def close(self) -> None:
        return None


class LatencyPolicy:
    """A model endpoint that answers after `latency` seconds: taps, then terminate."""

    name, version = "latency-policy", 0

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self._steps = 0

    def start(self, query: Query, seed: str, guidance: str | None = None, rollout: int = 0) -> None:
        self._steps = 0

    async def act(self, observation: Observation) -> PolicyOutput:
        await asyncio.sleep(self.latency)
        self._steps += 1
        return PolicyOutput(DONE if self._steps >= STEPS else TAP, "canonical")


def _queries(sessions, n: int) -> list[Query]:
    names = builtin_app_names()
    out: list[Query] = []
    for name in names:
        report = generate_queries(load_app(name), -(-n // len(names)), seed=0)
        store_generation(sessions, load_app(name), report)
        out.extend(report.kept)
    return out


def run(
    devices: int, per_device: int, step_s: float, policy_s: float, io_threads: int, frames: list[bytes]
) -> tuple[RolloutReport, float]:
    """(report, engine CPU seconds) for `devices` devices each playing `per_device` episodes."""
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_db_engine(f"sqlite:///{Path(tmp) / 'bench.db'}")
        upgrade(engine)
        sessions = session_factory(engine)
        rollouts = 4
        queries = _queries(sessions, devices * per_device // rollouts)[: devices * per_device // rollouts]
        ids = new_round(sessions)
        pool = DevicePool(sessions)
        for i in range(devices):
            pool.register(f"emu-{i}", "sim")
        config = RolloutConfig(
            rollouts_per_query=rollouts,
            workers=devices,
            max_steps=STEPS + 2,
            io_threads=io_threads,
            step_timeout_s=60 * (step_s + policy_s) + 5,
            lease_wait_s=600,
        )

        store = LocalObjectStore(Path(tmp) / "objects") if frames else None

        def envs(_: Lease) -> LatencyDevice:
            return LatencyDevice(step_s, store, frames)

        runner = EpisodeRunner(sessions, pool, envs, lambda: LatencyPolicy(policy_s), config)
        cpu = time.process_time()
        report = asyncio.run(runner.run(queries, *ids))
        return report, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="8,64,256", help="farm sizes N")
    parser.add_argument("--step-s", type=float, default=1.0, help="device latency per reset/step")
    parser.add_argument("--policy-s", type=float, default=1.0, help="model latency per step")
    parser.add_argument("--episodes-per-device", type=int, default=2)
    parser.add_argument("--baseline-max", type=int, default=64, help="largest N the slow baseline runs at")
    parser.add_argument("--no-frames", action="store_true", help="no PNG hashed and stored per step")
    args = parser.parse_args()
    frames = [] if args.no_frames else list_screens(16)
    default_threads = min(32, (os.cpu_count() or 1) + 4)
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        bound = n / (args.step_s + args.policy_s)
        report, cpu = run(n, args.episodes_per_device, args.step_s, args.policy_s, 0, frames)
        rate = report.steps / report.seconds
        base_cell = "—"
        if n <= args.baseline_max:
            base, _ = run(n, 1, args.step_s, args.policy_s, default_threads, frames)
            base_rate = base.steps / base.seconds
            base_cell = f"{base_rate:.1f} ({base_rate / bound:.0%}); now {rate / base_rate:.1f}x"
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rows.append(
            [
                str(n),
                f"{report.completed}/{report.requested}",
                f"{rate:.1f}",
                f"{bound:.1f}",
                f"{rate / bound:.0%}",
                f"{1000 * cpu / max(report.steps, 1):.2f}",
                f"{peak_mb:.0f}",
                base_cell,
            ]
        )
    header = [
        "N",
        "episodes",
        "steps/s",
        "bound",
        "of bound",
        "engine CPU ms/step",
        "peak RSS MB",
        f"baseline: default executor ({default_threads} threads), steps/s",
    ]
    title = (
        f"farm throughput: devices {args.step_s:g} s per call, policy {args.policy_s:g} s per step, "
        f"{STEPS}-step episodes, {os.cpu_count()} cores, SQLite, "
        + ("no frames" if not frames else f"a new {len(frames[0]) // 1024} KB PNG hashed and stored per call")
    )
    print(table(title, header, rows))


if __name__ == "__main__":
    main()
