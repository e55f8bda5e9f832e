"""A device farm against a slow model endpoint: do requests keep every device busy?

64 simulated phones roll a VLM policy out against the scripted OpenAI-compatible server with a
300 ms latency. Each device waits for its model call between steps, so the farm cannot beat
`devices / latency` steps/s; nor can it beat what this machine's client does with an instant
endpoint (rendering, encoding and storing steps), measured first. The bound is the lesser of the
two. The same rollout runs with the engine's defaults (policy concurrency = the farm's devices)
and with the old ones (every stage sharing `llm.concurrency`, 16).

After the rollout, the round's model critics, model-written CSRS and curation (thoughts,
guidance, bottleneck) run on the same endpoint: the table gives calls per rolled-out step by
stage. The policy reasons (`<think>`), as a thought-writing checkpoint does, so thoughts are its
own; the critics' one request per episode also writes the CSRS answers (issue 76's target: at
most 1.5 calls per step in all, the policy's included).

Screens are 360x800 (the apps' layout scaled down), so that on a 2-core machine the client's own
image work stays above the endpoint's bound and the run measures the request path, not PNG
encoding; `--screen 1080x2400` measures a phone-sized farm.
Usage: python -m bench.bench_model_farm [--devices 64] [--latency-ms 300] [--queries 16]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.common import scripted_server, table
from critics.stages import calibrate, judge
from curation.stages import curate_with
from evolve import lifecycle
from evolve.spine import Spine, new_spine
from querygen.pipeline import generate_queries, store_generation
from rollout.loop import play
from rollout.policies import VLMPolicy, VLMPolicyConfig
from rollout.pool import DevicePool
from rollout.runner import RolloutConfig
from rollout.sim.farm import SimFarm
from rollout.versions import policy_llm
from storage.db import transaction
from storage.llm_cache import usage_by_stage
from storage.models import Round
from storage.policies import register_policy
from trajforge.actions import Screen
from trajforge.appspec import builtin_app_names, load_app
from trajforge.domain import Query
from trajforge.gateway import LLMGateway
from trajforge.settings import load_settings

# A Qwen2.5-VL mobile_use tap with its reasoning, then the model stages' JSON: the policy reads the
# thought and the tool call, the episode judge, the CSRS writer and guidance the last JSON object.
_KNOWN = {"state_summary": "a list", "progress_tracking": "half done", "state_verification": "no"}
_STEPS = [
    {"step": n, "label": "GOOD", "summary": "tapped", "analysis": "a", "self_reflection": "GOOD: yes"}
    | _KNOWN
    | {"effect_prediction": "the next screen", "outcome": "tapped the item", "as_intended": True}
    for n in range(1, 33)
]
CONTENT = (
    "<think>The item I need is on the left; tap it.</think>\n"
    '<tool_call>{"name": "mobile_use", "arguments": {"action": "click", "coordinate": [200, 400]}}'
    "</tool_call>\n"
    + json.dumps({"steps": _STEPS, "analysis": "a", "verdict": "incorrect", "guidance": "1. Tap the item."})
)
OLD_CONCURRENCY = 16  # llm.concurrency, shared by every stage before the policy had its own


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--devices 2 --latency-ms 5 --queries 1 --rollouts 1 --max-steps 2 --screen 180x400"


class CountingGateway(LLMGateway):
    """The gateway, counting the requests it has in flight."""

    in_flight = 0
    peak = 0

    async def _with_retries(self, params: dict[str, Any], stage: str, route: Any) -> tuple[Any, int]:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await super()._with_retries(params, stage, route)
        finally:
            self.in_flight -= 1


@dataclass
class Run:
    steps: int
    seconds: float
    peak: int

    @property
    def rate(self) -> float:
        return self.steps / self.seconds


def spine_for(home: Path, url: str, policy_concurrency: int | None) -> Spine:
    llm: dict[str, Any] = {"base_url": url, "model": "bench", "max_retries": 0, "timeout_s": 60}
    if policy_concurrency is not None:
        llm["policy"] = {"concurrency": policy_concurrency}
    config = home / "run.yaml"
    home.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump({"home": str(home), "llm": llm, "trainer": {"action_format": "qwen"}}))
    return new_spine(load_settings(config))


def queries_for(spine: Spine, per_app: int) -> list[Query]:
    out: list[Query] = []
    for name in builtin_app_names():
        report = generate_queries(load_app(name), per_app, seed=0)
        store_generation(spine.sessions, load_app(name), report)
        out.extend(report.kept)
    return out


def roll(spine: Spine, devices: int, queries: list[Query], args: argparse.Namespace) -> tuple[int, Run]:
    """One rollout of `queries` on `devices` phones; the round's id and the figures."""
    farm = SimFarm(None, store=spine.store)
    farm.screen = Screen(*map(int, args.screen.split("x")))
    pool = DevicePool(spine.sessions)
    farm.register(pool, devices)
    with transaction(spine.sessions) as s:
        policy_id = register_policy(s, "vlm", 0)
        round_id = lifecycle.open_round(s, policy_id).id
    gateway = CountingGateway(policy_llm(spine.settings.llm, devices))  # no cache: every step pays
    config = VLMPolicyConfig.from_settings(spine.settings.policy, name="vlm", model="bench", format="qwen")
    rollout = RolloutConfig(rollouts_per_query=args.rollouts, workers=devices, max_steps=args.max_steps)
    started = time.perf_counter()
    report, _ = play(
        spine, farm, pool, round_id, policy_id, queries, lambda: VLMPolicy(config, gateway, spine.frames),
        rollout, backend="sim", gateway_to_close=gateway,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    return round_id, Run(report.steps, seconds, gateway.peak)


def judge_and_write(spine: Spine, round_id: int) -> Counter[str]:
    """The round's model critics, CSRS and curation on the same endpoint: paid calls by stage."""
    with spine.sessions() as s:
        row = s.get(Round, round_id)
        assert row is not None
    judge(spine, row.number, {})
    calibrate(spine, row.number, {})
    curate_with(spine, row.number, None)
    return Counter({stage: u.calls for stage, u in usage_by_stage(spine.sessions, round_id).items()})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=300.0)
    parser.add_argument("--queries", type=int, default=16, help="per app (4 apps)")
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--rollouts", type=int, default=4, help="per query")
    parser.add_argument("--screen", default="360x800")
    args = parser.parse_args()
    runs: dict[str, Run] = {}
    with tempfile.TemporaryDirectory() as tmp:

        def run(name: str, url: str, concurrency: int | None) -> tuple[Spine, int]:
            spine = spine_for(Path(tmp) / name, url, concurrency)
            round_id, runs[name] = roll(spine, args.devices, queries_for(spine, args.queries), args)
            return spine, round_id

        with scripted_server(0.0, CONTENT) as url:
            run("warm-up", url, None)  # imports, fonts and first renders: not measured
            run("instant", url, None)
        with scripted_server(args.latency_ms, CONTENT) as url:
            run("old", url, OLD_CONCURRENCY)
            stages = judge_and_write(*run("new", url, None)) + Counter(policy=runs["new"].steps)
    report(args, runs, stages)


def report(args: argparse.Namespace, runs: dict[str, Run], stages: Counter[str]) -> None:
    latency = args.latency_ms / 1000
    endpoint_bound = args.devices / latency
    bound = min(endpoint_bound, runs["instant"].rate)
    rows = [
        [name, str(r.steps), f"{r.seconds:.1f}", f"{r.rate:.1f}", str(r.peak), f"{r.rate / bound:.0%}"]
        for name, r in (
            ("instant endpoint (client capacity)", runs["instant"]),
            (f"old defaults (policy concurrency {OLD_CONCURRENCY})", runs["old"]),
            (f"defaults (policy concurrency = {args.devices} devices)", runs["new"]),
        )
    ]
    print(
        table(
            f"{args.devices} simulated {args.screen} phones, a {args.latency_ms:g} ms endpoint: bound "
            f"{bound:.1f} steps/s = min({args.devices}/{latency:g}s = {endpoint_bound:.1f}, client capacity "
            f"{runs['instant'].rate:.1f})",
            ["run", "steps", "seconds", "steps/s", "max in flight", "of bound"],
            rows,
        )
    )
    steps = runs["new"].steps
    by_stage = [[stage, str(n), f"{n / steps:.2f}"] for stage, n in sorted(stages.items())]
    by_stage.append(["all", str(sum(stages.values())), f"{sum(stages.values()) / steps:.2f}"])
    print(
        table(
            f"model calls per rolled-out step, by stage ({steps} steps)",
            ["stage", "calls", "per step"],
            by_stage,
        )
    )
    new, old = runs["new"], runs["old"]
    print(
        f"defaults vs old defaults: {new.rate / old.rate:.2f}x steps/s; {new.rate / bound:.0%} of the bound\n"
    )


if __name__ == "__main__":
    main()
